#!/usr/bin/env bash
# Compares replicator's all_reduce across processes with the engines' own all-reduce, and the
# hierarchical layout with plain processes, over the same sizes in one run of this script;
# prints three markdown tables:
#   (a) mpirun -np 2, 1 local replica each: ours on the mpi engine vs MPI_Allreduce
#   (b) replicator launch -n 2, 1 local replica each: ours on the gloo engine vs gloo::allreduce
#   (c) ours on mpi, R = 4 both ways: 2 processes x 2 local replicas vs 4 processes x 1
#
#   bench/compare_engines.sh [--min-bytes 4] [--max-bytes 64M] [--repeats 5] [--copy-bytes auto]
#   BUILD_DIR=build-bench bench/compare_engines.sh --max-bytes 1M
#
# BUILD_DIR (default ./build) holds the `replicator` program. f32 sum, in place; time = median
# of repeats of the per-call time, max over all replicas of all processes (see
# `replicator bench collectives --help`); the native rows come from the same runs as ours.
# Measurements last about 0.1 s each (adaptive iterations: few at large sizes). Exits
# non-zero if a run fails. Needs mpirun (openmpi-bin) and python3 (standard library only).
set -euo pipefail

build_dir="${BUILD_DIR:-./build}"
min_bytes=4
max_bytes=64M
repeats=5
copy_bytes=auto

usage_lines=2,16
# shellcheck source=bench/args.sh
source "$(dirname "$0")/args.sh"
parse_bench_args "$@"

bin="$build_dir/replicator"
if [[ ! -x "$bin" ]]; then
  echo "compare_engines.sh: $bin not found; build first or set BUILD_DIR" >&2
  exit 1
fi
if ! command -v mpirun > /dev/null; then
  echo "compare_engines.sh: mpirun not found (Debian package openmpi-bin)" >&2
  exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
bench=(bench collectives --collectives all_reduce --dtype f32 --op sum --json
       --min-bytes "$min_bytes" --max-bytes "$max_bytes" --step-factor 4 --repeats "$repeats"
       --copy-bytes "$copy_bytes")
# Several threads per process: no binding, or they would share one core.
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)

# run NAME COMMAND...: stdout to $work/NAME.jsonl; fails the script if the command fails.
run() {
  local name="$1"
  shift
  echo "[compare] $name: $*" >&2
  local start=$SECONDS
  if ! "$@" > "$work/$name.jsonl"; then
    echo "compare_engines.sh: run '$name' failed: $*" >&2
    exit 1
  fi
  echo "[compare] $name took $((SECONDS - start)) s" >&2
}

load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
start=$SECONDS
run a "${mpi[@]}" -np 2 "$bin" "${bench[@]}" --replicas 1
run b "$bin" launch -n 2 -- "$bin" "${bench[@]}" --replicas 1
run c22 "${mpi[@]}" -np 2 "$bin" "${bench[@]}" --replicas 2 --no-native
run c41 "${mpi[@]}" -np 4 "$bin" "${bench[@]}" --replicas 1 --no-native
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$work" "$load_before" "$load_after" "$((SECONDS - start))" "$(nproc)" <<'EOF'
import json
import os
import sys

work, load_before, load_after, seconds, cores = sys.argv[1:6]


def load(name):
    """Rows of one run by (engine, bytes), and its memory row; `[rank 0] ` prefixes ignored."""
    memory, rows = None, {}
    with open(os.path.join(work, name + ".jsonl")) as f:
        for line in f:
            at = line.find("{")
            if at < 0:
                continue
            obj = json.loads(line[at:])
            if obj.get("type") == "memory":
                memory = obj
            elif obj.get("type") == "collective" and obj.get("collective") == "all_reduce":
                rows[(obj["engine"], obj["bytes"])] = obj
    if memory is None or not rows:
        sys.exit(f"compare_engines.sh: no memory row or no all_reduce rows in run '{name}'")
    return memory, rows


def human(size):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:g} {unit}"
        size /= 1024


def us(row):
    return f"{row['time_us']:,.2f}" if row else "-"


def bw(row):
    return f"{row['busbw_gbps']:.3f}" if row else "-"


def ratio(a, b):
    return f"{a / b:.2f}" if a is not None and b else "-"


def busbw_ratio(rows, engine, size):
    """ours / native busbw: the median of the per-repeat pairs' ratios (bench collectives)."""
    n = rows.get((engine + "-native", size))
    return n.get("busbw_ours_over_native") if n else None


def time_ratio(rows, engine, size):
    """ours / native time, pair by pair as busbw_ratio."""
    n = rows.get((engine + "-native", size))
    return n.get("time_ours_over_native") if n else None


def describe(row):
    return (f"{row['processes']} processes x {row['local_replicas']} local replicas "
            f"= {row['replicas']} replicas")


runs = {name: load(name) for name in ("a", "b", "c22", "c41")}
sizes = sorted({size for _, rows in runs.values() for (_, size) in rows})
repeats = next(iter(runs["a"][1].values()))["repeats"]

print(f"all_reduce, f32 sum, in place; time = median of {repeats} repeats of the per-call time,"
      f" max over all replicas of all processes; busbw = "
      f"algbw * 2(n-1)/n (n = replicas; for the native rows n = processes)")
print(f"machine: {cores} cores; load average (1, 5, 15 min) {load_before} before, {load_after} "
      f"after; {seconds} s in all")
print()


def versus(name, engine, label, title):
    memory, rows = runs[name]
    ours_any = next(r for (e, _), r in rows.items() if e == engine)
    print(f"### ({name}) {title}: ours on {engine}, {describe(ours_any)}, vs {label}")
    print()
    print(f"memory copy bandwidth in this run: {memory['copy_gbps']:.2f} GB/s "
          f"({memory['threads']} threads)")
    print()
    print(f"| bytes | ours µs | ours busbw GB/s | {label} µs | {label} busbw GB/s "
          f"| busbw ours/{label}* | time ours/{label}* |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for size in sizes:
        o, n = rows.get((engine, size)), rows.get((engine + "-native", size))
        if not o and not n:
            continue
        b, t = busbw_ratio(rows, engine, size), time_ratio(rows, engine, size)
        print(f"| {human(size)} | {us(o)} | {bw(o)} | {us(n)} | {bw(n)} "
              f"| {'-' if b is None else f'{b:.2f}'} | {'-' if t is None else f'{t:.2f}'} |")
    print()
    print(f"\\* the median over repeats of the ratio within each repeat's pair (ours and {label}'s, "
          "run back to back), not the ratio of the two medians beside it")
    print()
    return rows


a = versus("a", "mpi", "MPI", "mpirun -np 2")
b = versus("b", "gloo", "Gloo", "replicator launch -n 2")

m22, r22 = runs["c22"]
m41, r41 = runs["c41"]
any22 = next(iter(r22.values()))
any41 = next(iter(r41.values()))
print(f"### (c) ours on mpi, R = 4: {describe(any22)} vs {describe(any41)}")
print()
print("| bytes | 2×2 µs | 2×2 busbw GB/s | 4×1 µs | 4×1 busbw GB/s | 2×2/4×1 busbw |")
print("|---:|---:|---:|---:|---:|---:|")
for size in sizes:
    x, y = r22.get(("mpi", size)), r41.get(("mpi", size))
    if not x and not y:
        continue
    print(f"| {human(size)} | {us(x)} | {bw(x)} | {us(y)} | {bw(y)} "
          f"| {ratio(x and x['busbw_gbps'], y and y['busbw_gbps'])} |")
print()

# The project's targets (P = 2), checked on these medians.
print("### targets")
print()


def check(label, pairs, good):
    pairs = [(size, value) for size, value in pairs if value is not None]
    if not pairs:
        print(f"- {label}: no data")
        return
    missed = [f"{human(size)} ({value:.2f})" for size, value in pairs if not good(value)]
    print(f"- {label}: " + ("met" if not missed else "MISSED at " + ", ".join(missed)))


big = [size for size in sizes if size >= 1 << 20]
mid = [size for size in sizes if size >= 64 << 10]
small = [size for size in sizes if size <= 4 << 10]


check("(a) >= 64 KiB: busbw ours/MPI >= 0.95",
      [(s, busbw_ratio(a, "mpi", s)) for s in mid], lambda v: v >= 0.95)
check("(a) 4 B - 4 KiB: time ours/MPI <= 1.5 (the header frame included)",
      [(s, time_ratio(a, "mpi", s)) for s in small], lambda v: v <= 1.5)
check("(b) >= 1 MiB: busbw ours/Gloo >= 1.0",
      [(s, busbw_ratio(b, "gloo", s)) for s in big], lambda v: v >= 1.0)
check("(b) 4 B: time ours/Gloo <= 1.0",
      [(s, time_ratio(b, "gloo", s)) for s in sizes if s == 4], lambda v: v <= 1.0)
check("(c) >= 1 MiB: busbw 2x2/4x1 > 1",
      [(s, r22[("mpi", s)]["busbw_gbps"] / r41[("mpi", s)]["busbw_gbps"])
       for s in big if ("mpi", s) in r22 and ("mpi", s) in r41], lambda v: v > 1.0)
EOF
