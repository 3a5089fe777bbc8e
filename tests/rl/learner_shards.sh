#!/usr/bin/env bash
# The IMPALA learner on 4 logical shards: 5 updates from the same unrolls give the same bits
# for R = 1, 2 and 4 replicas, as threads of one process and as mpi and gloo processes
# (where those engines are built).
# Usage: learner_shards.sh BUILD_DIR HAVE_MPI HAVE_GLOO
set -euo pipefail
prog="$1/tests/rl/learner_digest"
launcher="$1/replicator"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LEARNER_SHARDS=4
fail() { echo "FAIL: $*" >&2; exit 1; }
# The BLAS as `replicator` runs it, as in learner_layouts.sh.
for kv in $("$launcher" launch -n 1 -- env | sed 's/^\[rank [0-9]*\] //' | grep '^OPENBLAS_' || true); do
  export "${kv?}"
done
# The digest without its "R=<R>".
bits() { sed 's/^\[rank [0-9]*\] //' | sed -n 's/^digest R=[0-9]* //p'; }

reference=$(REPLICATOR_LOCAL_REPLICAS=1 "$prog" | bits)
[ -n "$reference" ] || fail "no digest from 1 replica"
echo "1 replica: $reference"
expect() {  # expect LAYOUT DIGEST
  [ "$2" = "$reference" ] || fail "$1 ended with '$2', 1 replica with $reference"
  echo "$1: same bits"
}
for r in 2 4; do
  expect "1 process x $r threads" "$(REPLICATOR_LOCAL_REPLICAS=$r "$prog" | bits)"
  if [ "${2:-0}" = 1 ]; then
    expect "$r mpi processes" "$(timeout 120 mpirun --oversubscribe --bind-to none -np $r "$prog" | bits)"
  fi
  if [ "${3:-0}" = 1 ]; then
    expect "$r gloo processes" "$(timeout 120 "$launcher" launch -n $r -- "$prog" | bits)"
  fi
done
echo "the learner on shards: the same bits for 1, 2 and 4 replicas"
