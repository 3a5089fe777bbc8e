#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test (unit tests,
# then the multi-process tests on real mpi and gloo processes); then builds the threaded
# core under ThreadSanitizer and AddressSanitizer and runs its unit tests again (the
# algorithms across processes run there over the in-memory transport); then runs each fuzz
# target for 30 s (scripts/fuzz.sh: clang, libFuzzer, ASan and UBSan).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/install_deps.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Tests, apps and every engine are asked for explicitly: a build folder configured before
# (scripts/run.sh turns the tests off) keeps its cache, and would otherwise build no test.
full=(-DREPLICATOR_BUILD_TESTS=ON -DREPLICATOR_BUILD_APPS=ON -DREPLICATOR_WITH_MPI=ON
  -DREPLICATOR_WITH_GLOO=ON -DREPLICATOR_WITH_TORCH=ON -DREPLICATOR_BUILD_PYTHON=ON
  -DREPLICATOR_SANITIZE=)
# Each stage's title says the minutes and seconds since the start (the install included).
stage() {
  local at=$SECONDS
  printf '== %s (at %dm%02ds)\n' "$1" $((at / 60)) $((at % 60))
}
# Every ctest call fails when it finds no test.
run_ctest() { ctest --no-tests=error --output-on-failure "$@"; }

stage "release build"
"$root/scripts/build.sh" "$root/build" "${full[@]}"
stage "lint: line length, clang-format (whole tree), clang-tidy (the layers below LibTorch)"
LINT_ALL=1 LINT_TIDY=core LINT_JOBS=2 "$root/scripts/lint.sh" "$root/build"
stage "links: every relative link and image in README.md, docs/, apps/ and bench/ resolves"
"$root/scripts/check_links.sh"
stage "unit tests"
run_ctest --test-dir "$root/build" -j2 -L unit
stage "multi-process tests (mpi, gloo); the slow ones: scripts/slow_tests.sh"
run_ctest --test-dir "$root/build" -L multiproc -LE slow

stage "install, and a project built against the installed package"
"$root/tests/install/consumer.sh" "$root/build"

stage "ThreadSanitizer: core tests"
core_only=(-DREPLICATOR_BUILD_TESTS=ON -DREPLICATOR_BUILD_APPS=OFF -DREPLICATOR_WITH_MPI=OFF
  -DREPLICATOR_WITH_GLOO=OFF -DREPLICATOR_WITH_TORCH=OFF -DREPLICATOR_WITH_GRPC=OFF
  -DREPLICATOR_WITH_CUDA=OFF)
BUILD_TYPE=RelWithDebInfo "$root/scripts/build.sh" "$root/build-tsan" \
  -DREPLICATOR_SANITIZE=thread "${core_only[@]}"
# The environments' conformance with their Python references is single-threaded: it runs in
# the release and AddressSanitizer builds.
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$root/tests/tsan.supp" \
  run_ctest --test-dir "$root/build-tsan" -j2 -L unit -E '^rl_conformance_'

stage "AddressSanitizer: core tests"
BUILD_TYPE=RelWithDebInfo "$root/scripts/build.sh" "$root/build-asan" \
  -DREPLICATOR_SANITIZE=address "${core_only[@]}"
ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" LSAN_OPTIONS="suppressions=$root/tests/lsan.supp" \
  run_ctest --test-dir "$root/build-asan" -j2 -L unit

stage "fuzzing: each parser's libFuzzer target for 30 s (tests/fuzz)"
"$root/scripts/fuzz.sh" 30
stage "done"
