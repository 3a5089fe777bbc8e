#!/usr/bin/env bash
# Three runs of bench/compare_engines.sh, each on a fresh calibration: the calibration kept
# by the run (calibration.N.txt), the chooser's picks for it (plan.N.txt) and the tables
# (compare_engines.N.md), into OUTPUT_DIR. Run from the repository's root with nothing else
# running: run.sh OUTPUT_DIR
set -euo pipefail
out="${1:?output dir}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/replicator"
for n in 1 2 3; do
  rm -f "$cache"/calibration-*.txt
  bench/compare_engines.sh > "$out/compare_engines.$n.md" 2> "$out/compare_engines.$n.log"
  cp "$cache"/calibration-*.txt "$out/calibration.$n.txt" 2> /dev/null || true
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 ./build/replicator bench \
    collectives --plan --max-bytes 64M --replicas 1 --step-factor 4 > "$out/plan.$n.txt"
done
