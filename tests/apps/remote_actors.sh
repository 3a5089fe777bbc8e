#!/usr/bin/env bash
# Remote actors (include/replicator/rl/remote.h) with real processes on loopback:
# `replicator train impala --remote-actors N` and `replicator rl actor`.
#
#   remote_actors.sh BUILD_DIR CASE
#
# CASE: counts        1 learner + 2 actor processes learn CartPole; the learner's counts of
#                     each actor's unrolls equal what each actor says the learner took.
#       kill-actor    an actor SIGKILLed mid-stream: the learner goes on with the other, the
#                     actor restarted with its id rejoins; nothing malformed arrives.
#       kill-learner  the learner SIGKILLed: the actors exit non-zero within their timeout,
#                     naming the learner.
#       two-learners  a learner of 2 gloo processes x 1 replica fed by actors of both.
#       restart-learner  the learner SIGKILLed and started again from its checkpoint within the
#                     actors' timeout: the actors stay, stream to it without a new hello and
#                     take its parameters although its versions are below theirs.
#       launch        `replicator launch --actors 2` starts the learner and its 2 actors; an
#                     actor SIGKILLed mid-stream is restarted by the launcher and rejoins.
#       two-hosts     the learner in one network namespace, 2 actors in another
#                     (tests/engines/netns.sh): CartPole solved. 77 where namespaces cannot
#                     be made.
# Exit 0 on success, 1 on failure, 77 when the case cannot run here (ctest: skipped).
set -uo pipefail
build="${1:?build dir}"
case_name="${2:?case}"
bin="$build/replicator"
source "$(dirname "$0")/processes.sh"

# addresses LOG N: waits (up to 60 s) until the learner's log names N addresses; prints them
# by process, comma-separated.
addresses() {
  local log=$1 n=$2
  for _ in $(seq 600); do
    local found
    found=$(sed -n 's/.*learner process \([0-9]*\): serving remote actors on \([^;]*\);.*/\1 \2/p' "$log" |
      sort -n | awk '{print $2}' | paste -sd, -)
    if [[ -n $found && $(tr ',' '\n' <<<"$found" | wc -l) -ge $n ]]; then
      echo "$found"
      return 0
    fi
    sleep 0.1
  done
  fail "the learner did not name $n addresses"
}

# wait_for LOG PATTERN: waits (up to 60 s) for a line of LOG matching PATTERN.
wait_for() {
  for _ in $(seq 600); do
    grep -q "$2" "$1" && return 0
    sleep 0.1
  done
  fail "no line '$2' in $1"
}

# actor NAME ARGS...: starts an actor in the background, its log in $work/NAME.log; $last_pid
# is the actor's own process (no wrapper: the tests kill it). ctest's timeout bounds the case.
actor() {
  local name=$1
  shift
  "$bin" rl actor "$@" --json > "$work/$name.json" 2> "$work/$name.log" &
  pids+=($!)
  last_pid=$!
}

# the unrolls the learner counted for actor ID (its log line).
learner_count() {
  sed -n "s/.*remote actor $2 ([^)]*): \([0-9]*\) unrolls.*/\1/p" "$1" | head -1
}

learner_flags=(--env cartpole --listen 127.0.0.1:0 --no-progress --report-every 50)

# learner_and_actors ARGS...: starts the learner with ARGS (its log and JSON in $work/learner.*,
# its pid in $learner), waits for its address ($address) and starts actors a1 and a2 ($a1, $a2)
# with ACTOR_FLAGS.
learner_and_actors() {
  "$bin" train impala "${learner_flags[@]}" --remote-actors 2 "$@" \
    > "$work/learner.json" 2> "$work/learner.log" &
  learner=$!
  pids+=($learner)
  address=$(addresses "$work/learner.log" 1) || exit 1
  actor a1 --learner "$address" --id 1 "${actor_flags[@]}"
  a1=$last_pid
  actor a2 --learner "$address" --id 2 "${actor_flags[@]}"
  a2=$last_pid
}
actor_flags=()

case "$case_name" in
  counts)
    learner_and_actors --frames 200000 --json
    wait "$learner" || fail "the learner failed"
    wait "$a1" || fail "actor 1 failed"
    wait "$a2" || fail "actor 2 failed"
    total=0
    for id in 1 2; do
      acknowledged=$(json_field "$work/a$id.json" acknowledged)
      lost=$(json_field "$work/a$id.json" lost)
      counted=$(learner_count "$work/learner.log" "$id")
      [[ $acknowledged == "$counted" ]] ||
        fail "actor $id says the learner took $acknowledged unrolls, the learner counts $counted"
      [[ $lost == 0 ]] || fail "actor $id lost $lost unrolls on a clean run"
      (( acknowledged > 0 )) || fail "actor $id sent nothing"
      total=$(( total + acknowledged ))
    done
    queued=$(json_field "$work/learner.json" remote_unrolls)
    after=$(json_field "$work/learner.json" remote_after_finish)
    (( queued + after == total )) ||
      fail "the learner took $queued + $after unrolls, the actors say $total"
    steps=$(json_field "$work/learner.json" steps)
    (( steps == 313 )) || fail "the learner made $steps steps, not 313"
    echo "1 learner + 2 actor processes: $total unrolls, each actor's count equal on both sides"
    ;;
  kill-actor)
    learner_and_actors --frames 1500000 --json
    # Killed once both stream unrolls (the progress line counts the actors streaming).
    wait_for "$work/learner.log" 'remote 2/2'
    kill -9 "$a1"
    wait "$a1" 2>/dev/null
    sleep 1
    kill -0 "$learner" 2>/dev/null || fail "the learner ended when an actor was killed"
    actor a1-again --learner "$address" --id 1
    again=$last_pid
    wait "$learner" || fail "the learner failed after an actor was killed"
    wait "$a2" || fail "actor 2 failed"
    wait "$again" || fail "the restarted actor failed"
    grep -q 'remote actor 1 ([^)]*): [0-9]* unrolls, .*, 2 streams (1 broken)' "$work/learner.log" ||
      fail "the learner does not show actor 1's broken stream and its second one"
    grep -q ' 0 malformed' "$work/learner.log" || fail "malformed unrolls arrived"
    acknowledged=$(json_field "$work/a1-again.json" acknowledged)
    versions=$(json_field "$work/a1-again.json" versions)
    (( acknowledged > 0 && versions > 0 )) ||
      fail "the restarted actor was not fed ($versions versions) or sent nothing ($acknowledged)"
    steps=$(json_field "$work/learner.json" steps)
    (( steps == 2344 )) || fail "the learner made $steps steps, not 2344"
    echo "an actor killed mid-stream: the learner went on; restarted, it sent $acknowledged unrolls"
    ;;
  kill-learner)
    actor_flags=(--learner-timeout 3s)
    learner_and_actors --frames 100000000
    wait_for "$work/learner.log" 'remote 2/2'
    kill -9 "$learner"
    start=$(date +%s)
    for p in "$a1" "$a2"; do
      wait "$p" && fail "an actor exited 0 after its learner was killed"
    done
    took=$(( $(date +%s) - start ))
    (( took <= 15 )) || fail "the actors took $took s to give up after a 3 s timeout"
    for name in a1 a2; do
      grep -q "the learner at $address did not answer for 3000 ms" "$work/$name.log" ||
        fail "$name does not name the learner"
    done
    echo "learner killed: both actors exited non-zero after $took s: $(grep -m1 error "$work/a1.log")"
    ;;
  two-learners)
    "$bin" launch -n 2 -- "$bin" train impala "${learner_flags[@]}" --engine gloo \
      --remote-actors 1 --frames 100000 --json > "$work/learner.json" 2> "$work/learner.log" &
    learner=$!
    pids+=($learner)
    list=$(addresses "$work/learner.log" 2) || exit 1
    actor a0 --learner "$list" --id 0
    a0=$last_pid
    actor a1 --learner "$list" --id 1
    a1=$last_pid
    wait "$learner" || fail "the learner failed"
    wait "$a0" || fail "actor 0 failed"
    wait "$a1" || fail "actor 1 failed"
    for id in 0 1; do
      grep -q "learner process $id: remote actor $id (" "$work/learner.log" ||
        fail "actor $id did not feed learner process $id"
      acknowledged=$(json_field "$work/a$id.json" acknowledged)
      counted=$(sed -n "s/.*learner process $id: remote actor $id ([^)]*): \([0-9]*\) unrolls.*/\1/p" \
        "$work/learner.log")
      [[ $acknowledged == "$counted" ]] ||
        fail "actor $id says $acknowledged unrolls, learner process $id counts $counted"
    done
    echo "2 learner processes (gloo), each fed by its own actor process"
    ;;
  restart-learner)
    port=$(python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
    restart_flags=(--env cartpole --remote-actors 2 --listen "127.0.0.1:$port" --no-progress
      --report-every 50 --out "$work/run" --checkpoint-every 200 --frames 1500000 --json)
    "$bin" train impala "${restart_flags[@]}" > /dev/null 2> "$work/learner-1.log" &
    learner=$!
    pids+=($learner)
    actor a1 --learner "127.0.0.1:$port" --id 1
    a1=$last_pid
    actor a2 --learner "127.0.0.1:$port" --id 2
    a2=$last_pid
    # Killed past its second checkpoint, so that the actors hold versions above the first.
    for _ in $(seq 600); do
      [[ -f $work/run/checkpoint-000000400.pt ]] && break
      sleep 0.1
    done
    [[ -f $work/run/checkpoint-000000400.pt ]] || fail "no checkpoint at step 400"
    sleep 0.5
    kill -9 "$learner"
    wait "$learner" 2>/dev/null
    "$bin" train impala "${restart_flags[@]}" --resume "$work/run/checkpoint-000000200.pt" \
      > "$work/learner.json" 2> "$work/learner-2.log" || fail "the restarted learner failed"
    wait "$a1" || fail "actor 1 failed across the learner's restart"
    wait "$a2" || fail "actor 2 failed across the learner's restart"
    for id in 1 2; do
      (( $(json_field "$work/a$id.json" reconnects) >= 1 )) || fail "actor $id did not reconnect"
      grep -q "remote actor $id ([^)]*): [1-9][0-9]* unrolls" "$work/learner-2.log" ||
        fail "actor $id sent the restarted learner nothing"
    done
    steps=$(json_field "$work/learner.json" steps)
    (( steps == 2344 )) || fail "the restarted learner made $steps steps, not 2344"
    # From 100 steps after the restart on, the actors play the restarted learner's versions:
    # no negative policy lag.
    python3 - "$work/run/metrics.jsonl" <<'PY' || fail "negative policy lag after the restart"
import json, sys
lags = [(r["step"], r["policy_lag"]) for r in map(json.loads, open(sys.argv[1]))
        if r.get("type") == "train" and "policy_lag" in r and r["step"] >= 300]
assert lags and all(lag >= 0 for _, lag in lags), lags
PY
    echo "learner restarted from step 200: both actors stayed and fed it to step $steps"
    ;;
  launch)
    "$bin" launch --actors 2 -- "$bin" train impala --env cartpole --no-progress --report-every 50 --frames 1500000 \
      --json > "$work/launch.out" 2> "$work/learner.log" &
    launcher=$!
    pids+=($launcher)
    wait_for "$work/learner.log" 'remote 2/2'
    victim=$(pgrep -f -- "rl actor --learner [^ ]* --id 0\$") || fail "no process of actor 0"
    kill -9 $victim
    wait "$launcher" || fail "the launcher failed"
    sed -n 's/^\[rank 0\] \({.*\)$/\1/p' "$work/launch.out" > "$work/learner.json"
    grep -q '^replicator launch: actor 0 was killed by signal 9 (Killed); restarting it (1 of 3)$' \
      "$work/learner.log" || fail "the launcher did not say it restarts actor 0"
    grep -q 'remote actor 0 ([^)]*): [0-9]* unrolls, .*, 2 streams (1 broken)' "$work/learner.log" ||
      fail "the learner does not show actor 0's broken stream and its second one"
    for id in 0 1; do
      grep -q "^\[actor $id\] actor $id: the learner at 127.0.0.1:[0-9]* finished" "$work/learner.log" ||
        fail "actor $id did not see the learner finish"
    done
    [[ $(json_field "$work/learner.json" remote_actors) == 2 ]] || fail "not 2 remote actors"
    steps=$(json_field "$work/learner.json" steps)
    (( steps == 2344 )) || fail "the learner made $steps steps, not 2344"
    echo "launch --actors 2: actor 0 killed, restarted by the launcher, rejoined"
    ;;
  two-hosts)
    netns_cleanup_extra() { cleanup; }
    source "$(dirname "$0")/../engines/netns.sh"
    ip netns exec "$ns_a" "$bin" train impala --env cartpole --remote-actors 2 \
      --listen "$addr_a:7000" --no-progress --report-every 50 --frames 5000000 --stop-at-target \
      --json > "$work/learner.json" 2> "$work/learner.log" &
    learner=$!
    pids+=($learner)
    for id in 1 2; do
      ip netns exec "$ns_b" "$bin" rl actor --learner "$addr_a:7000" --id $id --json \
        > "$work/a$id.json" 2> "$work/a$id.log" &
      pids+=($!)
    done
    wait "$learner" || fail "the learner failed"
    solved=$(json_field "$work/learner.json" solved_frames)
    (( solved > 0 )) || fail "CartPole not solved across the namespaces"
    grep -q "remote actor 1 (.*): [1-9][0-9]* unrolls" "$work/learner.log" &&
      grep -q "remote actor 2 (.*): [1-9][0-9]* unrolls" "$work/learner.log" ||
      fail "an actor in the other namespace sent nothing"
    echo "learner at $addr_a, actors at $addr_b: CartPole solved after $solved frames"
    ;;
  *)
    fail "unknown case $case_name"
    ;;
esac
