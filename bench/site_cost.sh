#!/usr/bin/env bash
# What a collective's fixed cost is in several builds of the command, run in turn (e.g. a build
# of the commit before call sites and the current one): `replicator bench collectives` for
# all_reduce and broadcast from 4 B to MAX_BYTES, on the local engine with 2 replicas, or with
# ENGINE=gloo on 2 processes of one replica under `replicator launch`; RUNS rounds. Prints
# each row (time per call) beside the copy bandwidth the run measured, each build named by
# the folder above its build folder.
#   [RUNS=3] [MAX_BYTES=64K] [ENGINE=local|gloo] bench/site_cost.sh BUILD/replicator...
set -euo pipefail
runs="${RUNS:-3}" max="${MAX_BYTES:-64K}" engine="${ENGINE:-local}"
for run in $(seq 1 "$runs"); do
  for bin in "$@"; do
    name="$(basename "$(dirname "$(dirname "$(readlink -f "$bin")")")")"
    where=(--engine local --replicas 2)
    launch=()
    if [ "$engine" = gloo ]; then
      where=(--no-native)
      launch=("$bin" launch -n 2 --)
    fi
    OMP_NUM_THREADS=1 "${launch[@]}" "$bin" bench collectives "${where[@]}" \
      --collectives all_reduce,broadcast --min-bytes 4 --max-bytes "$max" --step-factor 16 \
      --json 2>/dev/null |
      python3 -c '
import json, sys
run, name = sys.argv[1], sys.argv[2]
for line in sys.stdin:
    line = line.split("] ", 1)[-1]
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if r.get("type") == "memory":
        print("run %s %-8s copy %.1f GB/s" % (run, name, r["copy_gbps"]))
    elif r.get("type") == "collective":
        print("run %s %-8s %-10s %8d B %9.3f us" % (run, name, r["collective"], r["bytes"],
                                                  r["time_us"]))
' "$run" "$name"
  done
done
