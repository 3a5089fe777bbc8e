#!/usr/bin/env bash
# Fault sweep of elastic jobs: a 2-process gloo `train classifier` run under
# `replicator launch --max-restarts`, faulted again and again, each run compared with the
# same run without faults.
#   kill  x KILLS   SIGKILL to a random worker at a random step
#   stop  x STOPS   SIGSTOP to a random worker at a random step (found by its heartbeat)
#   agent x 1       two agents (--nnodes 1:2, one process each), one agent SIGKILLed: the
#                   job goes on over one host (same global batch, so no digest to compare)
#   torn  x TORNS   SIGKILL to a worker and the newest checkpoint damaged at that moment (cut
#                   short, or 4 KiB of garbage in its middle, in turn): the restart skips it
#                   with a warning and resumes from the one before
#   lost  x HOSTS   the job on 8 logical shards (--shards 8) over two agents, one agent
#                   SIGKILLed at a random step: the job ends on one host with the bits of the
#                   uninterrupted 2-host run
#   join  x HOSTS   the same job started on one agent, a second agent joining at a random
#                   step: the bits of the uninterrupted run
# Per run: the step of the fault, restarts used, whether the digest equals the uninterrupted
# run's, recovery time (fault to the first training step after the restart), and whether
# every checkpoint left in --out loads. Prints a table and the totals.
#
#   fault_sweep.sh BUILD_DIR [KILLS=20] [STOPS=5] [TORNS=5] [STEPS=120] [HOSTS=5]
set -uo pipefail
replicator="$(cd "${1:?build dir}" && pwd)/replicator"
kills="${2:-20}"
stops="${3:-5}"
torns="${4:-5}"
steps="${5:-120}"
hosts="${6:-5}"
work=$(mktemp -d)
trap 'pkill -9 -f "$work" 2>/dev/null; rm -rf "$work"' EXIT
train=(train classifier --batch 64 --checkpoint-every 5 --no-eval --no-progress --json)
sharded=("${train[@]}" --shards 8 --threads 1)
fast=(--max-restarts 3 --heartbeat 200ms --heartbeat-timeout 2s --last-call 1s)
digest() { sed -n 's/.*"digest":"\([0-9a-f]*\)".*/\1/p' "$@"; }
now_ms() { date +%s%3N; }
# The step of the newest checkpoint in folder $1 (0: none).
newest() {
  local n
  n=$(ls "$1" 2>/dev/null | sed -n 's/^checkpoint-0*\([0-9][0-9]*\)\.pt$/\1/p' | sort -n | tail -1)
  echo "${n:-0}"
}
worker_pid() {  # out-folder rank
  local pid
  for pid in $(pgrep -f -- "--out $1"); do
    tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "REPLICATOR_RANK=$2" && echo "$pid"
  done | head -1
}

expected=$("$replicator" launch -n 2 -- "$replicator" "${train[@]}" --steps "$steps" | digest)
[ -n "$expected" ] || { echo "the uninterrupted run failed" >&2; exit 1; }
echo "uninterrupted: $steps steps, digest $expected"
if [ "$hosts" -gt 0 ]; then
  sharded_expected=$("$replicator" launch -n 2 -- "$replicator" "${sharded[@]}" --steps "$steps" | digest)
  [ -n "$sharded_expected" ] || { echo "the uninterrupted sharded run failed" >&2; exit 1; }
  echo "uninterrupted on 8 shards: $steps steps, digest $sharded_expected"
fi
printf '%-5s %-4s %5s %8s %7s %10s %11s\n' fault run step restarts digest recovery_s checkpoints

injected=0 completed=0 restarts_total=0 equal=0 compared=0 lost=0 longest=0
# one KIND INDEX
one() {
  local kind="$1" i="$2" out="$work/$1-$2" err="$work/$1-$2.err" res="$work/$1-$2.out"
  local at=$((10 + RANDOM % (steps - 30)))  # a checkpoint step is reached, then the fault
  local rank=$((RANDOM % 2))
  local agents=() job=("${train[@]}") want="$expected"
  case "$kind" in lost | join) job=("${sharded[@]}") want="$sharded_expected" ;; esac
  if [ "$kind" = agent ] || [ "$kind" = lost ] || [ "$kind" = join ]; then
    for a in 0 1; do
      [ "$kind" = join ] && [ $a = 1 ] && break  # the second agent comes at the fault
      "$replicator" launch --nnodes 1:2 -n 1 --rdzv "file://$work/rdzv-$kind-$i/job" "${fast[@]}" \
        -- "$replicator" "${job[@]}" --steps "$steps" --out "$out" > "$res.$a" 2> "$err.$a" &
      agents+=($!)
    done
  else
    "$replicator" launch -n 2 "${fast[@]}" -- \
      "$replicator" "${train[@]}" --steps "$steps" --out "$out" > "$res" 2> "$err" &
    agents+=($!)
  fi
  local deadline=$((SECONDS + 120))
  while [ "$(newest "$out")" -lt "$at" ]; do
    [ $SECONDS -lt $deadline ] || { echo "$kind $i: no progress" >&2; return; }
    sleep 0.02
  done
  local t0
  t0=$(now_ms)
  case "$kind" in
    kill) kill -KILL "$(worker_pid "$out" $rank)" ;;
    stop) kill -STOP "$(worker_pid "$out" $rank)" ;;
    agent | lost) kill -KILL "${agents[1]}" ;;
    join)
      "$replicator" launch --nnodes 1:2 -n 1 --rdzv "file://$work/rdzv-$kind-$i/job" "${fast[@]}" \
        -- "$replicator" "${job[@]}" --steps "$steps" --out "$out" > "$res.1" 2> "$err.1" &
      agents+=($!)
      ;;
    torn)
      local latest
      latest=$(ls "$out"/checkpoint-*.pt | tail -1)
      kill -KILL "$(worker_pid "$out" $rank)"
      if [ $((i % 2)) = 1 ]; then  # cut short, as a write cut off would leave it
        truncate -s $(( $(stat -c %s "$latest") / 2 )) "$latest"
      else                         # 4 KiB of garbage in the middle, as a bad disk would
        dd if=/dev/urandom of="$latest" bs=4096 count=1 conv=notrunc \
          seek=$(( $(stat -c %s "$latest") / 8192 )) 2>/dev/null
      fi
      ;;
  esac
  injected=$((injected + 1))
  # Recovery: from the fault to the restarted job running again, i.e. replica 0 of the new
  # generation printing "resuming from" (after its rendezvous and the checkpoint's load).
  local t1="" gen_err="$err"
  case "$kind" in agent | lost | join) gen_err="$err.0" ;; esac
  while kill -0 "${agents[0]}" 2>/dev/null; do
    if [ -z "$t1" ] && grep -q "resuming from" "$gen_err" "$err".* 2>/dev/null; then
      t1=$(now_ms)
    fi
    sleep 0.02
  done
  local rc=0
  wait "${agents[0]}" || rc=$?
  [ ${#agents[@]} = 2 ] && wait "${agents[1]}" 2>/dev/null
  local used digest_ok="-" recovery="-" ckpt="ok"
  used=$(grep -ho "restarts so far [0-9]*" "$gen_err" | tail -1 | awk '{print $4}')
  if [ $rc = 0 ]; then
    completed=$((completed + 1))
    restarts_total=$((restarts_total + ${used:-0}))
  fi
  if [ "$kind" != agent ]; then
    compared=$((compared + 1))
    local got
    got=$(digest "$res" "$res".* 2>/dev/null | sort -u)
    if [ "$got" = "$want" ]; then digest_ok=yes; equal=$((equal + 1)); else digest_ok=NO; fi
  fi
  if [ -n "$t1" ]; then
    recovery=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", (b - a) / 1000 }')
    longest=$(awk -v a="$longest" -v b="$recovery" 'BEGIN { print (b > a) ? b : a }')
  fi
  # Every checkpoint left must load: resume from it for zero more steps.
  ls -A "$out" | grep -q tmp && ckpt="tmp-left"
  for c in "$out"/checkpoint-*.pt; do
    local s
    s=$(basename "$c" .pt | sed 's/checkpoint-0*//')
    "$replicator" "${job[@]}" --steps "$s" --resume "$c" > /dev/null 2>&1 || ckpt="BAD $(basename "$c")"
  done
  [ "$ckpt" = ok ] || lost=$((lost + 1))
  printf '%-5s %-4s %5s %8s %7s %10s %11s\n' "$kind" "$i" "$at" "${used:-?}" "$digest_ok" "$recovery" "$ckpt"
  [ $rc = 0 ] || echo "  the job failed ($rc): $(grep launch: "$gen_err" | tail -2)"
  rm -rf "$out"
}

for i in $(seq "$kills"); do one kill "$i"; done
for i in $(seq "$stops"); do one stop "$i"; done
one agent 1
for i in $(seq "$torns"); do one torn "$i"; done
for i in $(seq "$hosts"); do one lost "$i"; done
for i in $(seq "$hosts"); do one join "$i"; done
echo
echo "faults injected $injected; jobs completed $completed; restarts used $restarts_total;" \
  "digests equal $equal of $compared; runs with a checkpoint lost $lost;" \
  "longest recovery ${longest} s"
