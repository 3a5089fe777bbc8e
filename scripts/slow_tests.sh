#!/usr/bin/env bash
# The tests labelled "slow" (tests/CMakeLists.txt), which scripts/test.sh leaves out: the
# full conformance of the MinAtar games (1,000 episodes per game and side) and the jobs
# across two network namespaces (skipped where namespaces cannot be made).
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
