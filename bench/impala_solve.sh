#!/usr/bin/env bash
# CartPole-v1 with the IMPALA job: frames and wall seconds until the mean return of the
# newest 100 episodes first reaches 475, for seeds 0..N-1 with 1 and with 2 learner replicas
# (2 actor threads, the job's defaults, at most --frames frames). Prints a markdown table.
#
#   bench/impala_solve.sh [--seeds 3] [--frames 2000000]
#   BUILD_DIR=build bench/impala_solve.sh
set -euo pipefail
build_dir="${BUILD_DIR:-./build}"
seeds=3
frames=2000000
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seeds) seeds="${2:?--seeds needs a value}"; shift 2 ;;
    --frames) frames="${2:?--frames needs a value}"; shift 2 ;;
    *) echo "impala_solve.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
bin="$build_dir/replicator"
[[ -x "$bin" ]] || { echo "impala_solve.sh: $bin not found; build first" >&2; exit 1; }

echo "| replicas | seed | frames to 475 | seconds to 475 | final mean return | frames/s |"
echo "|---:|---:|---:|---:|---:|---:|"
for replicas in 1 2; do
  for ((seed = 0; seed < seeds; ++seed)); do
    "$bin" train impala --env cartpole --frames "$frames" --replicas "$replicas" --seed "$seed" \
      --stop-at-target --report-every 10 --no-progress --json 2>/dev/null |
      python3 -c '
import json, sys
r = json.loads(sys.stdin.readline())
if r["solved_frames"] >= 0:
    to = "{:,} | {:.1f}".format(r["solved_frames"], r["solved_seconds"])
else:
    to = "not within {:,} | -".format(r["frames"])
print("| {} | {} | {} | {:.1f} | {:.0f} |".format(r["replicas"], sys.argv[1], to,
      r["mean_return"], r["frames_per_s"]))
' "$seed"
  done
done
