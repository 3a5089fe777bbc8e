#!/usr/bin/env python3
"""all_reduce from Python through the torch.distributed backend "replicator", beside the C++
benchmark on the same engine (`replicator bench collectives`, gloo, 2 processes of one
replica each): busbw per size, the ratio Python / C++, and the memory bandwidth the C++ run
saw. Run sets are interleaved (C++, Python, C++, Python, ...). Usage:

    PYTHONPATH=build/python python bench/python_collectives.py --replicator build/replicator \\
        --runs 3 --out bench/results/<dir>/python_collectives.jsonl

A worker (started by `replicator launch`, RANK set) times dist.all_reduce of float32 tensors:
`--warmup` calls, then `--repeats` measurements of as many calls as fill about 0.3 s; the
median is reported, as the C++ benchmark does.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SIZES = [1 << 20, 4 << 20, 16 << 20, 64 << 20]


def worker(args):
    import torch
    import torch.distributed as dist

    import replicator.torch  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    world = dist.get_world_size()
    for size in SIZES:
        t = torch.ones(size // 4, dtype=torch.float32)
        for _ in range(args.warmup):
            dist.all_reduce(t)
        start = time.perf_counter()
        dist.all_reduce(t)
        one = max(time.perf_counter() - start, 1e-6)
        iters = max(3, int(0.3 / one))
        flag = torch.tensor([iters], dtype=torch.int64)
        dist.broadcast(flag, 0)  # every rank runs rank 0's count
        iters = int(flag.item())
        times = []
        for _ in range(args.repeats):
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(t)
            times.append((time.perf_counter() - start) / iters)
        t_med = statistics.median(times)
        busbw = 2 * (world - 1) / world * size / t_med / 1e9
        if dist.get_rank() == 0:
            print(json.dumps({"type": "python_all_reduce", "backend": args.backend,
                              "processes": world, "bytes": size, "iters": iters,
                              "time_us": t_med * 1e6, "busbw_gbps": busbw}), flush=True)
    dist.destroy_process_group()


def rows(command, env):
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    found = []
    for line in out.stdout.splitlines():
        text = line.split("] ", 1)[-1]
        if text.startswith("{"):
            found.append(json.loads(text))
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--replicator", default="build/replicator")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--backend", default="replicator")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default="")
    args = p.parse_args()
    if "RANK" in os.environ:
        return worker(args)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    launch = [args.replicator, "launch", "-n", "2", "--"]
    cpp = launch + [args.replicator, "bench", "collectives", "--collectives", "all_reduce",
                    "--min-bytes", "1M", "--max-bytes", "64M", "--step-factor", "4", "--json",
                    "--no-native"]
    py = launch + [sys.executable, os.path.abspath(__file__), "--backend", args.backend,
                   "--warmup", str(args.warmup), "--repeats", str(args.repeats)]
    log = open(args.out, "a") if args.out else None
    worst = {}
    for run in range(1, args.runs + 1):
        c = rows(cpp, env)
        copy = next((r["copy_gbps"] for r in c if r.get("type") == "memory"), None)
        c = {r["bytes"]: r for r in c
             if r.get("type") == "collective" and r.get("engine") == "gloo"}
        y = {r["bytes"]: r for r in rows(py, env) if r.get("type") == "python_all_reduce"}
        print(f"run {run}: copy bandwidth {copy:.1f} GB/s (C++ run)")
        print(f"  {'size':>8} {'C++ GB/s':>9} {'Python GB/s':>12} {'Python/C++':>10}")
        for size in SIZES:
            ratio = y[size]["busbw_gbps"] / c[size]["busbw_gbps"]
            worst[size] = min(worst.get(size, ratio), ratio)
            print(f"  {size >> 20:>6} MiB {c[size]['busbw_gbps']:>9.2f} "
                  f"{y[size]['busbw_gbps']:>12.2f} {ratio:>10.2f}")
            if log:
                log.write(json.dumps({"run": run, "bytes": size, "copy_gbps": copy,
                                      "cpp_busbw_gbps": c[size]["busbw_gbps"],
                                      "python_busbw_gbps": y[size]["busbw_gbps"],
                                      "ratio": ratio}) + "\n")
    print("worst Python/C++ over the runs: " +
          ", ".join(f"{s >> 20} MiB {worst[s]:.2f}" for s in SIZES))


if __name__ == "__main__":
    main()
