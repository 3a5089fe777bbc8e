"""Our CartPole against gymnasium's CartPole-v1, from the same states with the same actions.

Usage: conformance_cartpole.py ENV_DUMP [--cases N]

Each case sets gymnasium's state (env.unwrapped.state, float64) and ours to the same start,
then steps both. Observations must agree within 1e-6, rewards, actions and flags exactly.
Exits 1 on any difference.

- Random states and random actions, free-running until the episode ends.
- Start states of the reset range under a balancing controller (on gymnasium) that reaches
  the 500-step limit (truncated, not terminated). These run long enough for chaos to show:
  numpy (1.24, on AVX-512 machines) computes float64 sin and cos with its own SIMD kernels,
  which differ from glibc's by an ulp for about half the angles, and the cart-pole's
  open-loop dynamics grow a difference about e^(4 t) (t in seconds), so over 10 s two
  correct implementations part. Our env therefore replays the reference's actions with its
  float64 state set to the reference's before every step (the step count runs on): every
  step's dynamics and the time limit are checked, from the reference's states.
"""
import argparse
import json
import subprocess
import sys

import gymnasium as gym
import numpy as np


def pd_action(obs):
    x, x_dot, theta, theta_dot = (float(v) for v in obs)
    return 1 if theta * 10.0 + theta_dot * 2.0 + x * 0.1 + x_dot * 0.5 > 0.0 else 0


def reference(env, state, actions=None, steps=None):
    env.reset(seed=0)
    env.unwrapped.state = np.array(state, dtype=np.float64)
    obs = np.array(state, dtype=np.float32)
    out = {"actions": [], "obs": [obs], "reward": [], "terminated": [], "truncated": [],
           "states": []}
    n = len(actions) if actions is not None else steps
    for t in range(n):
        a = actions[t] if actions is not None else pd_action(obs)
        out["states"].append([float(v) for v in env.unwrapped.state])
        obs, reward, terminated, truncated, _ = env.step(a)
        out["actions"].append(a)
        out["obs"].append(obs)
        out["reward"].append(float(reward))
        out["terminated"].append(bool(terminated))
        out["truncated"].append(bool(truncated))
        if terminated or truncated:
            break
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("env_dump")
    parser.add_argument("--cases", type=int, default=400)
    args = parser.parse_args()
    rng = np.random.default_rng(2024)
    cases = []
    for _ in range(args.cases):
        state = rng.uniform([-2.0, -1.5, -0.2, -1.5], [2.0, 1.5, 0.2, 1.5]).tolist()
        actions = rng.integers(0, 2, size=int(rng.integers(1, 120))).tolist()
        cases.append({"env": "cartpole", "state": state, "actions": actions})
    env = gym.make("CartPole-v1")
    for _ in range(max(args.cases // 20, 5)):
        state = rng.uniform(-0.05, 0.05, size=4).tolist()
        ref = reference(env, state, steps=600)
        cases.append({"env": "cartpole", "state": state, "actions": ref["actions"],
                      "states": ref["states"]})
    proc = subprocess.run([args.env_dump], input="".join(json.dumps(c) + "\n" for c in cases),
                          capture_output=True, text=True, check=True)
    ours = [json.loads(line) for line in proc.stdout.splitlines()]
    failures, steps, exact, worst, truncations, terminations = 0, 0, 0, 0.0, 0, 0
    for i, (case, mine) in enumerate(zip(cases, ours)):
        ref = reference(env, case["state"], case.get("actions"), case.get("steps"))
        # A replayed case: the reference ran it already; re-running gives the same.
        problems = []
        for key in ("actions", "reward", "terminated", "truncated"):
            if mine[key] != ref[key]:
                problems.append(f"{key}: ours {mine[key][-5:]} ref {ref[key][-5:]}")
        a, b = np.array(mine["obs"], dtype=np.float32), np.array(ref["obs"], dtype=np.float32)
        if a.shape != b.shape:
            problems.append(f"length: ours {len(a)} ref {len(b)}")
        else:
            diff = np.abs(a - b).max()
            worst = max(worst, float(diff))
            exact += int((a == b).all(axis=1).sum())
            steps += len(a)
            if diff > 1e-6:
                problems.append(f"observations differ by {diff:g}")
        truncations += int(any(ref["truncated"]))
        terminations += int(any(ref["terminated"]))
        if problems:
            failures += 1
            if failures <= 5:
                kind = "resync" if "states" in case else "free"
                print(f"case {i} ({kind}): " + "; ".join(problems))
    print(f"cartpole: {len(cases)} cases, {steps} observations, {exact} bitwise equal, "
          f"largest difference {worst:g}; {terminations} terminated, {truncations} truncated "
          f"at 500 steps; {failures} cases differ")
    if len(ours) != len(cases) or truncations == 0:
        print("cartpole: missing results or no case reached the time limit")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
