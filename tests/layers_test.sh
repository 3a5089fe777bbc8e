#!/usr/bin/env bash
# The layer check passes on the source tree, and fails, naming the file and the include, on
# a copy of the tree where a lower layer includes a higher one (in an old layer and in each
# of the newer ones), or where a file includes Gloo's headers past the renaming header.
set -euo pipefail
root="${1:?source root}"
cmake -DROOT="$root" -P "$root/cmake/check_layers.cmake"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# plant FILE LINE EXPECTED: appends LINE to FILE in a fresh copy of the tree; the check must
# fail with EXPECTED in its message.
plant() {
  rm -rf "$tmp/src" "$tmp/include" "$tmp/cmake"
  cp -r "$root/src" "$root/include" "$root/cmake" "$tmp/"
  printf '%s\n' "$2" >> "$tmp/$1"
  local out
  if out="$(cmake -DROOT="$tmp" -P "$tmp/cmake/check_layers.cmake" 2>&1)"; then
    echo "FAIL: the planted include in $1 was not caught" >&2
    exit 1
  fi
  grep -qF "$3" <<<"$out" || { echo "FAIL: unexpected message for $1: $out" >&2; exit 1; }
}

plant src/comm/descriptor.cc '#include "src/runtime/worker_pool.h"' \
  'src/comm/descriptor.cc (layer comm) includes "src/runtime/worker_pool.h" (layer runtime)'
plant src/rendezvous/store.cc '#include "src/engines/gloo/gloo_store.h"' \
  'src/rendezvous/store.cc (layer rendezvous) includes "src/engines/gloo/gloo_store.h" (layer engines)'
plant include/replicator/rendezvous/store.h '#include "replicator/replicator.h"' \
  'include/replicator/rendezvous/store.h (layer rendezvous) includes "replicator/replicator.h" (layer runtime)'
plant src/launch/launcher.cc '#include "replicator/torch.h"' \
  'src/launch/launcher.cc (layer launch) includes "replicator/torch.h" (layer torch)'
plant src/train/reporter.cc '#include "apps/command.h"' \
  'src/train/reporter.cc (layer train) includes "apps/command.h" (layer apps)'
plant src/rl/env.cc '#include "replicator/train/reporter.h"' \
  'src/rl/env.cc (layer rl) includes "replicator/train/reporter.h" (layer train)'
plant src/rendezvous/heartbeat.cc '#include <gloo/context.h>' \
  'src/rendezvous/heartbeat.cc includes #include <gloo/context.h>: include src/engines/gloo/gloo.h'
echo "layers: the tree passes; planted upward includes and a direct gloo include are caught"
