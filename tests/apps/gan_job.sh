#!/usr/bin/env bash
# The GAN job end to end on a few small steps (tests/CMakeLists.txt runs it):
#   2 replicas as threads: metrics.jsonl, checkpoints, sample grids and curves are written;
#   resume: 2 steps, then the same --out to 4 steps, gives the bits of 4 steps at once;
#   the same bits after 3 steps on 1 process x 2 threads, 2 mpi and 2 gloo processes;
#   --tensorboard: TensorBoard's reader finds the losses, the sample grids and the curves
#   (skipped, saying so, without a PYTHON that has tensorboard);
#   `bench gan` gets a result from one replica and from the PyTorch peer (the peer skipped,
#   saying so, without a PYTHON that has torch);
#   gradient accumulation runs; bad input fails clearly.
# Usage: gan_job.sh BUILD_DIR HAVE_MPI HAVE_GLOO [PYTHON]   (HAVE_*: 1 or 0)
set -euo pipefail
replicator="$1/replicator"
have_mpi="${2:-0}"
have_gloo="${3:-0}"
python="${4:-}"
here="$(cd "$(dirname "$0")" && pwd)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
common=(train gan --width 4 --standing-batches 2 --ema-start 1 --no-progress
  --json --memory system)
batch=(--global-batch 16)
fail() { echo "FAIL: $*" >&2; exit 1; }
field() { python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['$1'])"; }
is_png() { head -c 8 "$1" | od -An -tx1 | grep -q '89 50 4e 47 0d 0a 1a 0a'; }

out=$("$replicator" "${common[@]}" "${batch[@]}" --replicas 2 --steps 4 --report-every 1 --sample-every 2 \
  --checkpoint-every 2 --out "$work/run" 2>"$work/run.err") || fail "$(cat "$work/run.err")"
[[ $(field steps <<<"$out") == 4 && $(field replicas <<<"$out") == 2 ]] ||
  fail "expected 4 steps on 2 replicas: $out"
straight=$(field digest <<<"$out")
for f in checkpoint-000000002.pt checkpoint-000000004.pt samples-000000002.png \
  samples-000000004.png samples.png curves.png metrics.jsonl; do
  [[ -f "$work/run/$f" ]] || fail "no $f in $(ls "$work/run")"
done
for f in samples.png curves.png; do is_png "$work/run/$f" || fail "$f is not a PNG"; done
[[ $(grep -c '"type":"train"' "$work/run/metrics.jsonl") == 4 ]] ||
  fail "expected 4 train records: $(cat "$work/run/metrics.jsonl")"
grep -q '"d_loss"' "$work/run/metrics.jsonl" || fail "no d_loss in metrics.jsonl"
echo "2 replicas: 4 steps, checkpoints, samples and curves written; digest $straight"

# Resume: 2 steps, then on to 4 from the checkpoint, gives the same bits.
"$replicator" "${common[@]}" "${batch[@]}" --replicas 2 --steps 2 --out "$work/resumed" >/dev/null \
  2>"$work/first.err" || fail "$(cat "$work/first.err")"
out=$("$replicator" "${common[@]}" "${batch[@]}" --replicas 2 --steps 4 --out "$work/resumed" \
  2>"$work/resume.err") || fail "$(cat "$work/resume.err")"
grep -q "resuming from $work/resumed/checkpoint-000000002.pt" "$work/resume.err" ||
  fail "no resume note: $(cat "$work/resume.err")"
[[ $(field digest <<<"$out") == "$straight" ]] ||
  fail "resumed run's digest $(field digest <<<"$out") != uninterrupted $straight"
echo "resume after 2 of 4 steps: the same bits"

# The same bits on every layout of 2 replicas.
threads=$("$replicator" "${common[@]}" "${batch[@]}" --replicas 2 --steps 3 2>"$work/t.err" | field digest) ||
  fail "$(cat "$work/t.err")"
echo "1 process x 2 threads: $threads"
if [[ $have_mpi == 1 ]]; then
  mpi=$(timeout 300 mpirun --oversubscribe --bind-to none -np 2 "$replicator" "${common[@]}" \
    "${batch[@]}" --steps 3 2>"$work/mpi.err" | grep '^{' | field digest) || fail "$(cat "$work/mpi.err")"
  echo "2 mpi processes: $mpi"
  [[ $mpi == "$threads" ]] || fail "mpi $mpi != threads $threads"
fi
if [[ $have_gloo == 1 ]]; then
  gloo=$(timeout 300 "$replicator" launch -n 2 -- "$replicator" "${common[@]}" "${batch[@]}" --steps 3 \
    2>"$work/gloo.err" | sed 's/^\[rank [0-9]*\] //' | grep '^{' | field digest) ||
    fail "$(cat "$work/gloo.err")"
  echo "2 gloo processes: $gloo"
  [[ $gloo == "$threads" ]] || fail "gloo $gloo != threads $threads"
fi

# TensorBoard: losses every step, sample grids at steps 2 and 3, the curves at the end.
if [ -x "$python" ] && "$python" -c 'import tensorboard' 2>/dev/null; then
  "$replicator" "${common[@]}" "${batch[@]}" --steps 3 --report-every 1 --sample-every 2 \
    --out "$work/tb" --tensorboard "$work/tb/logs" >/dev/null 2>"$work/tb.err" ||
    fail "$(cat "$work/tb.err")"
  "$python" "$here/../train/tensorboard_read.py" run "$work/tb/logs" train/d_loss samples,curves ||
    fail "TensorBoard's reader"
else
  echo "skipped the TensorBoard check: no python with tensorboard at '$python'"
fi

# The benchmark reads a result from each layout it runs, the PyTorch peer's too (skipped,
# saying so, without a PYTHON that has torch).
configs=(local-1x1)
if [ -x "$python" ] && "$python" -c 'import torch' 2>/dev/null; then
  configs+=(ddp-gloo-2x1 ddp-gloo-2x1-cl)
fi
"$replicator" bench gan --steps 1 --warmup 0 --repeats 1 --batch 4 --width 4 --memory keep \
  --configs "${configs[@]}" --python "${python:-python3}" --ddp-script "$here/../../bench/ddp_gan.py" \
  --json >"$work/bench.json" 2>"$work/bench.err" || fail "bench gan: $(cat "$work/bench.err")"
python3 - "$work/bench.json" "${configs[@]}" <<'PY' || fail "bench gan: $(cat "$work/bench.json")"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
got = sorted(r["config"] for r in rows if r.get("images_per_s", 0) > 0)
assert got == sorted(sys.argv[2:]), got
layouts = {r["config"]: r["memory_format"] for r in rows}
expected = {"local-1x1": "channels-last", "ddp-gloo-2x1": "contiguous",
            "ddp-gloo-2x1-cl": "channels-last"}
assert all(layouts[c] == expected[c] for c in layouts), layouts
PY
echo "bench gan: ${configs[*]}"
[[ ${#configs[@]} == 3 ]] || echo "skipped the peer in bench gan: no python with torch at '$python'"

# Gradient accumulation: 2 micro-batches per replica.
out=$("$replicator" "${common[@]}" "${batch[@]}" --replicas 2 --steps 2 --accumulate 2 2>"$work/acc.err") ||
  fail "$(cat "$work/acc.err")"
[[ $(field accumulate <<<"$out") == 2 ]] || fail "accumulate not reported: $out"
echo "accumulation: 2 micro-batches per replica"

# Bad input.
if "$replicator" "${common[@]}" --replicas 2 --global-batch 7 --steps 1 >/dev/null \
  2>"$work/bad.err"; then
  fail "a global batch of 7 on 2 replicas was accepted"
fi
grep -q "multiple of replicas" "$work/bad.err" || fail "unclear error: $(cat "$work/bad.err")"
echo "bad input: clear errors"
