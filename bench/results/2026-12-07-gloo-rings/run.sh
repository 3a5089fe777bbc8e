#!/usr/bin/env bash
# Three rounds of `replicator bench train` (the layouts of scripts/bench.sh), one after the
# other, into OUTPUT_DIR (bench_train.N.txt; progress.log with the times). Run from the
# repository's root with nothing else running: run.sh OUTPUT_DIR
set -euo pipefail
out="${1:?output dir}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for n in 1 2 3; do
  echo "round $n start $(date -u +%H:%M:%S)" >> "$out/progress.log"
  ./build/replicator bench train > "$out/bench_train.$n.txt" 2>&1
  echo "round $n end $(date -u +%H:%M:%S)" >> "$out/progress.log"
done
