#!/usr/bin/env bash
# Before and after, interleaved: bench/compare_engines.sh up to 4 MiB, then bench train's mpi
# and gloo layouts, three rounds. BEFORE and AFTER are folders, each with a `replicator`
# binary and the libreplicator_gloo.so.0 of its build (copied out of build/ and build/gloo/).
#   BEFORE=/tmp/before AFTER=/tmp/after bench/results/2026-12-07-shm-transport/run.sh OUT
set -u
out="${1:?output folder}"
mkdir -p "$out"
for round in 1 2 3; do
  for which in before after; do
    dir=$([[ $which == before ]] && echo "$BEFORE" || echo "$AFTER")
    LD_LIBRARY_PATH="$dir" BUILD_DIR="$dir" bench/compare_engines.sh --max-bytes 4M \
      > "$out/compare-$which-$round.md" 2> "$out/compare-$which-$round.err"
    LD_LIBRARY_PATH="$dir" "$dir/replicator" bench train --configs mpi-2x1 gloo-2x1 \
      --repeats 1 --memory keep > "$out/train-$which-$round.txt"
  done
done
