#!/usr/bin/env bash
# The all-reduce of 4 B to 64 KiB over mpi alone, NP processes of RP replicas, builds under
# /tmp/<name> (as run.sh): bench/results/2026-12-07-shm-transport/probe.sh NP RP before after
# probe: $1 = processes, $2 = replicas per process; the rest: builds; 3 rounds interleaved
np=$1; rp=$2; shift 2
for round in 1 2 3; do
  for which in "$@"; do
    r=$(LD_LIBRARY_PATH=/tmp/$which timeout 60 mpirun --allow-run-as-root --oversubscribe --bind-to none -np $np /tmp/$which/replicator bench collectives --collectives all_reduce --dtype f32 --op sum --min-bytes 4 --max-bytes 64K --step-factor 16 --repeats 5 --replicas $rp --no-native 2>/dev/null | awk '$2=="all_reduce"{printf "%s:%s ", $3, $6}')
    echo "$which: $r"
  done
done
