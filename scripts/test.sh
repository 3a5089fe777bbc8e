#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test (unit tests,
# then the multi-process tests on real mpi and gloo processes); then builds the threaded
# core under ThreadSanitizer and AddressSanitizer and runs its unit tests again (the
# algorithms across processes run there over the in-memory transport).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/install_deps.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "== release build and tests"
"$root/scripts/build.sh" "$root/build"
ctest --test-dir "$root/build" --output-on-failure -j2 -LE multiproc
echo "== multi-process tests (mpi, gloo)"
ctest --test-dir "$root/build" --output-on-failure -L multiproc

echo "== ThreadSanitizer: core tests"
core_only=(-DREPLICATOR_BUILD_APPS=OFF -DREPLICATOR_WITH_MPI=OFF -DREPLICATOR_WITH_GLOO=OFF
  -DREPLICATOR_WITH_TORCH=OFF)
BUILD_TYPE=RelWithDebInfo "$root/scripts/build.sh" "$root/build-tsan" \
  -DREPLICATOR_SANITIZE=thread "${core_only[@]}"
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  ctest --test-dir "$root/build-tsan" --output-on-failure -j2

echo "== AddressSanitizer: core tests"
BUILD_TYPE=RelWithDebInfo "$root/scripts/build.sh" "$root/build-asan" \
  -DREPLICATOR_SANITIZE=address "${core_only[@]}"
ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" \
  ctest --test-dir "$root/build-asan" --output-on-failure -j2
