#!/usr/bin/env bash
# The train job end to end on a few steps (tests/CMakeLists.txt runs it):
#   resume: 3 steps + resume to 6 ends with the bitwise parameters of 6 uninterrupted steps,
#   with --resume FILE and automatically from --out (the newest checkpoint that loads: a torn
#   newest one is skipped with a warning naming it); metrics.jsonl repeats no step; only the
#   newest --keep-checkpoints are kept; --out gets curves.png, and `replicator plot` draws
#   metrics.jsonl;
#   --tensorboard: a run and its resumption leave two event files that TensorBoard's reader
#   (tensorboard_read.py, with PYTHON) reads as one run: train/loss at increasing steps and the
#   image "curves" (skipped, saying so, without a PYTHON that has tensorboard);
#   a checkpoint of 2 replicas resumes on 1 replica;
#   a missing or corrupt data file, a batch not divisible by the replicas and an unknown
#   --memory-format fail clearly; the layout is channels last by default;
#   the same job on 2 replicas ends with the same bits as 1 process x 2 threads, 2 mpi
#   processes and 2 gloo processes (and 4 replicas as 1x4 and 2x2 over mpi); `replicator
#   timeline` summarizes the gloo run's timeline files; 200 healthy steps print no straggler
#   line.
# Usage: train_job.sh BUILD_DIR HAVE_MPI HAVE_GLOO [PYTHON]   (HAVE_*: 1 or 0; PYTHON: the
# virtual environment's)
set -euo pipefail
replicator="$1/replicator"
have_mpi="${2:-0}"
have_gloo="${3:-0}"
python="${4:-}"
here="$(cd "$(dirname "$0")" && pwd)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
common=(train classifier --batch 64 --no-eval --no-progress --json)

digest() { sed -n 's/.*"digest":"\([0-9a-f]*\)".*/\1/p'; }
fail() { echo "FAIL: $*" >&2; exit 1; }

full=$("$replicator" "${common[@]}" --replicas 2 --steps 6 | digest)
"$replicator" "${common[@]}" --replicas 2 --steps 3 --out "$work/run" >/dev/null
[ -f "$work/run/checkpoint-000000003.pt" ] || fail "no checkpoint written: $(ls "$work/run")"
ls -A "$work/run" | grep -q tmp && fail "a temporary checkpoint file was left behind"
cp "$work/run/checkpoint-000000003.pt" "$work/at3.pt"
resumed=$("$replicator" "${common[@]}" --replicas 2 --steps 6 --resume "$work/at3.pt" | digest)
[ -n "$full" ] && [ "$full" = "$resumed" ] || fail "resumed digest $resumed != uninterrupted $full"
echo "resume: bitwise equal ($full)"

# Automatic resume: the same --out, no --resume.
auto=$("$replicator" "${common[@]}" --replicas 2 --steps 6 --out "$work/run" 2>"$work/auto.err" |
  digest)
[ "$auto" = "$full" ] || fail "automatic resume digest $auto != uninterrupted $full"
grep -q "resuming from $work/run/checkpoint-000000003.pt" "$work/auto.err" ||
  fail "no resume note: $(cat "$work/auto.err")"
steps_logged=$(sed -n 's/.*"step":\([0-9]*\).*/\1/p' "$work/run/metrics.jsonl" | sort | uniq -d)
[ -z "$steps_logged" ] || fail "metrics.jsonl repeats steps $steps_logged"
echo "automatic resume: bitwise equal, metrics without repeats"

# The curves of the run, and `replicator plot` on its metrics.
png_signature() { head -c 8 "$1" | od -An -tx1 | tr -d ' \n'; }
[ "$(png_signature "$work/run/curves.png")" = 89504e470d0a1a0a ] ||
  fail "no curves.png after a run with --out: $(ls "$work/run")"
printf '%s\n' '{"type":"train","step":1,"loss":2.5}' '{"type":"eval","step":2,"loss":9}' \
  '{"type":"train","step":2,"loss":1.5}' > "$work/metrics.jsonl"
"$replicator" plot --metrics "$work/metrics.jsonl" --x step --y loss --type train \
  --out "$work/plot.png" 2>"$work/plot.err"
grep -q "1 charts, 2 points" "$work/plot.err" || fail "replicator plot: $(cat "$work/plot.err")"
[ "$(png_signature "$work/plot.png")" = 89504e470d0a1a0a ] || fail "replicator plot wrote no PNG"
echo "curves.png and replicator plot: PNG files"

# TensorBoard: 50 steps (train/loss logged at 46), then resumed to 100 (at 92), each run with
# its event file and its curves image at its last step.
if [ -x "$python" ] && "$python" -c 'import tensorboard' 2>/dev/null; then
  for steps in 50 100; do
    "$replicator" "${common[@]}" --replicas 2 --steps "$steps" --out "$work/tb" \
      --tensorboard "$work/tb/logs" >/dev/null
  done
  files=$(ls "$work/tb/logs" | grep -c '^events\.out\.tfevents\.' || true)
  [ "$files" = 2 ] || fail "expected 2 event files, found: $(ls "$work/tb/logs")"
  "$python" "$here/../train/tensorboard_read.py" run "$work/tb/logs" || fail "TensorBoard's reader"
else
  echo "skipped the TensorBoard check: no python with tensorboard at '$python'"
fi

# A torn newest checkpoint is skipped, with a warning naming it; the one before is used.
"$replicator" "${common[@]}" --replicas 2 --steps 3 --checkpoint-every 1 --out "$work/torn" \
  >/dev/null
torn="$work/torn/checkpoint-000000003.pt"
head -c 1000 "$work/at3.pt" > "$torn"
skip=$("$replicator" "${common[@]}" --replicas 2 --steps 6 --out "$work/torn" 2>"$work/torn.err" |
  digest)
grep -q "warning: skipping checkpoint $torn" "$work/torn.err" ||
  fail "no warning naming the torn checkpoint: $(cat "$work/torn.err")"
grep -q "resuming from $work/torn/checkpoint-000000002.pt" "$work/torn.err" ||
  fail "did not resume from the checkpoint before: $(cat "$work/torn.err")"
[ "$skip" = "$full" ] || fail "resume past a torn checkpoint: digest $skip != $full"
echo "torn newest checkpoint: skipped with a warning, bitwise equal from the one before"

"$replicator" "${common[@]}" --steps 5 --checkpoint-every 1 --keep-checkpoints 2 \
  --out "$work/keep" >/dev/null
kept=$(cd "$work/keep" && ls checkpoint-*.pt | tr '\n' ' ')
[ "$kept" = "checkpoint-000000004.pt checkpoint-000000005.pt " ] || fail "kept: $kept"
echo "keep-checkpoints 2: $kept"

steps=$("$replicator" "${common[@]}" --replicas 1 --steps 6 --resume "$work/at3.pt" |
        sed -n 's/.*"steps":\([0-9]*\).*/\1/p')
[ "$steps" = 6 ] || fail "resume on 1 replica ended at step '$steps', expected 6"
echo "resume on another replica count: ok"

source "$(dirname "$0")/expect_error.sh"
mkdir "$work/data"
expect_error "cannot open $work/data/.*-ubyte.gz" "${common[@]}" --steps 1 --data "$work/data"
cp /usr/share/datasets/fashion-mnist/*.gz "$work/data/"
head -c 100000 /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz > "$work/data/train-images-idx3-ubyte.gz"
expect_error "train-images-idx3-ubyte.gz" "${common[@]}" --steps 1 --data "$work/data"
expect_error "multiple of the number of replicas" train classifier --replicas 3 --batch 64 --steps 1
printf 'not a checkpoint' > "$work/bad.pt"
expect_error "bad.pt" "${common[@]}" --steps 1 --resume "$work/bad.pt"
expect_error "memory-format" "${common[@]}" --steps 1 --memory-format nchw
# The layout: channels last by default, contiguous on request (said in the result).
layout() { sed -n 's/.*"memory_format":"\([a-z-]*\)".*/\1/p'; }
[ "$("$replicator" "${common[@]}" --steps 1 | layout)" = channels-last ] ||
  fail "the default layout is not channels-last"
[ "$("$replicator" "${common[@]}" --steps 1 --memory-format contiguous | layout)" = contiguous ] ||
  fail "--memory-format contiguous not taken"
echo "memory formats: channels-last by default, contiguous on request"
short=(train classifier --batch 64 --steps 4 --no-eval --no-progress --json)
two=$("$replicator" "${short[@]}" --replicas 2 | digest)
four=$("$replicator" "${short[@]}" --replicas 4 | digest)
if [ "$have_mpi" = 1 ]; then
  mpi=$(mpirun -np 2 --oversubscribe --bind-to none "$replicator" "${short[@]}" --replicas 1 | digest)
  [ "$mpi" = "$two" ] || fail "2 mpi processes ended with $mpi, 1 process x 2 with $two"
  mpi4=$(mpirun -np 2 --oversubscribe --bind-to none "$replicator" "${short[@]}" --replicas 2 | digest)
  [ "$mpi4" = "$four" ] || fail "2 mpi processes x 2 ended with $mpi4, 1 process x 4 with $four"
  echo "mpi layouts: same bits"
fi
if [ "$have_gloo" = 1 ]; then
  gloo=$(REPLICATOR_TIMELINE="$work/tl.json" "$replicator" launch -n 2 -- "$replicator" \
    "${short[@]}" --replicas 1 | digest)
  [ "$gloo" = "$two" ] || fail "2 gloo processes ended with $gloo, 1 process x 2 with $two"
  echo "gloo layout: same bits"
  # `replicator timeline` over both processes' files: one line per replica, every collective
  # matched; a single file of the two says it holds one process.
  summary=$("$replicator" timeline "$work"/tl.rank*.json)
  expected="^# 2 replicas in 2 processes; [1-9][0-9]* collectives made by every replica"
  echo "$summary" | grep -q "$expected (matched by step and sequence number)\$" ||
    fail "timeline summary: $summary"
  [ "$(echo "$summary" | grep -c '^replica [01] ')" = 2 ] || fail "timeline rows: $summary"
  "$replicator" timeline "$work/tl.rank1.json" | grep -q "^# 1 replica in 1 process;" ||
    fail "timeline of one file"
  echo "timeline: both processes' replicas summarized"
fi
# A healthy job names no straggler: 200 steps on 2 processes (mpi where built, else 2 threads)
# print no "replicator: ... waited" line, with the default straggler_after.
healthy=(train classifier --batch 64 --steps 200 --no-eval --no-progress --json)
if [ "$have_mpi" = 1 ]; then
  mpirun -np 2 --oversubscribe --bind-to none "$replicator" "${healthy[@]}" --replicas 1 \
    >/dev/null 2>"$work/healthy.err"
else
  "$replicator" "${healthy[@]}" --replicas 2 >/dev/null 2>"$work/healthy.err"
fi
grep '^replicator: .* waited ' "$work/healthy.err" &&
  fail "a straggler line in a healthy 200-step run"
echo "200 healthy steps: no straggler line"
echo "train job: all checks passed"
