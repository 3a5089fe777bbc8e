#!/usr/bin/env bash
# The D4PG job's learner speed on HalfCheetah (batch 256, 8 environment steps per update):
# samples learned per second for 1 learner replica, 2 replicas as threads and 2 as mpi
# processes, ROUNDS rounds (default 3) interleaved, each beside the copy bandwidth measured
# just before it. The rate is the steady one between the records at updates 1,000 and 2,000
# (the replay's fill and the final evaluation left out); the actors' steps are inside it, as
# in the job.
#   speed.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../../.."
build="${1:-build}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
job=(train d4pg --env half_cheetah --steps 2000 --report-every 1000 --eval-every 0
  --eval-episodes 1 --random-episodes 0 --no-progress --json)
rate() {  # samples/s between the records at updates 1000 and 2000 of metrics.jsonl $1
  python3 - "$1" <<'PY'
import json, sys
rows = {r["step"]: r for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "train"}
print(f"{256 * 1000 / (rows[2000]['seconds'] - rows[1000]['seconds']):.0f}")
PY
}
echo "round | copy GB/s | R=1 samples/s | R=2 threads | R=2 mpi | R=2 threads / R=1"
for round in $(seq "${ROUNDS:-3}"); do
  bw=$(.venv/bin/python -c 'import sys; sys.path.insert(0, "bench"); from copy_bandwidth import copy_gbps; print(f"{copy_gbps():.1f}")')
  "$build/replicator" "${job[@]}" --out "$work/r1-$round" >/dev/null 2>&1
  "$build/replicator" "${job[@]}" --replicas 2 --out "$work/t2-$round" >/dev/null 2>&1
  mpirun --oversubscribe --bind-to none -np 2 "$build/replicator" "${job[@]}" \
    --out "$work/m2-$round" >/dev/null 2>&1
  r1=$(rate "$work/r1-$round/metrics.jsonl")
  t2=$(rate "$work/t2-$round/metrics.jsonl")
  m2=$(rate "$work/m2-$round/metrics.jsonl")
  echo "$round | $bw | $r1 | $t2 | $m2 | $(python3 -c "print(f'{$t2 / $r1:.2f}')")"
done
