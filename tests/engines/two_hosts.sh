#!/usr/bin/env bash
# Two "hosts" on one machine (netns.sh), one gloo process in each, talking over that link
# only (each binds its namespace's address). The all_reduce digest must equal the
# one-process digest for the same R. Exits 77 (skipped) where namespaces cannot be made.
#
#   two_hosts.sh BUILD_DIR
set -uo pipefail
build="${1:?build dir}"
prog="$build/tests/replicator_multiproc"
store=$(mktemp -d)
netns_cleanup_extra() { rm -rf "$store"; }
source "$(dirname "$0")/netns.sh"

expected=$(REPLICATOR_LOCAL_REPLICAS=4 timeout 120 "$prog" digest | grep '^digest')
run_in() {  # namespace rank address
  ip netns exec "$1" env REPLICATOR_ENGINE=gloo REPLICATOR_RANK="$2" REPLICATOR_WORLD_SIZE=2 \
    REPLICATOR_LOCAL_REPLICAS=2 REPLICATOR_STORE="file://$store" REPLICATOR_HOST="$3" \
    REPLICATOR_TIMEOUT=60s timeout 120 "$prog" digest
}
run_in "$ns_a" 0 "$addr_a" > "$store/out.0" 2>&1 &
p0=$!
run_in "$ns_b" 1 "$addr_b" > "$store/out.1" 2>&1 &
p1=$!
wait $p0; s0=$?
wait $p1; s1=$?
cat "$store/out.0" "$store/out.1"
got=$(grep '^digest' "$store/out.0")
if [[ $s0 != 0 || $s1 != 0 || "$got" != "$expected" ]]; then
  echo "FAIL: two hosts gave '$got' (status $s0/$s1), one process gave '$expected'" >&2
  exit 1
fi
echo "two hosts over veth agree with one process: $got"
