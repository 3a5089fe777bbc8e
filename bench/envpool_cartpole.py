"""EnvPool's CartPole-v1 frames per second, for `replicator bench rl-envs`.

Usage: envpool_cartpole.py --num-envs M --steps S --repeats R [--threads T]

Sync mode (batch_size = num_envs: every step() sends M actions and waits for M results),
uniformly random actions drawn beforehand. Prints one JSON line per repeat:
{"impl": "envpool", "env": "cartpole", "num_envs": M, "threads": T, "frames_per_s": F}.
T = 0 is EnvPool's default thread count.
"""
import argparse
import json
import time

import envpool
import numpy as np


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    m = args.num_envs
    env = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=m, batch_size=m,
                       num_threads=args.threads, seed=0)
    env.reset()
    actions = np.random.default_rng(0).integers(0, 2, size=(64, m), dtype=np.int32)
    for s in range(200):
        env.step(actions[s % 64])
    for _ in range(args.repeats):
        start = time.perf_counter()
        for s in range(args.steps):
            env.step(actions[s % 64])
        elapsed = time.perf_counter() - start
        print(json.dumps({"impl": "envpool", "env": "cartpole", "num_envs": m,
                          "threads": args.threads, "frames_per_s": args.steps * m / elapsed}),
              flush=True)


if __name__ == "__main__":
    main()
