# Two "hosts" on one machine, for the tests that source this file: two network namespaces
# joined by a veth pair, host A at 10.233.7.1 and host B at 10.233.7.2. Sets $ns_a and
# $ns_b and removes both at exit (with the caller's own cleanup, `netns_cleanup_extra`).
# Exits 77 (skipped) where namespaces cannot be made (needs root and iproute2).
tag="r$$"
ns_a="${tag}a"
ns_b="${tag}b"
addr_a=10.233.7.1
addr_b=10.233.7.2

if ! command -v ip >/dev/null; then
  echo "SKIP: iproute2 (ip) is not installed" >&2
  exit 77
fi
if ! ip netns add "$ns_a" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces here (needs root and CAP_SYS_ADMIN)" >&2
  exit 77
fi
netns_cleanup() {
  declare -F netns_cleanup_extra >/dev/null && netns_cleanup_extra
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
}
trap netns_cleanup EXIT
ip netns add "$ns_b" || { echo "SKIP: second namespace failed" >&2; exit 77; }
ip link add "${tag}va" type veth peer name "${tag}vb" || { echo "SKIP: no veth" >&2; exit 77; }
ip link set "${tag}va" netns "$ns_a"
ip link set "${tag}vb" netns "$ns_b"
ip -n "$ns_a" addr add "$addr_a/24" dev "${tag}va"
ip -n "$ns_b" addr add "$addr_b/24" dev "${tag}vb"
for ns in "$ns_a" "$ns_b"; do
  ip -n "$ns" link set lo up
done
ip -n "$ns_a" link set "${tag}va" up
ip -n "$ns_b" link set "${tag}vb" up
if command -v ping >/dev/null; then
  ip netns exec "$ns_a" ping -c 1 -W 2 "$addr_b" >/dev/null ||
    { echo "FAIL: the link does not carry packets" >&2; exit 1; }
fi
