#!/usr/bin/env bash
# An elastic job that loses a host: `train classifier` with two agents (--nnodes 1:2, one
# process each), one agent SIGKILLed after FRACTION of the steps; the job goes on with the
# same global batch on one replica. Compared with the same job uninterrupted on two: the
# test accuracy of each, and their difference in points.
#
#   elastic_accuracy.sh BUILD_DIR [EPOCHS=2] [FRACTION=0.4] [BATCH=256]
set -uo pipefail
replicator="$(cd "${1:?build dir}" && pwd)/replicator"
epochs="${2:-2}"
fraction="${3:-0.4}"
batch="${4:-256}"
work=$(mktemp -d)
trap 'pkill -9 -f "$work" 2>/dev/null; rm -rf "$work"' EXIT
train=(train classifier --epochs "$epochs" --batch "$batch" --checkpoint-every 20 --no-progress
  --json)
field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" "${@:2}" | head -1; }
newest() {
  local n
  n=$(ls "$1" 2>/dev/null | sed -n 's/^checkpoint-0*\([0-9][0-9]*\)\.pt$/\1/p' | sort -n | tail -1)
  echo "${n:-0}"
}
total=$(( epochs * (60000 / batch) ))
kill_at=$(awk -v t="$total" -v f="$fraction" 'BEGIN { printf "%d", t * f }')

start=$SECONDS
"$replicator" launch -n 2 -- "$replicator" "${train[@]}" --out "$work/whole" > "$work/whole.out" \
  2> "$work/whole.err"
whole=$(field test_accuracy "$work/whole.out")
echo "uninterrupted, 2 replicas: test accuracy $whole ($((SECONDS - start)) s)"

start=$SECONDS
for a in 0 1; do
  "$replicator" launch --nnodes 1:2 -n 1 --rdzv "file://$work/rdzv/job" --heartbeat 200ms \
    --heartbeat-timeout 2s -- "$replicator" "${train[@]}" --out "$work/lost" \
    > "$work/lost.out.$a" 2> "$work/lost.err.$a" &
  eval "agent$a=$!"
done
until [ "$(newest "$work/lost")" -ge "$kill_at" ]; do sleep 0.2; done
kill -9 "$agent1"
wait "$agent0"
lost=$(field test_accuracy "$work/lost.out.0")
replicas=$(field replicas "$work/lost.out.0")
grep "launch:" "$work/lost.err.0"
echo "one host lost at step ~$kill_at of $total, finished on $replicas replica(s): test accuracy" \
  "$lost ($((SECONDS - start)) s)"
awk -v a="$whole" -v b="$lost" 'BEGIN { d = (b - a) * 100; printf "difference: %+.2f points\n", d }'
