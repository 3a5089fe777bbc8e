"""Our half_cheetah against gymnasium's HalfCheetah-v5 (the same model file, MuJoCo from PyPI).

Usage: conformance_half_cheetah.py ENV_DUMP [--episodes N] [--steps T] [--seeds K]

1. Steps. Our env, seeded, plays T random actions; before each, the reference is put in our
   state (qpos without x and qvel are the observation; x changes neither the dynamics nor
   the reward, which takes a difference of x) and takes the same action. Its observation and
   reward must agree with ours to 1e-3 (relative to 1 + |value|): the state passes through
   float32, and the two sides run different builds of MuJoCo (Debian's C library, PyPI's).
   Whole trajectories cannot be compared far: the cheetah's contacts are chaotic, and
   differences of 1e-7 grow past 1e-2 within 40-50 steps.
2. Distributions. N episodes of uniformly random actions on each side, from unrelated seeds:
   the episode return, and the start state's positions and velocities, compared by Welch's
   t-test and the two-sample Kolmogorov-Smirnov test; a p-value under 0.001 fails (the reset noise and the
   reward's two terms show there). Prints a table with means and 99% confidence intervals.
Exits 1 on any failure.
"""
import argparse
import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
from scipy import stats


# One step from the same state: the state passes through float32 (our observations), and
# the two sides run different builds of MuJoCo (Debian's 2.2.2, PyPI's 2.3.3).
TOLERANCE = 1e-3


def run_dump(env_dump, cases):
    proc = subprocess.run([env_dump], input="".join(json.dumps(c) + "\n" for c in cases),
                          capture_output=True, text=True, check=True)
    return [json.loads(line) for line in proc.stdout.splitlines()]


def reference_steps(observations, actions):
    """The reference's step from each of our states: put in the state of observations[t] (x at
    0: it changes neither the dynamics nor the reward), it takes actions[t]."""
    env = gym.make("HalfCheetah-v5")
    env.reset(seed=0)
    base = env.unwrapped
    nq = base.model.nq
    out = {"obs": [], "reward": []}
    for obs, a in zip(observations, actions):
        obs = np.asarray(obs, dtype=np.float64)
        base.set_state(np.concatenate(([0.0], obs[: nq - 1])), obs[nq - 1:])
        o, r, _, _, _ = env.step(np.asarray(a, dtype=np.float64))
        out["obs"].append(o.tolist())
        out["reward"].append(float(r))
    env.close()
    return out


def trajectory_check(env_dump, seeds, steps):
    rng = np.random.default_rng(12345)
    cases = []
    for seed in range(seeds):
        actions = rng.uniform(-1, 1, size=(steps, 6)).astype(np.float32).tolist()
        cases.append({"env": "half_cheetah", "seed": seed, "actions": actions})
    failures = 0
    worst_obs = worst_reward = 0.0
    for case, ours in zip(cases, run_dump(env_dump, cases)):
        ref = reference_steps(ours["obs"][:-1], case["actions"])
        ours_obs = np.asarray(ours["obs"][1:], dtype=np.float64)
        ref_obs = np.asarray(ref["obs"], dtype=np.float64)
        obs_err = np.abs(ours_obs - ref_obs) / (1.0 + np.abs(ref_obs))
        reward_err = np.abs(np.asarray(ours["reward"]) - np.asarray(ref["reward"]))
        worst_obs = max(worst_obs, float(obs_err.max()))
        worst_reward = max(worst_reward, float(reward_err.max()))
        if obs_err.max() > TOLERANCE or reward_err.max() > TOLERANCE:
            failures += 1
            step = int(np.argmax(np.maximum(obs_err.max(axis=1), reward_err)))
            print(f"trajectory: seed {case['seed']}: step {step} differs: obs "
                  f"{ours_obs[step].tolist()} against {ref_obs[step].tolist()}, reward "
                  f"{ours['reward'][step]} against {ref['reward'][step]}")
    print(f"steps: {seeds} seeds x {steps} steps; worst relative obs difference "
          f"{worst_obs:.2e}, worst reward difference {worst_reward:.2e}")
    return failures


def reference_episodes(seed, n):
    env = gym.make("HalfCheetah-v5")
    rng = np.random.default_rng(seed)
    returns, starts = [], []
    obs, _ = env.reset(seed=seed)
    for _ in range(n):
        starts.append(obs)
        total = 0.0
        while True:
            obs, r, terminated, truncated, _ = env.step(rng.uniform(-1, 1, size=6))
            total += r
            if terminated or truncated:
                break
        returns.append(total)
        obs, _ = env.reset()
    env.close()
    return np.asarray(returns), np.asarray(starts)


def ci99(x):
    return 2.576 * x.std(ddof=1) / np.sqrt(len(x))


def distribution_check(env_dump, n):
    ours_returns = np.asarray(run_dump(env_dump, [{"env": "half_cheetah", "seed": 7,
                                                   "episodes": n}])[0]["returns"])
    starts = run_dump(env_dump, [{"env": "half_cheetah", "seed": 1000 + s, "actions": []}
                                 for s in range(n)])
    ours_starts = np.asarray([s["obs"][0] for s in starts])
    ref_returns, ref_starts = reference_episodes(99, n)
    failures = 0
    print(f"\ndistributions: {n} episodes per side, uniform random actions\n")
    print("| quantity | ours | gymnasium | Welch p | KS p |")
    print("|---|---|---|---|---|")
    # The start state, pooled over its coordinates: positions (qpos without x, uniform noise)
    # and velocities (normal noise), each coordinate's noise the same.
    rows = [("episode return", ours_returns, ref_returns),
            ("start positions", ours_starts[:, :8].ravel(), ref_starts[:, :8].ravel()),
            ("start velocities", ours_starts[:, 8:].ravel(), ref_starts[:, 8:].ravel())]
    for name, a, b in rows:
        pw = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
        pk = float(stats.ks_2samp(a, b).pvalue)
        flag = " **fails**" if min(pw, pk) < 1e-3 else ""
        failures += 1 if flag else 0
        print(f"| {name} | {a.mean():.4f} ± {ci99(a):.4f} | {b.mean():.4f} ± {ci99(b):.4f} | "
              f"{pw:.3g} | {pk:.3g}{flag} |")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env_dump")
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--seeds", type=int, default=8)
    args = parser.parse_args()
    failures = trajectory_check(args.env_dump, args.seeds, args.steps)
    failures += distribution_check(args.env_dump, args.episodes)
    print(f"half_cheetah conformance: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
