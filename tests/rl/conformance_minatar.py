"""Our MinAtar games against the minatar package (1.0.15).

Usage: conformance_minatar.py ENV_DUMP [--episodes N] [--exact-steps T] [--games ...]

1. Exact trajectories. Our games draw from numpy's RandomState algorithm (MT19937 with
   numpy's rand() and legacy randint), so a reference Environment seeded with the seed our
   env reports replays the same game: the same random actions for T steps, with sticky
   actions 0.1 (and once each with 0 and without ramping), must give the same observations,
   rewards and episode ends, through the resets. minatar's `done` is our terminated or
   truncated (Freeway's clock is reported as truncated; the reference says game over).
2. Distributions. N episodes of uniformly random actions on each side, from unrelated
   seeds (independent samples), default settings (sticky 0.1, ramping): episode return and
   length compared by Welch's t-test and the two-sample Kolmogorov-Smirnov test; a p-value
   under 0.001 fails. Prints a table with means and 99% confidence intervals.
Exits 1 on any failure.
"""
import argparse
import json
import random
import subprocess
import sys
import time

import numpy as np
from scipy import stats

from minatar import Environment

GAMES = ["breakout", "space_invaders", "freeway", "asterix", "seaquest"]


def run_dump(env_dump, cases):
    proc = subprocess.run([env_dump], input="".join(json.dumps(c) + "\n" for c in cases),
                          capture_output=True, text=True, check=True)
    return [json.loads(line) for line in proc.stdout.splitlines()]


def bits(state):
    return "".join("1" if v else "0" for v in np.asarray(state, dtype=bool).reshape(-1))


def reference_trajectory(game, numpy_seed, actions, sticky, ramping):
    env = Environment(game, sticky_action_prob=sticky, difficulty_ramping=ramping)
    env.seed(numpy_seed)
    env.reset()
    out = {"obs": [bits(env.state())], "reward": [], "done": []}
    done = False
    for a in actions:
        if done:
            env.reset()
            reward, done = 0, False
        else:
            reward, done = env.act(a)
        out["obs"].append(bits(env.state()))
        out["reward"].append(float(reward))
        out["done"].append(bool(done))
    return out


def exact_check(env_dump, games, steps):
    cases = []
    for game in games:
        for k, (sticky, ramping) in enumerate([(0.1, True)] * 4 + [(0.0, True), (0.1, False)]):
            rnd = random.Random(f"{game}-{k}")
            actions = [rnd.randrange(6) for _ in range(steps)]
            cases.append({"env": game, "seed": 7 + 13 * k, "sticky": sticky, "ramping": ramping,
                          "actions": actions})
    ours = run_dump(env_dump, cases)
    failures = 0
    for case, mine in zip(cases, ours):
        game = case["env"]
        ref = reference_trajectory(game, mine["numpy_seed"], case["actions"], case["sticky"],
                                   case["ramping"])
        done = [a or b for a, b in zip(mine["terminated"], mine["truncated"])]
        wrong_flag = [t for t, d in enumerate(done) if d and
                      mine["truncated"][t] != (game == "freeway")]
        first = next((t for t in range(len(ref["obs"])) if mine["obs"][t] != ref["obs"][t]
                      or (t > 0 and (mine["reward"][t - 1] != ref["reward"][t - 1]
                                     or done[t - 1] != ref["done"][t - 1]))), None)
        episodes = sum(done)
        label = f"{game} seed {case['seed']} sticky {case['sticky']} ramping {case['ramping']}"
        if first is not None or wrong_flag:
            failures += 1
            print(f"exact: {label}: first difference at step {first}; "
                  f"wrong terminated/truncated at {wrong_flag[:3]}")
        else:
            print(f"exact: {label}: {len(case['actions'])} steps, {episodes} episodes, "
                  f"return {sum(mine['reward']):g}: identical")
    return failures


def reference_episodes(game, seed, n):
    env = Environment(game)
    env.seed(seed)
    rng = np.random.default_rng(seed)
    returns, lengths = [], []
    for _ in range(n):
        env.reset()
        total, length, done = 0.0, 0, False
        while not done:
            reward, done = env.act(int(rng.integers(6)))
            total += reward
            length += 1
        returns.append(total)
        lengths.append(length)
    return np.array(returns), np.array(lengths)


def ci99(x):
    if len(x) < 2 or np.std(x) == 0:
        return 0.0
    return float(stats.t.ppf(0.995, len(x) - 1) * np.std(x, ddof=1) / np.sqrt(len(x)))


def compare(a, b):
    """Welch's t-test and KS p-values; equal constants compare as p = 1."""
    if np.std(a) == 0 and np.std(b) == 0:
        p = 1.0 if a[0] == b[0] else 0.0
        return p, p
    return (float(stats.ttest_ind(a, b, equal_var=False).pvalue),
            float(stats.ks_2samp(a, b).pvalue))


def distribution_check(env_dump, games, n):
    cases = [{"env": g, "seed": 20240 + i, "episodes": n} for i, g in enumerate(games)]
    start = time.time()
    ours = run_dump(env_dump, cases)
    ours_s = time.time() - start
    print(f"\ndistributions: {n} episodes per game and side, uniform random actions, "
          f"sticky 0.1, ramping (ours: {ours_s:.1f} s for all games)")
    header = (f"| game | side | return mean ± 99% CI | length mean ± 99% CI | "
              f"return p (Welch / KS) | length p (Welch / KS) |")
    print(header)
    print("|" + "---|" * 6)
    failures = 0
    for i, (game, mine) in enumerate(zip(games, ours)):
        start = time.time()
        ref_r, ref_l = reference_episodes(game, 777 + i, n)
        ref_s = time.time() - start
        our_r, our_l = np.array(mine["returns"]), np.array(mine["lengths"])
        pr = compare(our_r, ref_r)
        pl = compare(our_l, ref_l)
        ok = min(pr + pl) >= 1e-3
        failures += 0 if ok else 1
        for side, r, l in (("ours", our_r, our_l), (f"minatar ({ref_s:.0f} s)", ref_r, ref_l)):
            ps = (f"{pr[0]:.3f} / {pr[1]:.3f} | {pl[0]:.3f} / {pl[1]:.3f}"
                  if side == "ours" else ("ok |" if ok else "FAIL |"))
            print(f"| {game} | {side} | {r.mean():.3f} ± {ci99(r):.3f} | "
                  f"{l.mean():.1f} ± {ci99(l):.1f} | {ps}" + (" |" if side == "ours" else ""))
    return failures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("env_dump")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--exact-steps", type=int, default=3000)
    parser.add_argument("--games", nargs="*", default=GAMES)
    args = parser.parse_args()
    failures = 0
    if args.exact_steps > 0:
        failures += exact_check(args.env_dump, args.games, args.exact_steps)
    if args.episodes > 0:
        failures += distribution_check(args.env_dump, args.games, args.episodes)
    print(f"minatar conformance: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
