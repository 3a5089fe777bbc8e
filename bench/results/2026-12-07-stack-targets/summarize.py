#!/usr/bin/env python3
"""The stack issue's throughput targets from the rounds in this folder (bench_*.N.txt):
prints a markdown table of every round and the worst. Usage: summarize.py [FOLDER]"""
import os
import re
import sys

folder = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
TARGETS = [  # (label, file, the summary line's label, target)
    ("bench train: local 2x1 / 1x1", "bench_train", "local 2x1 / local 1x1 (memory keep)", 1.8),
    ("bench train: gloo 2x1 / DDP gloo 2x1", "bench_train", "gloo 2x1 / DDP gloo 2x1 (keep)", 1.15),
    ("bench train: local 2x1 / mpi 2x1", "bench_train", "local 2x1 / mpi 2x1 (keep)", 0.95),
    ("bench gan: local 2x1 / 1x1", "bench_gan", "local 2x1 / local 1x1 (memory keep)", 1.7),
    ("bench gan: local 2x1 / DDP gloo 2x1", "bench_gan", "local 2x1 / DDP gloo 2x1 (keep)", 1.15),
    ("bench rl: job / PyTorch peer", "bench_rl", "job R=1 / pytorch peer", 2.0),
]
rounds = sorted(int(m.group(1)) for f in os.listdir(folder)
                if (m := re.fullmatch(r"bench_rl\.(\d+)\.txt", f)))


def figure(name, n, label):
    with open(os.path.join(folder, f"{name}.{n}.txt")) as f:
        for line in f:
            if line.startswith("# ") and line[2:].rstrip().startswith(label):
                return float(line.split()[-1])
    return None


print("| figure | target | " + " | ".join(f"run {n}" for n in rounds) + " | worst |")
print("| --- | --- | " + " | ".join("---:" for _ in rounds) + " | ---: |")
for label, name, line, target in TARGETS:
    values = [figure(name, n, line) for n in rounds]
    known = [v for v in values if v is not None]
    worst = min(known) if known else None
    cell = lambda v: "-" if v is None else (f"**{v:.2f}**" if v < target else f"{v:.2f}")
    print(f"| {label} | ≥ {target:g} | " + " | ".join(cell(v) for v in values) +
          f" | {cell(worst)} |")
