#!/usr/bin/env bash
# The train job end to end on a few steps (tests/CMakeLists.txt runs it):
#   resume: 3 steps + resume to 6 ends with the bitwise parameters of 6 uninterrupted steps;
#   a checkpoint of 2 replicas resumes on 1 replica;
#   a missing or corrupt data file and a batch not divisible by the replicas fail clearly.
# Usage: train_job.sh BUILD_DIR
set -euo pipefail
replicator="$1/replicator"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
common=(train classifier --batch 64 --no-eval --no-progress --json)

digest() { sed -n 's/.*"digest":"\([0-9a-f]*\)".*/\1/p'; }
fail() { echo "FAIL: $*" >&2; exit 1; }

full=$("$replicator" "${common[@]}" --replicas 2 --steps 6 | digest)
"$replicator" "${common[@]}" --replicas 2 --steps 3 --out "$work/run" >/dev/null
[ -f "$work/run/checkpoint.pt" ] || fail "no checkpoint written"
ls -A "$work/run" | grep -q tmp && fail "a temporary checkpoint file was left behind"
cp "$work/run/checkpoint.pt" "$work/at3.pt"
resumed=$("$replicator" "${common[@]}" --replicas 2 --steps 6 --resume "$work/at3.pt" | digest)
[ -n "$full" ] && [ "$full" = "$resumed" ] || fail "resumed digest $resumed != uninterrupted $full"
echo "resume: bitwise equal ($full)"

steps=$("$replicator" "${common[@]}" --replicas 1 --steps 6 --resume "$work/at3.pt" |
        sed -n 's/.*"steps":\([0-9]*\).*/\1/p')
[ "$steps" = 6 ] || fail "resume on 1 replica ended at step '$steps', expected 6"
echo "resume on another replica count: ok"

expect_error() {  # expect_error PATTERN args...
  local pattern="$1"; shift
  local out rc=0
  out=$("$replicator" "$@" 2>&1) || rc=$?
  [ "$rc" -ne 0 ] || fail "'$*' succeeded, expected an error matching '$pattern'"
  echo "$out" | grep -q -- "$pattern" || fail "'$*' failed without '$pattern': $out"
  echo "$out" | grep -q "^frame #" && fail "'$*' printed a backtrace: $out"
  echo "error as expected: $(echo "$out" | head -1)"
}
mkdir "$work/data"
expect_error "cannot open $work/data/.*-ubyte.gz" "${common[@]}" --steps 1 --data "$work/data"
cp /usr/share/datasets/fashion-mnist/*.gz "$work/data/"
head -c 100000 /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz > "$work/data/train-images-idx3-ubyte.gz"
expect_error "train-images-idx3-ubyte.gz" "${common[@]}" --steps 1 --data "$work/data"
expect_error "multiple of the number of replicas" train classifier --replicas 3 --batch 64 --steps 1
printf 'not a checkpoint' > "$work/bad.pt"
expect_error "bad.pt" "${common[@]}" --steps 1 --resume "$work/bad.pt"
echo "train job: all checks passed"
