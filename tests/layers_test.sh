#!/usr/bin/env bash
# The layer check passes on the source tree, and fails, naming the file and the include, on
# a copy of the tree where a lower layer includes a higher one.
set -euo pipefail
root="${1:?source root}"
cmake -DROOT="$root" -P "$root/cmake/check_layers.cmake"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cp -r "$root/src" "$root/include" "$root/cmake" "$tmp/"
printf '#include "src/runtime/worker_pool.h"\n' >> "$tmp/src/comm/descriptor.cc"
if out="$(cmake -DROOT="$tmp" -P "$tmp/cmake/check_layers.cmake" 2>&1)"; then
  echo "FAIL: the planted upward include was not caught" >&2
  exit 1
fi
grep -q 'src/comm/descriptor.cc (layer comm) includes "src/runtime/worker_pool.h" (layer runtime)' \
  <<<"$out" || { echo "FAIL: unexpected message: $out" >&2; exit 1; }
# A file that includes Gloo's headers itself, past the renaming header.
cp -r "$root/src" "$tmp/gloo_src"
rm -rf "$tmp/src" && mv "$tmp/gloo_src" "$tmp/src"
printf '#include <gloo/context.h>\n' >> "$tmp/src/engines/store/heartbeat.cc"
if out="$(cmake -DROOT="$tmp" -P "$tmp/cmake/check_layers.cmake" 2>&1)"; then
  echo "FAIL: the planted gloo include was not caught" >&2
  exit 1
fi
grep -q 'src/engines/store/heartbeat.cc includes #include <gloo/context.h>: include src/engines/gloo/gloo.h' \
  <<<"$out" || { echo "FAIL: unexpected message: $out" >&2; exit 1; }
echo "layers: the tree passes; a planted upward include and a direct gloo include are caught"
