#!/usr/bin/env bash
# Replica threads whose first LibTorch calls race each other still give the same bits every
# run: the D4PG learner on 1x2 threads, RUNS times (default 200), one digest in all
# (torch/cpu_kernels.h: without the first MKL calls before the threads start, about one run
# in fifty differed).
# Usage: threads_repeat.sh BUILD_DIR [RUNS]
set -euo pipefail
prog="$1/tests/rl/d4pg_digest"
runs="${2:-200}"
declare -A seen=()
for ((k = 0; k < runs; ++k)); do
  digest=$(REPLICATOR_LOCAL_REPLICAS=2 "$prog")
  seen["$digest"]=$((${seen["$digest"]:-0} + 1))
done
for d in "${!seen[@]}"; do echo "${seen[$d]} runs: $d"; done
if ((${#seen[@]} != 1)); then
  echo "FAIL: ${#seen[@]} different digests in $runs runs of 1x2 threads" >&2
  exit 1
fi
echo "the same bits in all $runs runs"
