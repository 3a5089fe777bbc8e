#!/usr/bin/env bash
# Compares replicator's all_reduce (local engine, 2 replica threads) with plain MPI_Allreduce
# (2 processes) over the same sizes, in one run of this script, and prints a markdown table.
#
#   bench/compare_mpi.sh [--min-bytes 4] [--max-bytes 256M] [--repeats 5] [--copy-bytes auto]
#   BUILD_DIR=build-bench bench/compare_mpi.sh --max-bytes 1M
#
# BUILD_DIR (default ./build) holds the `replicator` and `mpi_allreduce_bench` programs.
# Exits non-zero if either benchmark fails. Needs python3 (standard library only).
#
# Across processes (our mpi and gloo engines vs MPI_Allreduce and gloo::allreduce measured in
# the same runs, and P x L layouts): bench/compare_engines.sh.
set -euo pipefail

build_dir="${BUILD_DIR:-./build}"
min_bytes=4
max_bytes=256M
repeats=5
copy_bytes=auto

usage_lines=2,9
# shellcheck source=bench/args.sh
source "$(dirname "$0")/args.sh"
parse_bench_args "$@"

ours_bin="$build_dir/replicator"
mpi_bin="$build_dir/mpi_allreduce_bench"
for bin in "$ours_bin" "$mpi_bin"; do
  if [[ ! -x "$bin" ]]; then
    echo "compare_mpi.sh: $bin not found; build first or set BUILD_DIR" >&2
    exit 1
  fi
done
if ! command -v mpirun > /dev/null; then
  echo "compare_mpi.sh: mpirun not found (Debian package openmpi-bin)" >&2
  exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
sizes=(--min-bytes "$min_bytes" --max-bytes "$max_bytes" --step-factor 4 --repeats "$repeats"
       --copy-bytes "$copy_bytes")

echo "[compare] replicator all_reduce, 2 replicas ..." >&2
if ! "$ours_bin" bench collectives --collectives all_reduce --replicas 2 --json "${sizes[@]}" \
    > "$work/ours.jsonl"; then
  echo "compare_mpi.sh: replicator bench collectives failed" >&2
  exit 1
fi
echo "[compare] MPI_Allreduce, 2 processes ..." >&2
if ! mpirun --allow-run-as-root --oversubscribe -np 2 "$mpi_bin" --json "${sizes[@]}" \
    > "$work/mpi.jsonl"; then
  echo "compare_mpi.sh: mpi_allreduce_bench failed" >&2
  exit 1
fi

python3 - "$work/ours.jsonl" "$work/mpi.jsonl" <<'EOF'
import json
import sys


def load(path):
    memory, rows = None, {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            obj = json.loads(line)
            if obj.get("type") == "memory":
                memory = obj
            elif obj.get("collective") == "all_reduce":
                rows[obj["bytes"]] = obj
    if memory is None or not rows:
        sys.exit(f"compare_mpi.sh: no memory row or no all_reduce rows in {path}")
    return memory, rows


ours_mem, ours = load(sys.argv[1])
mpi_mem, mpi = load(sys.argv[2])
any_row = next(iter(ours.values()))
print(f"all_reduce, {any_row['dtype']} {any_row['op']}: replicator local engine, 2 replica "
      f"threads (in place) vs MPI_Allreduce, {next(iter(mpi.values()))['replicas']} processes "
      f"(MPI_IN_PLACE); time = median of repeats of the per-call time, max over replicas")
print()
print(f"memory copy bandwidth measured in this run: {ours_mem['copy_gbps']:.2f} GB/s before the "
      f"replicator bench, {mpi_mem['copy_gbps']:.2f} GB/s before the MPI bench "
      f"(STREAM copy, {ours_mem['threads']} threads, 2 x {ours_mem['bytes_per_array'] >> 20} MiB, "
      f"read + written)")
print()
print("| bytes | ours time µs | ours busbw GB/s | ours mem_fraction | MPI time µs | MPI busbw GB/s "
      "| busbw ratio ours/MPI |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for size in sorted(set(ours) | set(mpi)):
    o, m = ours.get(size), mpi.get(size)
    cells = [str(size)]
    cells += [f"{o['time_us']:,.2f}", f"{o['busbw_gbps']:.3f}", f"{o['mem_fraction']:.3f}"] if o \
        else ["-", "-", "-"]
    cells += [f"{m['time_us']:,.2f}", f"{m['busbw_gbps']:.3f}"] if m else ["-", "-"]
    cells.append(f"{o['busbw_gbps'] / m['busbw_gbps']:.2f}"
                 if o and m and m["busbw_gbps"] > 0 else "-")
    print("| " + " | ".join(cells) + " |")
EOF
