#!/usr/bin/env bash
# The D4PG job end to end on the point mass (tests/CMakeLists.txt runs it):
#   one process: it learns (the noiseless policy returns far above a random policy), the
#   result adds up (environment steps per update, samples per second), metrics.jsonl, a
#   checkpoint and the learning curve (a PNG) are written;
#   the same options give the same parameters again (nothing depends on timing);
#   a second run with the same --out resumes from the checkpoint and its curve goes on from
#   the environment steps the first one reached;
#   2 learner replicas as threads, as 2 mpi processes and as 2 gloo processes give the same
#   parameters, bit for bit;
#   bad input (an unknown task, a batch not divisible by the replicas, an empty support)
#   fails clearly.
# Usage: d4pg_job.sh BUILD_DIR HAVE_MPI HAVE_GLOO   (the last two: 1 or 0)
set -euo pipefail
replicator="$1/replicator"
have_mpi="${2:-0}"
have_gloo="${3:-0}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
common=(train d4pg --env point_mass --policy-hidden 64,64 --critic-hidden 64,64 --batch 64
  --min-replay 200 --eval-every 500 --report-every 250 --random-episodes 20 --no-progress --json)
fail() { echo "FAIL: $*" >&2; exit 1; }
field() { python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['$1'])"; }

out=$("$replicator" "${common[@]}" --steps 1500 --out "$work/run" 2>"$work/run.err") ||
  fail "$(cat "$work/run.err")"
[[ $(field steps <<<"$out") == 1500 ]] || fail "expected 1500 updates: $out"
python3 - "$out" <<'PY' || fail "the result does not add up: $out"
import json, sys
r = json.loads(sys.argv[1])
# 8 environment steps per update, after a fill of at least 200 transitions.
assert r["frames"] >= 1500 * 8 + 200, r
assert r["episodes"] > 0 and r["samples_per_s"] == r["updates_per_s"] * 64, r
# A random policy leaves the mass wandering (about -27); the learned one brings it to 0.
assert -60 < r["random_return"] < -10, r
assert r["mean_return"] > r["random_return"] / 3, r
PY
[[ -f "$work/run/checkpoint-000001500.pt" ]] || fail "no checkpoint: $(ls "$work/run")"
[[ $(grep -c '"type":"train"' "$work/run/metrics.jsonl") == 6 ]] ||
  fail "expected 6 metrics lines: $(cat "$work/run/metrics.jsonl")"
[[ $(grep -c '"mean_return"' "$work/run/metrics.jsonl") == 3 ]] ||
  fail "expected 3 evaluations (updates 500, 1000, 1500): $(cat "$work/run/metrics.jsonl")"
head -c 8 "$work/run/learning_curve.png" | od -An -tx1 | grep -q '89 50 4e 47 0d 0a 1a 0a' ||
  fail "learning_curve.png is not a PNG"
digest=$(field digest <<<"$out")
echo "one process: returns $(field mean_return <<<"$out") after 1500 updates (random policy" \
  "$(field random_return <<<"$out")), digest $digest"

# The same options again: the same bits.
again=$("$replicator" "${common[@]}" --steps 1500 --out "$work/again" 2>"$work/again.err") ||
  fail "$(cat "$work/again.err")"
[[ $(field digest <<<"$again") == "$digest" ]] ||
  fail "a second run gave other parameters: $(field digest <<<"$again") != $digest"
echo "rerun: the same digest"

# Stopped at 600, resumed to 1000 with the same --out.
"$replicator" "${common[@]}" --steps 600 --out "$work/resume" >/dev/null 2>"$work/first.err" ||
  fail "$(cat "$work/first.err")"
out=$("$replicator" "${common[@]}" --steps 1000 --out "$work/resume" 2>"$work/resume.err") ||
  fail "$(cat "$work/resume.err")"
grep -q "resuming from $work/resume/checkpoint-000000600.pt" "$work/resume.err" ||
  fail "no resume note: $(cat "$work/resume.err")"
[[ $(field steps <<<"$out") == 1000 ]] || fail "the resumed run did not reach 1000: $out"
if ! python3 - "$work/resume/metrics.jsonl" <<'PY'; then
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"type":"train"' in l]
steps = [r["step"] for r in rows]
frames = [r["frames"] for r in rows]
assert steps == [250, 500, 600, 750, 1000], steps
# The resumed run fills its new replay (at least 200 steps) before it learns on.
assert frames == sorted(frames) and frames[3] >= frames[2] + 150 * 8 + 200, frames
PY
  fail "the resumed curve: $(cat "$work/resume/metrics.jsonl")"
fi
echo "resume: from update 600 to 1000, the curve's environment steps going on"

# Two learner replicas: threads, mpi processes, gloo processes give the same bits.
r2=(train d4pg --env point_mass --policy-hidden 32 --critic-hidden 32 --batch 32
  --min-replay 100 --steps 200 --eval-every 0 --report-every 100 --random-episodes 0
  --no-progress --json)
threads=$("$replicator" "${r2[@]}" --replicas 2 2>"$work/threads.err") ||
  fail "$(cat "$work/threads.err")"
digest=$(field digest <<<"$threads")
echo "1 process x 2 replicas: digest $digest"
if [[ $have_mpi == 1 ]]; then
  out=$(timeout 300 mpirun --oversubscribe --bind-to none -np 2 "$replicator" "${r2[@]}" \
    2>"$work/mpi.err" | grep '^{') || fail "$(cat "$work/mpi.err")"
  [[ $(field processes <<<"$out") == 2 ]] || fail "expected 2 processes: $out"
  [[ $(field digest <<<"$out") == "$digest" ]] ||
    fail "2 mpi processes: $(field digest <<<"$out") != threads' $digest"
  echo "2 mpi processes: the same digest"
fi
if [[ $have_gloo == 1 ]]; then
  out=$(timeout 300 "$replicator" launch -n 2 -- "$replicator" "${r2[@]}" \
    2>"$work/gloo.err" | sed 's/^\[rank [0-9]*\] //' | grep '^{') || fail "$(cat "$work/gloo.err")"
  [[ $(field digest <<<"$out") == "$digest" ]] ||
    fail "2 gloo processes: $(field digest <<<"$out") != threads' $digest"
  echo "2 gloo processes: the same digest"
fi

# Bad input fails with a message that says what is wrong.
expect_error() {
  local want="$1"
  shift
  if "$replicator" "$@" >/dev/null 2>"$work/bad.err"; then fail "accepted: $*"; fi
  grep -q -- "$want" "$work/bad.err" || fail "for $*: expected '$want' in: $(cat "$work/bad.err")"
}
expect_error "point_mass" train d4pg --env nowhere --steps 1 --no-progress
expect_error "must be a multiple of the number of replicas" train d4pg --env point_mass \
  --batch 63 --replicas 2 --steps 1 --no-progress
expect_error "v_min < v_max" train d4pg --env point_mass --v-min 5 --v-max 1 --steps 1 \
  --no-progress
echo "bad input: clear errors"
