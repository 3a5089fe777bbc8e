#!/usr/bin/env bash
# The BLAS settings `replicator` makes for itself and the processes it starts
# (replicator/launch/blas_kernels.h), seen from a child of `replicator launch`: a user's
# OPENBLAS_CORETYPE and OPENBLAS_NUM_THREADS stand; unset, OPENBLAS_NUM_THREADS becomes 1;
# re-executed for them, the launcher keeps its name.
#
#   blas_choice.sh BUILD_DIR
# Exit 0 on success, 1 on failure, 77 when `replicator` does not load libblas.so.3 (the torch
# wheel's LibTorch brings MKL) or libblas.so.3 is not OpenBLAS: nothing to choose.
# The launched child's environment is read through a pipe: a failed launch fails the test.
set -uo pipefail
build="${1:?build dir}"
fail() { echo "FAIL: $*" >&2; exit 1; }

# child_env VAR=VALUE...: the OPENBLAS_ variables a launched child sees.
child_env() {
  env -u OPENBLAS_CORETYPE -u OPENBLAS_NUM_THREADS "$@" \
    timeout 60 "$build/replicator" launch -n 1 -- env | sed 's/^\[rank 0\] //' | grep '^OPENBLAS_' |
    sort
}

if ! ldd "$build/replicator" | grep -q 'libblas\.so\.3'; then
  echo "replicator does not load libblas.so.3 (its LibTorch has a BLAS of its own): nothing to choose"
  exit 77
fi
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)
if [[ $blas != *openblas* ]]; then
  echo "libblas.so.3 is not OpenBLAS here ('${blas:-none}'): nothing to choose"
  exit 77
fi
plain=$(child_env) || fail "replicator launch failed"
grep -q '^OPENBLAS_NUM_THREADS=1$' <<<"$plain" || fail "OPENBLAS_NUM_THREADS is not 1: $plain"
echo "unset: $(tr '\n' ' ' <<<"$plain")"

# Prescott is the slowest x86-64 core: a chooser that ignored the user would replace it on
# any CPU with AVX2.
chosen=$(child_env OPENBLAS_CORETYPE=Prescott)
grep -q '^OPENBLAS_CORETYPE=Prescott$' <<<"$chosen" || fail "the user's core type was replaced: $chosen"
grep -q '^OPENBLAS_NUM_THREADS=1$' <<<"$chosen" || fail "threads not set beside a core type: $chosen"

threads=$(child_env OPENBLAS_NUM_THREADS=3)
grep -q '^OPENBLAS_NUM_THREADS=3$' <<<"$threads" || fail "the user's thread count was replaced: $threads"
echo "the user's OPENBLAS_CORETYPE and OPENBLAS_NUM_THREADS stand"

# Re-executed with its settings, `replicator` keeps its name in ps and top (not "exe").
name=$(env -u OPENBLAS_NUM_THREADS timeout 60 "$build/replicator" launch -n 1 -- \
  sh -c 'cat /proc/$PPID/comm' | sed 's/^\[rank 0\] //')
[[ $name == replicator ]] || fail "after re-executing itself the launcher is named '$name'"
echo "re-executed, the launcher is still named $name"
