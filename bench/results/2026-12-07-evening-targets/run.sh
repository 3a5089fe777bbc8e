#!/usr/bin/env bash
# Three rounds of `replicator bench gan --memory keep` (bench_gan.N.txt), then three runs of
# bench/compare_engines.sh, each on a fresh calibration (compare_engines.N.md and .log,
# calibration.N.txt), into OUTPUT_DIR; progress.log has the times. Run from the repository's
# root with nothing else running: run.sh OUTPUT_DIR
set -euo pipefail
out="${1:?output dir}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cache="${XDG_CACHE_HOME:-$HOME/.cache}/replicator"
for n in 1 2 3; do
  echo "gan $n start $(date -u +%H:%M:%S)" >> "$out/progress.log"
  ./build/replicator bench gan --memory keep > "$out/bench_gan.$n.txt" 2>&1
done
for n in 1 2 3; do
  echo "compare_engines $n start $(date -u +%H:%M:%S)" >> "$out/progress.log"
  rm -f "$cache"/calibration-*.txt
  bench/compare_engines.sh > "$out/compare_engines.$n.md" 2> "$out/compare_engines.$n.log"
  cp "$cache"/calibration-*.txt "$out/calibration.$n.txt" 2> /dev/null || true
done
echo "end $(date -u +%H:%M:%S)" >> "$out/progress.log"
