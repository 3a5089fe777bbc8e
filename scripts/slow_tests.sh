#!/usr/bin/env bash
# The tests labelled "slow" (tests/CMakeLists.txt), which scripts/test.sh leaves out: the
# full conformance of the MinAtar games (1,000 episodes per game and side) and the jobs
# across two network namespaces (skipped where namespaces cannot be made); then the LibTorch
# layers' tests (torch_tests, data_tests) under AddressSanitizer and ThreadSanitizer, which
# scripts/test.sh runs on the core layers only (two more builds of the torch layers, about
# 20 CPU minutes the first time). LibTorch itself is the wheel's, not instrumented: the
# sanitizers see our code and what it does with LibTorch's memory, and torch_tests runs with
# one intra-op thread.
#
#   scripts/slow_tests.sh [BUILD_DIR]   (default: build, as scripts/test.sh builds it)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-$root/build}"
if [[ ! -f "$dir/CTestTestfile.cmake" ]]; then
  echo "slow_tests.sh: no tests in $dir; run scripts/test.sh first" >&2
  exit 2
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "$dir" --no-tests=error --output-on-failure -L slow

export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1
export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
torch_only=(-DREPLICATOR_BUILD_TESTS=ON -DREPLICATOR_BUILD_APPS=OFF -DREPLICATOR_WITH_MPI=OFF
  -DREPLICATOR_WITH_GLOO=OFF -DREPLICATOR_WITH_TORCH=ON -DREPLICATOR_WITH_GRPC=OFF)
for sanitizer in address thread; do
  echo "== the torch layers under the ${sanitizer} sanitizer"
  out="$root/build-${sanitizer}-torch"
  cmake -S "$root" -B "$out" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DREPLICATOR_SANITIZE="$sanitizer" "${torch_only[@]}" \
    >/dev/null
  cmake --build "$out" -j"${JOBS:-2}" --target torch_tests data_tests
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" LSAN_OPTIONS="suppressions=$root/tests/lsan.supp" \
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$root/tests/tsan.supp" \
    ctest --test-dir "$out" --no-tests=error --output-on-failure -R '^(torch|data)_tests$'
done
