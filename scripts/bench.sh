#!/usr/bin/env bash
# The benchmarks: installs what is missing, builds, then runs the collective benchmark
# (2 replicas), our all_reduce beside plain MPI_Allreduce and beside the engines' own
# across processes, the training throughput of the classifier and of the GAN beside PyTorch
# DDP, the actor-learner's speed beside a synchronous loop and a PyTorch IMPALA, remote
# actors beside actor threads, and what an env server costs. Takes ~35 minutes; run it on a
# quiet machine.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/install_deps.sh"
"$root/scripts/build.sh" "$root/build" -DREPLICATOR_BUILD_TESTS=OFF
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$root/build/replicator" bench collectives --replicas 2
BUILD_DIR="$root/build" "$root/bench/compare_mpi.sh"
BUILD_DIR="$root/build" "$root/bench/compare_engines.sh"
"$root/build/replicator" bench train
"$root/build/replicator" bench gan --memory keep
"$root/build/replicator" bench rl-envs
"$root/build/replicator" bench rl
"$root/build/replicator" bench rl-remote
"$root/build/replicator" bench env-server
