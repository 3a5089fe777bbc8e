#!/usr/bin/env bash
# The replicated learner gives the same bits on every layout of 2 replicas: 1 process x 2
# threads, 2 mpi processes, 2 gloo processes (where those engines are built).
# Usage: learner_layouts.sh BUILD_DIR HAVE_MPI HAVE_GLOO [PROGRAM]
# PROGRAM (in BUILD_DIR/tests/rl; learner_digest, the IMPALA learner, by default) prints
# "digest R=<R> <hex>" from replica 0; d4pg_digest does it for the D4PG learner.
set -euo pipefail
prog="$1/tests/rl/${4:-learner_digest}"
launcher="$1/replicator"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail() { echo "FAIL: $*" >&2; exit 1; }
# Every layout runs the BLAS as `replicator` runs it (replicator/launch/blas_kernels.h: its
# choice of OpenBLAS kernels, one OpenBLAS thread), as the launcher's children do: other kernels round otherwise.
for kv in $("$launcher" launch -n 1 -- env | sed 's/^\[rank [0-9]*\] //' | grep '^OPENBLAS_' || true); do
  export "${kv?}"
done

threads=$(REPLICATOR_LOCAL_REPLICAS=2 "$prog")
echo "1x2 threads: $threads"
[[ $threads == "digest R=2 "* ]] || fail "no digest: $threads"
if [[ "${2:-0}" == 1 ]]; then
  mpi=$(timeout 120 mpirun --oversubscribe --bind-to none -np 2 "$prog" | grep "^digest")
  echo "2 mpi processes: $mpi"
  [[ $mpi == "$threads" ]] || fail "mpi $mpi != threads $threads"
fi
if [[ "${3:-0}" == 1 ]]; then
  gloo=$(timeout 120 "$launcher" launch -n 2 -- "$prog" | sed 's/^\[rank [0-9]*\] //' | grep '^digest')
  echo "2 gloo processes: $gloo"
  [[ $gloo == "$threads" ]] || fail "gloo $gloo != threads $threads"
fi
echo "the learner's bits are the same on every layout"
