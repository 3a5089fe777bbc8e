#!/usr/bin/env bash
# The IMPALA job end to end on a short CartPole run (tests/CMakeLists.txt runs it):
#   one process: the result adds up (the actors played at least what the learner learned
#   from, episodes finished, a random policy's return measured), metrics.jsonl, a
#   checkpoint and the learning curve (a PNG) are written;
#   a second run with the same --out resumes from the checkpoint and learns on;
#   2 learner replicas as threads, and as 2 mpi and 2 gloo processes with actors in each;
#   `bench rl` measures every row once, its PyTorch peer's included, and `--parts learner`
#   only the learner's;
#   bad input (an unknown game, a batch not divisible by the replicas) fails clearly.
# Usage: impala_job.sh BUILD_DIR HAVE_MPI HAVE_GLOO   (the last two: 1 or 0)
set -euo pipefail
replicator="$1/replicator"
have_mpi="${2:-0}"
have_gloo="${3:-0}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
common=(train impala --env cartpole --actors 2 --envs-per-actor 8 --unroll 10 --batch 8
  --no-progress --json)
fail() { echo "FAIL: $*" >&2; exit 1; }
field() { python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['$1'])"; }

out=$("$replicator" "${common[@]}" --frames 8000 --out "$work/run" --report-every 5 \
  2>"$work/run.err") || fail "$(cat "$work/run.err")"
[[ $(field steps <<<"$out") == 100 ]] || fail "expected 100 learner steps: $out"
[[ $(field frames <<<"$out") == 8000 ]] || fail "expected 8000 frames learned from: $out"
played=$(field frames_played <<<"$out")
(( played >= 8000 )) || fail "the actors played $played frames, fewer than were learned: $out"
(( $(field episodes <<<"$out") > 0 )) || fail "no episode finished: $out"
python3 -c "import sys; r = float(sys.argv[1]); sys.exit(0 if 5 < r < 60 else 1)" \
  "$(field random_return <<<"$out")" || fail "a random policy's CartPole return is off: $out"
[[ -f "$work/run/checkpoint-000000100.pt" ]] || fail "no checkpoint: $(ls "$work/run")"
[[ $(grep -c '"type":"train"' "$work/run/metrics.jsonl") == 20 ]] ||
  fail "expected 20 metrics lines: $(cat "$work/run/metrics.jsonl")"
head -c 8 "$work/run/learning_curve.png" | od -An -tx1 | grep -q '89 50 4e 47 0d 0a 1a 0a' ||
  fail "learning_curve.png is not a PNG"
echo "one process: 100 steps, $played frames played, $(field episodes <<<"$out") episodes"

# The same --out: resumes from step 100 and learns to 200.
out=$("$replicator" "${common[@]}" --frames 16000 --out "$work/run" 2>"$work/resume.err") ||
  fail "$(cat "$work/resume.err")"
grep -q "resuming from $work/run/checkpoint-000000100.pt" "$work/resume.err" ||
  fail "no resume note: $(cat "$work/resume.err")"
[[ $(field steps <<<"$out") == 200 ]] || fail "the resumed run did not reach step 200: $out"
echo "resume: from step 100 to 200"

# The default layout: an actor thread per core that the learner replica leaves, at least 1.
out=$("$replicator" train impala --env cartpole --envs-per-actor 8 --unroll 10 --batch 8 \
  --frames 2000 --no-progress --json 2>"$work/default.err") || fail "$(cat "$work/default.err")"
cores=$(nproc)
want=$(( cores > 2 ? cores - 1 : 1 ))
[[ $(field actors <<<"$out") == "$want" ]] || fail "expected $want actors on $cores cores: $out"
echo "default: $want actor(s) on $cores cores"

# Two learner replicas: threads, mpi processes, gloo processes (actors in each process).
out=$("$replicator" "${common[@]}" --frames 4000 --replicas 2 2>"$work/r2.err") ||
  fail "$(cat "$work/r2.err")"
[[ $(field replicas <<<"$out") == 2 ]] || fail "expected 2 replicas: $out"
echo "1 process x 2 learner replicas: $(field steps <<<"$out") steps"
if [[ $have_mpi == 1 ]]; then
  out=$(timeout 300 mpirun --oversubscribe --bind-to none -np 2 "$replicator" "${common[@]}" \
    --frames 4000 2>"$work/mpi.err" | grep '^{') || fail "$(cat "$work/mpi.err")"
  [[ $(field processes <<<"$out") == 2 && $(field actors <<<"$out") == 4 ]] ||
    fail "expected 2 processes with 2 actors each: $out"
  echo "2 mpi processes: $(field steps <<<"$out") steps, $(field frames_played <<<"$out") played"
fi
if [[ $have_gloo == 1 ]]; then
  out=$(timeout 300 "$replicator" launch -n 2 -- "$replicator" "${common[@]}" --frames 4000 \
    2>"$work/gloo.err" | sed 's/^\[rank [0-9]*\] //' | grep '^{') || fail "$(cat "$work/gloo.err")"
  [[ $(field processes <<<"$out") == 2 ]] || fail "expected 2 processes: $out"
  echo "2 gloo processes: $(field steps <<<"$out") steps"
fi

# The benchmark gets a figure for every row, the PyTorch peer's too (run by the project's
# .venv, which the install script makes; skipped, saying so, without it).
venv_python="$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin/python"
if [ -x "$venv_python" ] && "$venv_python" -c 'import torch, gymnasium' 2>/dev/null; then
  timeout 300 "$replicator" bench rl --repeats 1 --frames 3000 --updates 2 --python "$venv_python" \
    --json >"$work/bench.json" 2>"$work/bench.err" || fail "bench rl: $(cat "$work/bench.err")"
  python3 - "$work/bench.json" <<'PY' || fail "bench rl: $(cat "$work/bench.json")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
rows = {l["row"]: l["frames_per_s"] for l in lines if l["type"] == "rl"}
want = ["env cartpole M=64", "learner cartpole mlp R=1", "learner cartpole mlp R=2",
        "learner minatar conv R=1", "learner minatar conv R=2", "job sync (actors 0, R=1)",
        "job R=1, actor per free core", "job R=1, 2 actors", "job R=2, actor per free core",
        "peer pytorch, 2 actor procs"]
assert sorted(rows) == sorted(want), sorted(rows)
assert all(v > 0 for v in rows.values()), rows
# The BLAS is named, the same in every row: the wheel's LibTorch brings MKL; a LibTorch on
# OpenBLAS runs the kernels this CPU can (replicator/launch/blas_kernels.h), not OpenBLAS's SSE3
# fallback.
avx2 = " avx2 " in open("/proc/cpuinfo").read().replace("\n", " ")
blas = {l["blas"] for l in lines if l["type"] == "rl"}
assert len(blas) == 1, blas
name = next(iter(blas))
fast = {"haswell", "zen", "excavator", "skylakex", "cooperlake", "sapphirerapids"}
if name.startswith("OpenBLAS "):
    assert not avx2 or name.removeprefix("OpenBLAS ").lower() in fast, blas
else:
    assert name.startswith("MKL 20"), blas
ratios = [l for l in lines if l["type"] == "rl_ratio"]
assert len(ratios) == 6 and all(r["value"] > 0 for r in ratios), ratios
# --memory keep (the default): the learner rows ran on jemalloc.
assert {l["allocator"] for l in lines if l["type"] == "rl"} == {"jemalloc"}, lines[0]
PY
  echo "bench rl: every row"
  # --parts learner: the learner rows and their ratios only, with glibc under --memory system.
  "$replicator" bench rl --repeats 1 --updates 2 --parts learner --memory system --json \
    >"$work/learner.json" 2>"$work/learner.err" || fail "bench rl --parts: $(cat "$work/learner.err")"
  python3 - "$work/learner.json" <<'PY' || fail "bench rl --parts: $(cat "$work/learner.json")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
rows = sorted(l["row"] for l in lines if l["type"] == "rl")
assert rows == ["learner cartpole mlp R=1", "learner cartpole mlp R=2",
                "learner minatar conv R=1", "learner minatar conv R=2"], rows
assert len([l for l in lines if l["type"] == "rl_ratio"]) == 2, lines
assert {l["allocator"] for l in lines if l["type"] == "rl"} == {"glibc"}, lines[0]
PY
  echo "bench rl --parts learner: the learner rows only"
else
  echo "skipped bench rl: no .venv with torch and gymnasium at $venv_python"
fi

# Bad input.
if "$replicator" train impala --env pong --frames 100 >/dev/null 2>"$work/bad.err"; then
  fail "an unknown game was accepted"
fi
grep -qi "pong" "$work/bad.err" || fail "the error does not name the game: $(cat "$work/bad.err")"
if "$replicator" train impala --replicas 2 --batch 7 --frames 100 >/dev/null 2>"$work/bad.err"
then
  fail "a batch of 7 on 2 replicas was accepted"
fi
grep -q "multiple of the number of replicas" "$work/bad.err" ||
  fail "unclear error: $(cat "$work/bad.err")"
echo "bad input: clear errors"
