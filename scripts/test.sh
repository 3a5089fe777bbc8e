#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test; then builds the
# threaded core under ThreadSanitizer and AddressSanitizer and runs its tests again.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/install_deps.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "== release build and tests"
"$root/scripts/build.sh" "$root/build"
ctest --test-dir "$root/build" --output-on-failure -j2

echo "== ThreadSanitizer: core tests"
BUILD_TYPE=RelWithDebInfo "$root/scripts/build.sh" "$root/build-tsan" \
  -DREPLICATOR_SANITIZE=thread -DREPLICATOR_BUILD_APPS=OFF
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  ctest --test-dir "$root/build-tsan" --output-on-failure -j2

echo "== AddressSanitizer: core tests"
BUILD_TYPE=RelWithDebInfo "$root/scripts/build.sh" "$root/build-asan" \
  -DREPLICATOR_SANITIZE=address -DREPLICATOR_BUILD_APPS=OFF
ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" \
  ctest --test-dir "$root/build-asan" --output-on-failure -j2
