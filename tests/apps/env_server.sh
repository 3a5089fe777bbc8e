#!/usr/bin/env bash
# Environments in an env server (python/env_server.py, make_remote_env): the IMPALA job on
# gymnasium's CartPole-v1 stepped over gRPC, by actor threads and by a remote actor that takes
# the env servers from its learner; Atari (Pong, with the standard preprocessing and the
# shallow network) for a few steps; a killed job's session closed; `bench env-server`'s rows;
# the env server killed mid-run: the job fails naming it.
#
#   env_server.sh BUILD_DIR PYTHON
# Exit 0 on success, 1 on failure, 77 without the virtual environment (gymnasium, grpcio).
set -uo pipefail
build="${1:?build dir}"
python="${2:?python}"
bin="$build/replicator"
server_py="$(cd "$(dirname "$0")/../.." && pwd)/python/env_server.py"
source "$(dirname "$0")/processes.sh"
if ! "$python" -c "import gymnasium, grpc, google.protobuf" 2>/dev/null; then
  echo "skipped: $python lacks gymnasium, grpcio or protobuf (scripts/install_deps.sh" \
    "installs them)" >&2
  exit 77
fi

# start_server NAME [ARGS...]: an env server in the background ($server_pid), its address in
# $address.
start_server() {
  "$python" "$server_py" --port 0 "${@:2}" 2> "$work/$1.log" &
  server_pid=$!
  pids+=($server_pid)
  for _ in $(seq 300); do
    address=$(sed -n 's/^env server listening on //p' "$work/$1.log")
    [[ -n $address ]] && return 0
    kill -0 "$server_pid" 2>/dev/null || fail "the env server did not start"
    sleep 0.1
  done
  fail "the env server named no address"
}

# endless_job NAME: a CartPole job on the server at $address in the background ($job, its log
# $work/NAME.log), once it has learned its first steps.
endless_job() {
  "$bin" train impala --env gym:CartPole-v1 --env-servers "$address" --actors 1 \
    --frames 100000000 "${flags[@]}" > /dev/null 2> "$work/$1.log" &
  job=$!
  pids+=($job)
  for _ in $(seq 600); do
    grep -q '^step ' "$work/$1.log" && return 0
    sleep 0.1
  done
  fail "the job $1 learned nothing within 60 s"
}

start_server server
flags=(--no-progress --report-every 20 --json)

# Actor threads.
"$bin" train impala --env gym:CartPole-v1 --env-servers "$address" --actors 1 --frames 64000 \
  --envs-per-actor 8 "${flags[@]}" > "$work/threads.json" 2> "$work/threads.log" || fail "the job on gym:CartPole-v1 failed"
[[ $(json_field "$work/threads.json" steps) == 100 ]] || fail "not 100 learner steps"
(( $(json_field "$work/threads.json" episodes) > 0 )) || fail "no episode reported"
grep -q "env server: session [0-9]*: 8 x CartPole-v1, observations (4,)" "$work/server.log" ||
  fail "the env server made no session of the actor's 8 CartPole-v1"
echo "actor threads on gym:CartPole-v1: $(json_field "$work/threads.json" episodes) episodes"

# A remote actor: the environment and its servers come from the learner.
"$bin" train impala --env gym:CartPole-v1 --env-servers "$address" --remote-actors 1 \
  --listen 127.0.0.1:0 --frames 32000 "${flags[@]}" > "$work/learner.json" 2> "$work/learner.log" &
learner=$!
pids+=($learner)
for _ in $(seq 600); do
  listen=$(sed -n 's/.*serving remote actors on \([^;]*\);.*/\1/p' "$work/learner.log")
  [[ -n $listen ]] && break
  sleep 0.1
done
[[ -n $listen ]] || fail "the learner named no address"
"$bin" rl actor --learner "$listen" --id 3 --json > "$work/actor.json" 2> "$work/actor.log" ||
  fail "the remote actor failed"
wait "$learner" || fail "the learner failed"
(( $(json_field "$work/actor.json" acknowledged) > 0 )) || fail "the remote actor sent nothing"
grep -q "actor 3: playing gym:CartPole-v1" "$work/actor.log" || fail "the actor did not play gym:CartPole-v1"
echo "a remote actor on gym:CartPole-v1 through the learner's env servers"

# Atari, where ale-py and OpenCV are there.
if "$python" -c "import ale_py, cv2" 2>/dev/null; then
  # No random-policy episodes first: a Pong episode is thousands of steps.
  "$bin" train impala --env gym:ALE/Pong-v5 --env-servers "$address" --actors 1 \
    --envs-per-actor 2 --batch 2 --hidden 32 --frames 400 --random-episodes 0 "${flags[@]}" \
    > "$work/pong.json" 2> "$work/pong.log" || fail "the job on gym:ALE/Pong-v5 failed"
  [[ $(json_field "$work/pong.json" random_return) == None ]] ||
    fail "--random-episodes 0 measured a random return"
  grep -q "2 x ALE/Pong-v5, observations (84, 84, 4)" "$work/server.log" ||
    fail "no session of Pong with 84 x 84 x 4 observations"
  echo "gym:ALE/Pong-v5: $(json_field "$work/pong.json" steps) learner steps on 84 x 84 x 4 frames"
else
  echo "no ale-py or OpenCV here: Atari not checked"
fi

# A job killed mid-run cannot close its session: the server closes it once it is unused.
first_address=$address first_pid=$server_pid
start_server idle --idle-timeout 1
endless_job dropped
kill -9 "$job"
wait "$job" 2>/dev/null
for _ in $(seq 100); do
  grep -q "env server: session 1 closed: unused for [0-9]* s" "$work/idle.log" && break
  sleep 0.1
done
grep -q "env server: session 1 closed: unused for [0-9]* s" "$work/idle.log" ||
  fail "the session of a killed job was not closed"
kill "$server_pid"
echo "a killed job's session closed by the server: $(grep -m1 'closed' "$work/idle.log")"
address=$first_address server_pid=$first_pid

# `bench env-server`: its three rows, and its own env server stopped at the end.
"$bin" bench env-server --env CartPole-v1 --envs 2 --seconds 0.2 --repeats 1 --python "$python" \
  --server-script "$server_py" --json > "$work/bench.json" 2> "$work/bench.log" ||
  fail "bench env-server failed: $(tail -3 "$work/bench.log")"
python3 - "$work/bench.json" <<'PY' || fail "bench env-server: $(cat "$work/bench.json")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
rows = {l["row"]: l for l in lines if l["type"] == "env_server"}
assert sorted(rows) == ["env server via gRPC", "python in-process", "python in-process + reply"], rows
assert all(r["median"] > 0 and r["env"] == "CartPole-v1" and r["envs"] == 2
           for r in rows.values()), rows
PY
! pgrep -f "env_server.py --port [1-9]" > /dev/null || fail "bench env-server left its env server running"
echo "bench env-server: its 3 rows, and its env server stopped"

# The env server killed mid-run: the job ends non-zero, naming it.
endless_job killed
kill -9 "$server_pid"
start=$SECONDS
wait "$job" && fail "the job went on without its env server"
(( SECONDS - start < 60 )) || fail "the job took $((SECONDS - start)) s to end"
grep -q "the env server at $address failed a step" "$work/killed.log" ||
  fail "the job's error does not name the env server"
echo "env server killed: the job ended, naming it: $(grep -m1 'env server at' "$work/killed.log")"
