#!/usr/bin/env python3
"""bench/ddp_train.py (PyTorch DDP, 2 processes) with the torch.distributed backend
"replicator" and with "gloo", run in turn for `--runs` rounds with the same memory setting as
`replicator bench train` (jemalloc, purging off); prints images/s of each run, the ratio
replicator / gloo of each round, and the copy bandwidth measured before each round. Usage:

    PYTHONPATH=build/python python bench/python_ddp.py --runs 3 [--out FILE.jsonl]
"""
import argparse
import json
import os
import subprocess
import sys

import torch

from copy_bandwidth import copy_gbps

HERE = os.path.dirname(os.path.abspath(__file__))
KEEP = {"LD_PRELOAD": "libjemalloc.so.2", "MALLOC_CONF": "dirty_decay_ms:-1,muzzy_decay_ms:-1"}




def images_per_s(backend, args):
    env = dict(os.environ, OMP_NUM_THREADS="1", **KEEP)
    command = [sys.executable, os.path.join(HERE, "ddp_train.py"), "--processes", "2",
               "--backend", backend, "--steps", str(args.steps), "--warmup", str(args.warmup)]
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            if row.get("type") == "train":
                return row["images_per_s"]
    sys.exit(f"no result line from {' '.join(command)}:\n{out.stdout[-2000:]}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--out", default="")
    args = p.parse_args()
    torch.set_num_threads(1)
    log = open(args.out, "a") if args.out else None
    worst = None
    for run in range(1, args.runs + 1):
        bw = copy_gbps()
        ours = images_per_s("replicator", args)
        gloo = images_per_s("gloo", args)
        ratio = ours / gloo
        worst = ratio if worst is None else min(worst, ratio)
        print(f"run {run}: copy {bw:.1f} GB/s; DDP on replicator {ours:.0f} images/s, "
              f"on gloo {gloo:.0f} images/s, replicator/gloo = {ratio:.2f}", flush=True)
        if log:
            log.write(json.dumps({"run": run, "copy_gbps": bw, "replicator_images_per_s": ours,
                                  "gloo_images_per_s": gloo, "ratio": ratio}) + "\n")
    print(f"worst replicator/gloo over {args.runs} runs: {worst:.2f}")


if __name__ == "__main__":
    main()
