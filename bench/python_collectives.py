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

With the backend "replicator" the worker also times the same calls made from C++ inside the
same job (replicator._replicator._time_all_reduce: ReplicaContext::all_reduce in a loop on the
backend's thread, as the C++ benchmark makes them), each repeat beside a Python repeat, C++
first in odd repeats and last in even ones; "paired" is the median over repeats of each pair's
ratio Python/C++. It weighs what the Python path adds without the launch-to-launch spread of
two separate launches (up to 25 % within an hour on this machine).
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
    backend = None
    if args.backend == "replicator":
        from replicator import _replicator

        backend = dist.group.WORLD._get_backend(torch.device("cpu"))
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
        def python_loop():
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(t)
            return (time.perf_counter() - start) / iters

        def cpp_loop():
            dist.barrier()
            return _replicator._time_all_reduce(backend, t, iters) / iters

        times, cpp_times, ratios = [], [], []
        for repeat in range(args.repeats):
            if backend is None:
                times.append(python_loop())
                continue
            if repeat % 2 == 0:
                c = cpp_loop()
                y = python_loop()
            else:
                y = python_loop()
                c = cpp_loop()
            times.append(y)
            cpp_times.append(c)
            ratios.append(c / y)  # busbw Python / C++
        t_med = statistics.median(times)
        factor = 2 * (world - 1) / world * size / 1e9
        if dist.get_rank() == 0:
            row = {"type": "python_all_reduce", "backend": args.backend, "processes": world,
                   "bytes": size, "iters": iters, "time_us": t_med * 1e6,
                   "busbw_gbps": factor / t_med}
            if ratios:
                c_med = statistics.median(cpp_times)
                row.update({"cpp_time_us": c_med * 1e6, "cpp_busbw_gbps": factor / c_med,
                            "paired_ratio": statistics.median(ratios),
                            "pair_ratios": ratios})
            print(json.dumps(row), flush=True)
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
    worst, worst_paired = {}, {}
    for run in range(1, args.runs + 1):
        c = rows(cpp, env)
        copy = next((r["copy_gbps"] for r in c if r.get("type") == "memory"), None)
        c = {r["bytes"]: r for r in c
             if r.get("type") == "collective" and r.get("engine") == "gloo"}
        y = {r["bytes"]: r for r in rows(py, env) if r.get("type") == "python_all_reduce"}
        print(f"run {run}: copy bandwidth {copy:.1f} GB/s (C++ run)")
        print(f"  {'size':>8} {'C++ GB/s':>9} {'Python GB/s':>12} {'Python/C++':>10}"
              f" {'in-job C++':>10} {'paired':>7}")
        for size in SIZES:
            ratio = y[size]["busbw_gbps"] / c[size]["busbw_gbps"]
            paired = y[size].get("paired_ratio")
            worst[size] = min(worst.get(size, ratio), ratio)
            if paired is not None:
                worst_paired[size] = min(worst_paired.get(size, paired), paired)
            in_job = y[size].get("cpp_busbw_gbps")
            print(f"  {size >> 20:>6} MiB {c[size]['busbw_gbps']:>9.2f} "
                  f"{y[size]['busbw_gbps']:>12.2f} {ratio:>10.2f}"
                  + (f" {in_job:>10.2f} {paired:>7.2f}" if paired is not None else ""))
            if log:
                log.write(json.dumps({"run": run, "bytes": size, "copy_gbps": copy,
                                      "cpp_busbw_gbps": c[size]["busbw_gbps"],
                                      "python_busbw_gbps": y[size]["busbw_gbps"],
                                      "ratio": ratio, "in_job_cpp_busbw_gbps": in_job,
                                      "paired_ratio": paired,
                                      "pair_ratios": y[size].get("pair_ratios")}) + "\n")
    print("worst Python/C++ over the runs, separate launches: " +
          ", ".join(f"{s >> 20} MiB {worst[s]:.2f}" for s in SIZES))
    if worst_paired:
        print("worst Python/C++ over the runs, paired in one launch: " +
              ", ".join(f"{s >> 20} MiB {worst_paired[s]:.2f}" for s in SIZES))


if __name__ == "__main__":
    main()
