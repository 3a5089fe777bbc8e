#!/usr/bin/env bash
# An elastic job over two "hosts" (network namespaces, tests/engines/netns.sh): one agent
# in each (--nnodes 1:2, two processes each, meeting in a shared folder), the agent of host
# B killed with SIGKILL in the middle of training: its workers die with it, and the job goes
# on at host A alone (MIN = 1) to the last step, with the same global batch on 2 replicas.
# Exits 77 (skipped) where namespaces cannot be made.
#
#   elastic_two_hosts.sh BUILD_DIR
set -uo pipefail
replicator="$(cd "${1:?build dir}" && pwd)/replicator"
work=$(mktemp -d)
netns_cleanup_extra() { pkill -9 -f "$work" 2>/dev/null; rm -rf "$work"; }
source "$(dirname "$0")/../engines/netns.sh"
fail() { echo "FAIL: $*" >&2; exit 1; }

agent() {  # namespace address; runs in the background: exec, so that $! is the agent
  exec ip netns exec "$1" "$replicator" launch --nnodes 1:2 -n 2 --host "$2" \
    --rdzv "file://$work/rdzv/job" --heartbeat 200ms --heartbeat-timeout 2s --last-call 1s -- \
    "$replicator" train classifier --batch 64 --steps 80 --checkpoint-every 5 --no-eval \
    --no-progress --json --out "$work/run"
}
agent "$ns_a" "$addr_a" > "$work/a.out" 2> "$work/a.err" &
pa=$!
agent "$ns_b" "$addr_b" > "$work/b.out" 2> "$work/b.err" &
pb=$!
deadline=$((SECONDS + 90))
newest() { ls "$work/run" 2>/dev/null | sed -n 's/^checkpoint-0*\([0-9][0-9]*\)\.pt$/\1/p' | sort -n | tail -1; }
until [ "$(newest)" -ge 15 ] 2>/dev/null; do
  [ $SECONDS -lt $deadline ] || fail "no progress: $(tail -5 "$work/a.err" "$work/b.err")"
  sleep 0.1
done
grep -q "generation 0: 2 hosts, 4 processes" "$work/a.err" "$work/b.err" ||
  fail "did not start on two hosts: $(grep launch: "$work/a.err" "$work/b.err")"
kill -9 $pb
wait $pb 2>/dev/null
wait $pa || fail "host A's agent failed: $(grep launch: "$work/a.err")"
grep launch: "$work/a.err"
grep -q "generation 1: 1 host, 2 processes" "$work/a.err" || fail "no generation on host A alone"
json=$(grep '"digest"' "$work/a.out")
echo "$json" | grep -q '"replicas":2' && echo "$json" | grep -q '"steps":80' ||
  fail "host A did not finish the job on its own: $json"
echo "elastic over two hosts: host B killed, host A finished the job alone"
