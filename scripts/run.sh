#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs the collective benchmark
# (all collectives, 2 replicas) followed by our all_reduce beside plain MPI_Allreduce.
# Extra arguments go to `replicator bench collectives`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/install_deps.sh"
"$root/scripts/build.sh" "$root/build" -DREPLICATOR_BUILD_TESTS=OFF
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$root/build/replicator" bench collectives --replicas 2 "$@"
BUILD_DIR="$root/build" "$root/bench/compare_mpi.sh"
