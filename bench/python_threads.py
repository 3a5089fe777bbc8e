#!/usr/bin/env python3
"""A data-parallel training loop in Python on replica threads: replicator.Replicator with 1
and with 2 local replicas, each replica training an MLP on its own batch (the same per-replica
batch; the gradients averaged in place by one fused all_reduce over their list per step);
prints samples/s for each and the ratio 2 / 1, for each of `--runs` interleaved run pairs,
with the machine's copy bandwidth measured before each pair. Usage:

    PYTHONPATH=build/python python bench/python_threads.py --runs 3

Each replica's torch kernels run on its own thread (torch.set_num_threads(1)); the GIL is
held only for the Python between kernels, and released in every kernel and collective.
"""
import argparse
import json
import time

import torch
import torch.nn as nn

import replicator
from copy_bandwidth import copy_gbps




def samples_per_s(replicas, args):
    rep = replicator.Replicator(local_replicas=replicas)

    def make(ctx):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(784, args.width), nn.ReLU(),
                              nn.Linear(args.width, args.width), nn.ReLU(),
                              nn.Linear(args.width, 10))
        gen = torch.Generator().manual_seed(1 + ctx.replica_id)
        x = torch.randn(args.batch, 784, generator=gen)
        y = torch.randint(0, 10, (args.batch,), generator=gen)
        return model, torch.optim.SGD(model.parameters(), lr=0.01), x, y

    state = rep.run(make)

    def train(steps):
        def step(ctx):
            model, opt, x, y = state[ctx.local_replica_id]
            params = list(model.parameters())
            for _ in range(steps):
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                ctx.all_reduce([p.grad for p in params], op="mean")  # one fused call
                opt.step()
        start = time.perf_counter()
        rep.run(step)
        return time.perf_counter() - start

    train(args.warmup)
    seconds = train(args.steps)
    return replicas * args.batch * args.steps / seconds


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)
    worst = None
    for run in range(1, args.runs + 1):
        bw = copy_gbps()
        one = samples_per_s(1, args)
        two = samples_per_s(2, args)
        ratio = two / one
        worst = ratio if worst is None else min(worst, ratio)
        if args.json:
            print(json.dumps({"type": "python_threads", "run": run, "copy_gbps": bw,
                              "samples_per_s_1": one, "samples_per_s_2": two, "ratio": ratio}))
        else:
            print(f"run {run}: copy {bw:.1f} GB/s; 1 replica {one:.0f} samples/s, "
                  f"2 replicas {two:.0f} samples/s, 2/1 = {ratio:.2f}")
    print(f"worst 2/1 over {args.runs} runs: {worst:.2f}")


if __name__ == "__main__":
    main()
