#!/usr/bin/env bash
# Three rounds of every benchmark #34 judges, one after the other on one day: `replicator bench
# train`, `replicator bench gan --memory keep`, `replicator bench rl` and bench/compare_engines.sh
# on a fresh calibration, into OUTPUT_DIR (bench_train.N.txt, bench_gan.N.txt, bench_rl.N.txt,
# compare_engines.N.md and .log, calibration.N.txt; progress.log with the times). Run from the
# repository's root with nothing else running: run.sh OUTPUT_DIR
set -euo pipefail
out="${1:?output dir}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cache="${XDG_CACHE_HOME:-$HOME/.cache}/replicator"
for n in 1 2 3; do
  echo "round $n start $(date -u +%H:%M:%S)" >> "$out/progress.log"
  ./build/replicator bench train > "$out/bench_train.$n.txt" 2>&1
  ./build/replicator bench gan --memory keep > "$out/bench_gan.$n.txt" 2>&1
  ./build/replicator bench rl > "$out/bench_rl.$n.txt" 2>&1
  rm -f "$cache"/calibration-*.txt
  bench/compare_engines.sh > "$out/compare_engines.$n.md" 2> "$out/compare_engines.$n.log"
  cp "$cache"/calibration-*.txt "$out/calibration.$n.txt" 2> /dev/null || true
  echo "round $n end $(date -u +%H:%M:%S)" >> "$out/progress.log"
done
