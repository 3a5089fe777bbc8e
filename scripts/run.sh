#!/usr/bin/env bash
# The main job: installs what is missing, builds, and trains the classifier on
# Fashion-MNIST with 2 replicas for 1 epoch (metrics and checkpoint in runs/classifier).
# Extra arguments go to `replicator train classifier` (e.g. --epochs 15).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/install_deps.sh"
"$root/scripts/build.sh" "$root/build" -DREPLICATOR_BUILD_TESTS=OFF
"$root/build/replicator" train classifier --replicas 2 --epochs 1 --out "$root/runs/classifier" "$@"
