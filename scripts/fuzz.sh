#!/usr/bin/env bash
# Fuzzing: builds the libFuzzer targets of tests/fuzz with clang (ASan, UBSan) in build-fuzz/
# and runs each for SECONDS (default 30), one per core at a time, from a scratch copy of its
# seeds and regression inputs, so the repository is not written. Prints one line per target: executions, inputs
# that found new coverage, corpus size at the end, coverage (edges) and crashes. Exits
# non-zero when a target crashed, leaked, hung (10 s on one input, also when run again
# alone) or ran out of memory (2 GB), after naming the input libFuzzer saved
# (build-fuzz/artifacts/<target>/).
#
# Usage: scripts/fuzz.sh [SECONDS]
#   FUZZ_TARGETS="config frames"  only these targets (default: every folder of
#                                 tests/fuzz/corpus)
#   JOBS=N                        build jobs (default 2)
#   FUZZ_PARALLEL=N               targets run at a time (default: the cores)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-30}"
build="$root/build-fuzz"

launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
# Only the fuzz targets and the libraries they link: no tests, apps or mpi engine.
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
  "${launcher[@]}" -DREPLICATOR_FUZZ=ON -DREPLICATOR_BUILD_TESTS=OFF \
  -DREPLICATOR_BUILD_APPS=OFF -DREPLICATOR_WITH_MPI=OFF -DREPLICATOR_WITH_GLOO=ON \
  -DREPLICATOR_WITH_CUDA=OFF \
  -DREPLICATOR_WITH_TORCH=ON >/dev/null
cmake --build "$build" -j"${JOBS:-2}" --target fuzz

targets=(${FUZZ_TARGETS:-$(cd "$root/tests/fuzz/corpus" && ls -d */ | tr -d /)})
work="$(mktemp -d "${TMPDIR:-/tmp}/fuzz.XXXXXX")"
trap 'rm -rf "$work"' EXIT
artifacts="$build/artifacts"
rm -rf "$artifacts"

# The value of libFuzzer's final statistic `name` in log `file`, or 0.
final_stat() { sed -n "s/^stat::$1: *//p" "$2" | tail -1 | grep . || echo 0; }

# fuzz_one NAME: runs target NAME for $seconds; writes its row to $work/NAME.row, and
# $work/NAME.failed (with what to show) when it crashed, leaked, hung or ran out of memory.
fuzz_one() {
  local name="$1"
  local binary="$build/tests/fuzz/${name}_fuzz"
  if [ ! -x "$binary" ]; then
    # Not configured here (Gloo or LibTorch missing): say so, do not fail.
    printf '%-14s not built (its library is not part of this build)\n' "$name" >"$work/$name.row"
    return
  fi
  local corpus="$work/corpus/$name"
  mkdir -p "$corpus" "$artifacts/$name"
  cp "$root/tests/fuzz/corpus/$name"/* "$corpus/"
  if [ -d "$root/tests/fuzz/regressions/$name" ]; then
    cp "$root/tests/fuzz/regressions/$name"/* "$corpus/"
  fi
  local log="$build/fuzz-$name.log"
  local rc=0
  "$binary" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$artifacts/$name/" "$corpus" >"$log" 2>&1 || rc=$?
  # A slow unit (over 10 s without libFuzzer's own timeout firing) is run again alone: it
  # fails only if the replay fails or takes 10 s too; one that replays at once was a stall of
  # the process on a busy machine, noted in the log and set aside.
  local slow
  for slow in "$artifacts/$name"/slow-unit-*; do
    [ -f "$slow" ] || continue
    if timeout 10 "$binary" -timeout=10 "$slow" >>"$log" 2>&1; then
      echo "fuzz: slow unit $slow replays within 10 s: a stall, not counted" >>"$log"
      mkdir -p "$build/stalls/$name"
      mv "$slow" "$build/stalls/$name/"
    fi
  done
  local crashes cov
  crashes="$(find "$artifacts/$name" -type f | wc -l)"
  cov="$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2 || true)"
  printf '%-14s %12s %8s %8s %8s %8s %8s\n' "$name" \
    "$(final_stat number_of_executed_units "$log")" "$(final_stat average_exec_per_sec "$log")" \
    "$(final_stat new_units_added "$log")" "$(find "$corpus" -type f | wc -l)" "${cov:-0}" \
    "$crashes" >"$work/$name.row"
  if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
    {
      echo "fuzz: $name failed (exit status $rc); the end of its log ($log):"
      grep -vE '^#[0-9]+' "$log" | tail -40 || true
      find "$artifacts/$name" -type f -printf 'fuzz: input that fails %p\n'
    } >"$work/$name.failed"
  fi
}

# The targets run side by side, one per core (FUZZ_PARALLEL to change it): each still runs
# for $seconds.
parallel="${FUZZ_PARALLEL:-$(nproc)}"
running=0
for name in "${targets[@]}"; do
  if [ "$running" -ge "$parallel" ]; then
    wait -n
    running=$((running - 1))
  fi
  echo "== fuzz $name (${seconds}s)"
  fuzz_one "$name" &
  running=$((running + 1))
done
wait

rows=()
failed=()
for name in "${targets[@]}"; do
  rows+=("$(cat "$work/$name.row")")
  if [ -f "$work/$name.failed" ]; then
    failed+=("$name")
    cat "$work/$name.failed" >&2
  fi
done

echo "== fuzzing figures (${seconds}s a target)"
printf '%-14s %12s %8s %8s %8s %8s %8s\n' target executions exec/s new corpus cov crashes
printf '%s\n' "${rows[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${failed[*]} crashed; add each input above to tests/fuzz/regressions/<target>/" \
    "with the fix (tests/fuzz/README.md)" >&2
  exit 1
fi
