#!/usr/bin/env bash
# Three rounds, one after the other, of the throughput benchmarks of scripts/bench.sh:
# `replicator bench train`, `replicator bench gan --memory keep` and `replicator bench rl`,
# into OUTPUT_DIR (bench_train.N.txt, bench_gan.N.txt, bench_rl.N.txt; progress.log with the
# times). Run from the repository's root with nothing else running: run.sh OUTPUT_DIR
set -euo pipefail
out="${1:?output dir}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for n in 1 2 3; do
  echo "round $n start $(date -u +%H:%M:%S)" >> "$out/progress.log"
  ./build/replicator bench train > "$out/bench_train.$n.txt" 2>&1
  ./build/replicator bench gan --memory keep > "$out/bench_gan.$n.txt" 2>&1
  ./build/replicator bench rl > "$out/bench_rl.$n.txt" 2>&1
  echo "round $n end $(date -u +%H:%M:%S)" >> "$out/progress.log"
done
