#!/usr/bin/env bash
# Elastic jobs with real processes (tests/CMakeLists.txt runs it; label multiproc):
#   kill:      a worker SIGKILLed at a random step; the job restarts from the newest
#              checkpoint and ends with the bits of an uninterrupted run; metrics.jsonl
#              repeats no step; the keys of the old generation are gone from the store;
#   stop:      a SIGSTOPped worker is found by its heartbeat within --heartbeat-timeout +
#              --heartbeat (and a scheduling margin), killed, and the job restarts, same bits;
#   redis:     the kill case with the agents meeting in Redis (skipped without redis-server);
#   give-up:   a worker that always fails uses up --max-restarts: status 1, cause named;
#   hosts:     two agents (--nnodes 1:2, one process each) and one agent killed: the job
#              goes on with one host, the same global batch on fewer replicas;
#   join:      a second agent that comes later takes part from the next generation;
#   orphan:    every agent of a job killed, then one started again with the same --rdzv: it
#              ends the silent generation itself and finishes the job from its checkpoint;
#   shards-lost: a job on 8 logical shards over two agents (--nnodes 1:2), one agent
#              SIGKILLed at a random step, the job finished on the other: the digest of the
#              uninterrupted 2-host run (which equals one process's);
#   shards-join: the same job started on one agent, a second joining at a random step:
#              the same digest;
#   refuse:    an elastic job asked to run on mpi, or under mpirun, fails with a clear message;
#   interrupt: SIGINT to an agent ends its workers and the agent (status 130).
# Usage: elastic_job.sh BUILD_DIR [CASE...]   (no case: all)
set -uo pipefail
replicator="$(cd "$1" && pwd)/replicator"
shift
cases=("$@")
[ ${#cases[@]} -gt 0 ] ||
  cases=(kill stop redis give-up hosts join orphan shards-lost shards-join refuse interrupt)
work="$(mktemp -d)"
cleanup() {
  pkill -9 -f "$work" 2>/dev/null
  [ -n "${redis_pid:-}" ] && kill "$redis_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
train=(train classifier --batch 64 --checkpoint-every 5 --no-eval --no-progress --json)
fast=(--heartbeat 200ms --heartbeat-timeout 2s --last-call 1s)

fail() { echo "FAIL: $*" >&2; exit 1; }
digest() { sed -n 's/.*"digest":"\([0-9a-f]*\)".*/\1/p' "$@"; }
field() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" "${@:2}"; }
# wait_for OUT STEP SECONDS: until OUT holds a checkpoint of STEP or later.
wait_for() {
  local deadline=$((SECONDS + $3)) newest
  for (( ; ; )); do
    newest=$(ls "$1" 2>/dev/null | sed -n 's/^checkpoint-0*\([0-9][0-9]*\)\.pt$/\1/p' | sort -n | tail -1)
    [ "${newest:-0}" -ge "$2" ] && return 0
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.05
  done
}
# The pid of the worker of rank $2 started with --out $1 (its agent has the same arguments).
worker_pid() {
  local pid
  for pid in $(pgrep -f -- "--out $1"); do
    tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "REPLICATOR_RANK=$2" && echo "$pid"
  done | head -1
}
now_ms() { date +%s%3N; }

steps=60
expected=""
# The digest of the same run without faults (2 processes over gloo), once.
uninterrupted() {
  [ -n "$expected" ] && return
  expected=$("$replicator" launch -n 2 -- "$replicator" "${train[@]}" --steps $steps | digest)
  [ -n "$expected" ] || fail "the uninterrupted run printed no digest"
}

# run_with_fault NAME SIGNAL RDZV: a 2-process elastic run, SIGNAL to rank 1 at a random step.
run_with_fault() {
  local name="$1" signal="$2" rdzv="$3" out="$work/$1"
  uninterrupted
  local at=$((8 + RANDOM % 40))
  "$replicator" launch -n 2 --max-restarts 2 --rdzv "$rdzv" "${fast[@]}" -- \
    "$replicator" "${train[@]}" --steps $steps --out "$out" > "$work/$name.out" 2> "$work/$name.err" &
  local agent=$!
  wait_for "$out" "$at" 60 || fail "$name: training made no progress: $(tail "$work/$name.err")"
  local pid
  pid=$(worker_pid "$out" 1)
  [ -n "$pid" ] || fail "$name: no worker of rank 1"
  fault_ms=$(now_ms)
  kill -"$signal" "$pid"
  wait $agent
  local rc=$?
  [ $rc = 0 ] || fail "$name: the agent exited $rc: $(grep launch: "$work/$name.err")"
  grep -q "generation 1: 1 host, 2 processes" "$work/$name.err" ||
    fail "$name: no second generation: $(grep launch: "$work/$name.err")"
  local got
  got=$(digest "$work/$name.out")
  [ "$got" = "$expected" ] || fail "$name: digest $got after a restart, $expected without"
  local repeated
  repeated=$(sed -n 's/.*"step":\([0-9]*\).*/\1/p' "$out/metrics.jsonl" | sort | uniq -d)
  [ -z "$repeated" ] || fail "$name: metrics.jsonl repeats steps $repeated"
  echo "$name: SIG$signal at step ~$at, restarted, digest equal ($got)"
}

case_kill() {
  run_with_fault kill KILL "file://$work/rdzv-kill/job"
  local left
  left=$(ls "$work/rdzv-kill/job")
  echo "$left" | grep -q '^gen0$' && fail "kill: the keys of generation 0 are still there: $left"
  echo "kill: old generation's keys deleted ($(echo $left))"
}

case_stop() {
  run_with_fault stop STOP "file://$work/rdzv-stop/job"
  local line
  line=$(grep "stopped making progress" "$work/stop.err") || fail "stop: no heartbeat failure"
  echo "stop: $line"
  # The agent's line names how long the worker was silent: at most the timeout, one beat
  # and one look of the agent (100 ms) later, and a margin for a loaded machine.
  local silent
  silent=$(echo "$line" | sed -n 's/.*no heartbeat for \([0-9.]*\) s.*/\1/p')
  awk -v s="$silent" 'BEGIN { exit !(s >= 2.0 && s <= 2.0 + 0.2 + 0.1 + 1.0) }' ||
    fail "stop: detected after $silent s of silence, expected 2.0-3.3"
}

case_redis() {
  if ! command -v redis-server >/dev/null; then
    echo "redis: SKIPPED (redis-server not installed)"
    return
  fi
  local port=$((20000 + RANDOM % 20000))
  redis-server --port $port --save '' --appendonly no > "$work/redis.log" 2>&1 &
  redis_pid=$!
  for _ in $(seq 50); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
  run_with_fault redis KILL "redis://127.0.0.1:$port/elastic-test"
  local keys
  keys=$(redis-cli -p $port --scan --pattern 'elastic-test/gen0/*' | head -3)
  [ -z "$keys" ] || fail "redis: keys of generation 0 left: $keys"
  echo "redis: old generation's keys deleted"
}

case_give_up() {
  local rc=0
  "$replicator" launch -n 2 --max-restarts 1 "${fast[@]}" -- sh -c 'exit 3' \
    > "$work/give-up.out" 2> "$work/give-up.err" || rc=$?
  [ $rc = 1 ] || fail "give-up: status $rc, expected 1"
  grep -q "giving up after 1 restarts (--max-restarts 1): rank . exited with status 3" \
    "$work/give-up.err" || fail "give-up: $(cat "$work/give-up.err")"
  echo "give-up: $(grep giving "$work/give-up.err")"
}

case_hosts() {
  local out="$work/hosts" rdzv="file://$work/rdzv-hosts/job" i
  for i in 0 1; do
    "$replicator" launch --nnodes 1:2 -n 1 --rdzv "$rdzv" "${fast[@]}" -- \
      "$replicator" "${train[@]}" --steps 100 --out "$out" > "$work/hosts$i.out" 2> "$work/hosts$i.err" &
    eval "agent$i=$!"
  done
  wait_for "$out" 20 60 || fail "hosts: no progress: $(tail "$work"/hosts*.err)"
  grep -q "generation 0: 2 hosts" "$work/hosts0.err" || fail "hosts: did not start with 2 hosts"
  kill -9 "$agent1"
  wait "$agent1" 2>/dev/null
  wait "$agent0" || fail "hosts: the surviving agent failed: $(grep launch: "$work/hosts0.err")"
  grep -q "generation 1: 1 host" "$work/hosts0.err" ||
    fail "hosts: no generation with one host: $(grep launch: "$work/hosts0.err")"
  local replicas steps
  replicas=$(field replicas "$work/hosts0.out")
  steps=$(field steps "$work/hosts0.out")
  [ "$replicas" = 1 ] && [ "$steps" = 100 ] || fail "hosts: ended with $replicas replicas at step $steps"
  echo "hosts: one of two agents killed, the job went on with 1 host to step $steps"
}

case_join() {
  local out="$work/join" rdzv="file://$work/rdzv-join/job"
  "$replicator" launch --nnodes 1:2 -n 1 --rdzv "$rdzv" "${fast[@]}" -- \
    "$replicator" "${train[@]}" --steps 100 --out "$out" > "$work/join0.out" 2> "$work/join0.err" &
  local first=$!
  wait_for "$out" 10 60 || fail "join: no progress: $(tail "$work/join0.err")"
  "$replicator" launch --nnodes 1:2 -n 1 --rdzv "$rdzv" "${fast[@]}" -- \
    "$replicator" "${train[@]}" --steps 100 --out "$out" > "$work/join1.out" 2> "$work/join1.err" &
  local second=$!
  wait $first || fail "join: the first agent failed: $(grep launch: "$work/join0.err")"
  wait $second || fail "join: the second agent failed: $(grep launch: "$work/join1.err")"
  grep -q "a host asks to join" "$work/join0.err" || fail "join: $(grep launch: "$work/join0.err")"
  grep -q "generation 1: 2 hosts" "$work/join1.err" || fail "join: $(grep launch: "$work/join1.err")"
  grep -q "restarts so far 0" "$work/join1.err" || fail "join: a host joining counted as a restart"
  [ "$(field replicas "$work/join0.out" "$work/join1.out")" = 2 ] || fail "join: did not end on 2 replicas"
  echo "join: a second host joined at generation 1 (not counted as a restart)"
}

case_orphan() {
  local out="$work/orphan" rdzv="file://$work/rdzv-orphan/job" i
  for i in 0 1; do
    "$replicator" launch --nnodes 1:2 -n 1 --rdzv "$rdzv" "${fast[@]}" -- \
      "$replicator" "${train[@]}" --steps 60 --out "$out" > /dev/null 2> "$work/orphan$i.err" &
    eval "agent$i=$!"
  done
  wait_for "$out" 15 60 || fail "orphan: no progress: $(tail "$work"/orphan*.err)"
  kill -9 "$agent0" "$agent1"
  wait "$agent0" "$agent1" 2>/dev/null
  "$replicator" launch --nnodes 1:2 -n 1 --rdzv "$rdzv" "${fast[@]}" -- \
    "$replicator" "${train[@]}" --steps 60 --out "$out" > "$work/orphan.out" 2> "$work/orphan.err" ||
    fail "orphan: the new agent failed: $(grep launch: "$work/orphan.err")"
  grep -q "generation 0: no agent of it answers" "$work/orphan.err" ||
    fail "orphan: $(grep launch: "$work/orphan.err")"
  grep -q "resuming from" "$work/orphan.err" || fail "orphan: did not resume from a checkpoint"
  [ "$(field steps "$work/orphan.out")" = 60 ] || fail "orphan: did not finish"
  echo "orphan: a job whose agents were all killed goes on when one is started again"
}

# The sharded job of the shards-* cases: its bits do not depend on the replica count.
sharded=(train classifier --batch 64 --shards 8 --threads 1 --checkpoint-every 5 --no-eval
  --no-progress --json)
sharded_steps=80
sharded_expected=""
# The newest step that OUT's checkpoints or metrics.jsonl show (0: none).
step_reached() {
  { ls "$1" 2>/dev/null | sed -n 's/^checkpoint-0*\([0-9][0-9]*\)\.pt$/\1/p'
    sed -n 's/.*"step":\([0-9]*\).*/\1/p' "$1/metrics.jsonl" 2>/dev/null
    echo 0; } | sort -n | tail -1
}
# sharded_agent NAME RDZV: one elastic agent of one process (--nnodes 1:2) in the background.
sharded_agent() {
  "$replicator" launch --nnodes 1:2 -n 1 --rdzv "$2" "${fast[@]}" -- \
    "$replicator" "${sharded[@]}" --steps $sharded_steps --out "$work/$1" \
    >> "$work/$1.out" 2>> "$work/$1.err" &
}
# The digest of the uninterrupted 2-host run, once; it must equal one process's.
sharded_uninterrupted() {
  [ -n "$sharded_expected" ] && return
  local rdzv="file://$work/rdzv-sharded/job" a0 a1
  sharded_agent sharded "$rdzv"
  a0=$!
  sharded_agent sharded "$rdzv"
  a1=$!
  wait $a0 && wait $a1 || fail "the uninterrupted 2-host run failed: $(grep launch: "$work/sharded.err")"
  grep -q "generation 0: 2 hosts" "$work/sharded.err" || fail "the 2-host run did not start on 2 hosts"
  sharded_expected=$(digest "$work/sharded.out" | sort -u)
  [ "$(echo "$sharded_expected" | wc -w)" = 1 ] ||
    fail "the 2-host run printed no single digest: $sharded_expected"
  local one
  one=$("$replicator" "${sharded[@]}" --steps $sharded_steps --replicas 1 | digest)
  [ "$one" = "$sharded_expected" ] || fail "2 hosts ended with $sharded_expected, 1 process with $one"
  echo "shards: uninterrupted on 2 hosts and on 1 process: $sharded_expected"
}
# sharded_ends_as_uninterrupted NAME: the job's digest equals the uninterrupted run's.
sharded_ends_as_uninterrupted() {
  local got
  got=$(digest "$work/$1.out" | sort -u)
  [ "$got" = "$sharded_expected" ] || fail "$1: digest $got, uninterrupted $sharded_expected"
  [ "$(field steps "$work/$1.out" | sort -u)" = $sharded_steps ] || fail "$1: did not finish"
}

# until_step NAME STEP CASE: waits (60 s at most) until job NAME has reached STEP.
until_step() {
  local deadline=$((SECONDS + 60))
  until [ "$(step_reached "$work/$1")" -ge "$2" ]; do
    [ $SECONDS -lt $deadline ] || fail "$3: no progress: $(tail "$work/$1.err")"
    sleep 0.02
  done
}

case_shards_lost() {
  sharded_uninterrupted
  local rdzv="file://$work/rdzv-lost/job" at=$((8 + RANDOM % 50)) a0 a1
  sharded_agent lost "$rdzv"
  a0=$!
  sharded_agent lost "$rdzv"
  a1=$!
  until_step lost $at shards-lost
  kill -9 $a1
  wait $a1 2>/dev/null
  wait $a0 || fail "shards-lost: the surviving agent failed: $(grep launch: "$work/lost.err")"
  grep -q "generation 1: 1 host" "$work/lost.err" ||
    fail "shards-lost: no generation on one host: $(grep launch: "$work/lost.err")"
  [ "$(field replicas "$work/lost.out")" = 1 ] || fail "shards-lost: did not end on 1 replica"
  grep -q "resuming from" "$work/lost.err" || fail "shards-lost: did not resume from a checkpoint"
  sharded_ends_as_uninterrupted lost
  echo "shards-lost: a host SIGKILLed at step ~$at, the other finished alone: same bits"
}

case_shards_join() {
  sharded_uninterrupted
  local rdzv="file://$work/rdzv-joins/job" at=$((8 + RANDOM % 50)) first second
  sharded_agent joins "$rdzv"
  first=$!
  until_step joins $at shards-join
  sharded_agent joins "$rdzv"
  second=$!
  wait $first || fail "shards-join: the first agent failed: $(grep launch: "$work/joins.err")"
  wait $second || fail "shards-join: the second agent failed: $(grep launch: "$work/joins.err")"
  grep -q "generation 1: 2 hosts" "$work/joins.err" ||
    fail "shards-join: the second host did not join: $(grep launch: "$work/joins.err")"
  [ "$(field replicas "$work/joins.out" | sort -u)" = 2 ] || fail "shards-join: did not end on 2 replicas"
  sharded_ends_as_uninterrupted joins
  echo "shards-join: a second host joined after step ~$at: same bits"
}

case_refuse() {
  local out rc=0
  out=$(REPLICATOR_ENGINE=mpi "$replicator" launch -n 1 --max-restarts 1 -- true 2>&1) || rc=$?
  [ $rc != 0 ] && echo "$out" | grep -q "elastic jobs run on the gloo engine only" ||
    fail "refuse: REPLICATOR_ENGINE=mpi was not refused ($rc): $out"
  if command -v mpirun >/dev/null; then
    rc=0
    out=$(mpirun -np 1 "$replicator" launch -n 1 --max-restarts 1 -- true 2>&1) || rc=$?
    [ $rc != 0 ] && echo "$out" | grep -q "cannot run under mpirun" ||
      fail "refuse: an elastic launch under mpirun was not refused ($rc): $out"
  fi
  rc=0
  out=$("$replicator" launch -n 1 --max-restarts 0 -- "$replicator" "${train[@]}" --steps 1 \
    --engine mpi 2>&1) || rc=$?
  [ $rc = 1 ] && echo "$out" | grep -q "engine" || fail "refuse: --engine mpi in an elastic job: $out"
  echo "refuse: elastic jobs on mpi are refused with a message"
}

case_interrupt() {
  "$replicator" launch -n 2 --max-restarts 3 -- sleep 31.25 > "$work/int.out" 2> "$work/int.err" &
  local agent=$! rc=0
  # A background job of a script starts with SIGINT ignored; the agent takes it once it runs
  # its first generation. Sent before that, it would be lost.
  for _ in $(seq 300); do
    grep -q "generation 0:" "$work/int.err" 2>/dev/null && break
    sleep 0.1
  done
  kill -INT $agent
  wait $agent || rc=$?
  [ $rc = 130 ] || fail "interrupt: the agent exited $rc, expected 130: $(cat "$work/int.err")"
  sleep 0.2
  ! pgrep -f "sleep 31.25" >/dev/null || fail "interrupt: workers left running"
  echo "interrupt: SIGINT ends the agent (130) and its workers"
}

for c in "${cases[@]}"; do "case_${c//-/_}"; done
echo "elastic job: all checks passed (${cases[*]})"
