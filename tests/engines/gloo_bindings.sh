#!/usr/bin/env bash
# One gloo per reference: runs the gloo worker suite in 2 processes of a program linked with
# LibTorch (gloo_transport_torch_test, started by `replicator launch`, which links both too)
# under LD_DEBUG=bindings, and checks every binding the dynamic linker made of a gloo symbol:
#   - torch's gloo (namespace gloo, mangled `4gloo`) is referenced only by LibTorch's own
#     libraries and resolved only into them;
#   - ours (namespace replicator_gloo, the renamed libreplicator_gloo.so.0, cmake/gloo.cmake)
#     is never referenced from LibTorch nor resolved into it.
# Fails too if it saw no binding of either kind (nothing would have been checked).
#   gloo_bindings.sh LAUNCHER PROGRAM
set -euo pipefail
launcher="${1:?path to replicator}"
program="${2:?path to gloo_transport_torch_test}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

LD_DEBUG=bindings LD_DEBUG_OUTPUT="$tmp/ld" "$launcher" launch -n 2 -- "$program" >"$tmp/out" 2>&1 ||
  { cat "$tmp/out" >&2; echo "FAIL: the worker suite failed in the LibTorch build" >&2; exit 1; }

# A line: "<pid>:<tab>binding file A [0] to B [0]: normal symbol `S' [V]".
cat "$tmp"/ld.* | awk '
  /binding file / {
    from = $4; to = $7; sym = $0
    sub(/.*symbol `/, "", sym); sub(/'"'"'.*/, "", sym)
    torch_from = (from ~ /\/torch\/lib\//); torch_to = (to ~ /\/torch\/lib\//)
    if (sym ~ /(^|[^0-9])4gloo/) {
      theirs++
      if (!torch_from || !torch_to) { bad++; if (bad <= 10) print "torch gloo symbol " sym " bound from " from " to " to }
    } else if (sym ~ /15replicator_gloo/) {
      ours++
      if (torch_from || torch_to) { bad++; if (bad <= 10) print "our gloo symbol " sym " bound from " from " to " to }
    }
  }
  END {
    printf "gloo bindings: %d of torch'"'"'s gloo inside LibTorch, %d of ours, %d crossing\n", theirs, ours, bad
    if (bad > 0 || theirs == 0 || ours == 0) exit 1
  }' || { echo "FAIL: a gloo symbol crossed between LibTorch's gloo and the engine's" >&2; exit 1; }
echo "gloo bindings: the engine's gloo and LibTorch's never meet"
