#!/usr/bin/env bash
# Two "hosts" on one machine: two network namespaces joined by a veth pair, one gloo
# process in each, talking over that link only (each binds its namespace's address).
# The all_reduce digest must equal the one-process digest for the same R.
# Needs root and iproute2; exits 77 (skipped) where namespaces cannot be made.
#
#   two_hosts.sh BUILD_DIR
set -uo pipefail
build="${1:?build dir}"
prog="$build/tests/replicator_multiproc"
tag="r$$"
a="${tag}a"
b="${tag}b"

if ! command -v ip >/dev/null; then
  echo "SKIP: iproute2 (ip) is not installed" >&2
  exit 77
fi
if ! ip netns add "$a" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces here (needs root and CAP_SYS_ADMIN)" >&2
  exit 77
fi
cleanup() {
  ip netns del "$a" 2>/dev/null
  ip netns del "$b" 2>/dev/null
  rm -rf "$store"
}
store=$(mktemp -d)
trap cleanup EXIT
ip netns add "$b" || { echo "SKIP: second namespace failed" >&2; exit 77; }
ip link add "${tag}va" type veth peer name "${tag}vb" || { echo "SKIP: no veth" >&2; exit 77; }
ip link set "${tag}va" netns "$a"
ip link set "${tag}vb" netns "$b"
ip -n "$a" addr add 10.233.7.1/24 dev "${tag}va"
ip -n "$b" addr add 10.233.7.2/24 dev "${tag}vb"
for ns in "$a" "$b"; do
  ip -n "$ns" link set lo up
done
ip -n "$a" link set "${tag}va" up
ip -n "$b" link set "${tag}vb" up
if command -v ping >/dev/null; then
  ip netns exec "$a" ping -c 1 -W 2 10.233.7.2 >/dev/null || { echo "FAIL: the link does not carry packets" >&2; exit 1; }
fi

expected=$(REPLICATOR_LOCAL_REPLICAS=4 timeout 120 "$prog" digest | grep '^digest')
run_in() {  # namespace rank address
  ip netns exec "$1" env REPLICATOR_ENGINE=gloo REPLICATOR_RANK="$2" REPLICATOR_WORLD_SIZE=2 \
    REPLICATOR_LOCAL_REPLICAS=2 REPLICATOR_STORE="file://$store" REPLICATOR_HOST="$3" \
    REPLICATOR_TIMEOUT=60s timeout 120 "$prog" digest
}
run_in "$a" 0 10.233.7.1 > "$store/out.0" 2>&1 &
p0=$!
run_in "$b" 1 10.233.7.2 > "$store/out.1" 2>&1 &
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
