#!/usr/bin/env bash
# 3 runs of bench train: local-2x1 against local-2x1-shards (8 shards), copy bandwidth each
cd /work/main
out=bench/results/2026-12-06-shards
for run in 1 2 3; do
  bw=$(.venv/bin/python -c 'import sys; sys.path.insert(0, "bench"); from copy_bandwidth import copy_gbps; print(f"{copy_gbps():.1f}")')
  echo "run $run: copy bandwidth $bw GB/s" | tee -a $out/bench_train.txt
  ./build/replicator bench train --configs local-1x1 local-2x1 local-2x1-shards --repeats 3 --memory keep 2>&1 | tee -a $out/bench_train.txt
done
echo bench-done
