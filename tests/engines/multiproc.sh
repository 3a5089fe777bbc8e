#!/usr/bin/env bash
# Multi-process tests of the Replicator on real processes: mpirun for the mpi engine,
# `replicator launch` (or plain background processes) for gloo.
#
#   multiproc.sh BUILD_DIR CASE
#
# CASE: determinism-mpi, determinism-gloo, shards-mpi, shards-gloo, mismatch-mpi, mismatch-gloo,
#       local-mismatch-mpi, local-mismatch-gloo, throw-mpi, throw-gloo, stop-mpi, stop-gloo,
#       straggler-mpi, straggler-gloo, native-deadline-mpi, kill-mpi, kill-gloo, timeline-mpi,
#       timeline-gloo, two-hosts-gloo, devices-mpi, devices-gloo
# Exit 0 on success, 1 on failure, 77 when the case cannot run here (ctest: skipped).
set -uo pipefail
build="${1:?build dir}"
case_name="${2:?case}"
prog="$build/tests/replicator_multiproc"
launcher="$build/replicator"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mpi=(timeout 120 mpirun --oversubscribe --bind-to none)

fail() { echo "FAIL: $*" >&2; exit 1; }

# straggler_job ENGINE SCENARIO OUT: starts the 2 x 2 straggler scenario in the background
# (output to OUT) with straggler_after 1 s; sets `job` to its pid.
straggler_job() {
  export REPLICATOR_STRAGGLER_AFTER=1s REPLICATOR_TIMEOUT=60s
  if [[ $1 == mpi ]]; then
    "${mpi[@]}" -np 2 -x REPLICATOR_LOCAL_REPLICAS=2 -x REPLICATOR_STRAGGLER_AFTER \
      -x REPLICATOR_TIMEOUT ${REPLICATOR_TRACE_DIR:+-x REPLICATOR_TRACE_DIR} "$prog" "$2" \
      >"$3" 2>&1 &
  else
    timeout 120 "$launcher" launch -n 2 --local-replicas 2 -- "$prog" "$2" >"$3" 2>&1 &
  fi
  job=$!
}

# seconds_of TEXT: "1.2 s" or "850 ms" as seconds.
seconds_of() { awk '{ print ($2 == "ms") ? $1 / 1000 : $1 }' <<<"$1"; }

# expect_straggler ENGINE: a SIGSTOPped process is named by the other within 1 s past
# straggler_after, with its last collective and line, once; resumed, the job ends normally.
expect_straggler() {
  local out line pid job waited
  out=$(mktemp)
  straggler_job "$1" straggler "$out"
  for _ in $(seq 1 300); do
    line=$(grep -m1 'replicas 0-1 have waited' "$out") && break
    sleep 0.1
  done
  pid=$(grep -o 'pid [0-9]*, stopped' <<<"$line" | grep -o '[0-9]*')
  pkill -CONT -f "replicator_multiproc straggler"
  wait "$job" || fail "the job failed after SIGCONT: $(cat "$out")"
  [[ -n $pid ]] || fail "process 0 did not name a stopped process: $(cat "$out")"
  local site='multiproc_main.cc:[0-9]*'
  grep -q "have waited [0-9.]* m\?s at all_reduce #1 at $site for replica 2 (process 1, pid $pid, stopped): last barrier #0 at $site, done" <<<"$line" ||
    fail "the line does not name the stopped replica, its last collective and line: $line"
  waited=$(seconds_of "$(grep -o 'waited [0-9.]* m\?s' <<<"$line" | cut -d' ' -f2-)")
  awk -v w="$waited" 'BEGIN { exit !(w <= 2.0) }' ||
    fail "named after $waited s, more than straggler_after + 1 s: $line"
  [[ $(grep -c '(process 1, pid' "$out") == 1 ]] || fail "named more than once: $(cat "$out")"
  [[ $(grep -c 'straggler ok' "$out") == 2 ]] || fail "the job did not finish: $(cat "$out")"
  echo "stopped process named after $waited s (straggler_after 1 s): $line"
  rm -f "$out"
}

# expect_slow ENGINE: a replica sleeping in compute is named as such, by the other process
# and by its own; the flight-recorder dumps both processes write on SIGUSR1 meanwhile give
# one verdict naming it, whichever dump is read first.
expect_slow() {
  local out job dumps line verdict
  out=$(mktemp)
  dumps=$(mktemp -d)
  REPLICATOR_TRACE_DIR="$dumps" straggler_job "$1" slow "$out"
  for _ in $(seq 1 300); do
    line=$(grep -m1 'replicas 0-1 have waited' "$out") && break
    sleep 0.1
  done
  pkill -USR1 -f "^$prog slow"
  wait "$job" || fail "the job failed: $(cat "$out")"
  local site='multiproc_main.cc:[0-9]*'
  grep -q "replicas 0-1 have waited [0-9.]* m\?s at all_reduce #1 at $site for replica 2 (process 1, pid [0-9]*, alive): in compute for [0-9.]* m\?s since its collective barrier #0 at $site" "$out" ||
    fail "process 0 does not name the replica in compute: $(cat "$out")"
  grep -q "replica 3 has waited [0-9.]* m\?s at all_reduce #1 at $site for replica 2 (this process): in compute for [0-9.]* m\?s since its collective barrier #0 at $site" "$out" ||
    fail "process 1 does not name its replica in compute: $(cat "$out")"
  [[ $(grep -c 'straggler ok' "$out") == 2 ]] || fail "the job did not finish: $(cat "$out")"
  grep 'have waited\|has waited' "$out"
  [[ $(find "$dumps" -name 'flight_recorder.*.json' | wc -l) == 2 ]] ||
    fail "expected one dump per process in $dumps: $(ls "$dumps")"
  verdict=$("$launcher" diagnose "$dumps") || fail "diagnose failed: $verdict"
  grep -q "^verdict: replica 2 fell behind first: last barrier #0 at $site (step [0-9]*), done; replicas 0-1, 3 waited at all_reduce #1 at $site (step [0-9]*)$" <<<"$verdict" ||
    fail "the verdict does not name replica 2: $verdict"
  # The other reading order: rank 1's dump first.
  mkdir "$dumps/swapped"
  cp "$dumps"/flight_recorder.rank0.*.json "$dumps/swapped/flight_recorder.z.json"
  cp "$dumps"/flight_recorder.rank1.*.json "$dumps/swapped/flight_recorder.a.json"
  [[ $("$launcher" diagnose "$dumps/swapped" | head -1) == $(head -1 <<<"$verdict") ]] ||
    fail "another reading order gives another verdict"
  echo "$verdict"
  rm -rf "$out" "$dumps"
}

# digest_of LAYOUT...: runs the digest scenario and prints the digest line.
digest_local() { REPLICATOR_LOCAL_REPLICAS=$1 timeout 120 "$prog" digest | grep '^digest'; }
digest_mpi() { "${mpi[@]}" -np "$1" -x REPLICATOR_LOCAL_REPLICAS="$2" "$prog" digest | grep '^digest'; }
digest_gloo() {
  timeout 120 "$launcher" launch -n "$1" --local-replicas "$2" -- "$prog" digest |
    sed 's/^\[rank [0-9]*\] //' | grep '^digest'
}

# shards_of ENGINE PROCESSES LOCAL: runs the shards scenario (8 logical shards) and prints its
# line; ENGINE local runs LOCAL threads in one process.
shards_of() {
  case "$1" in
    local) REPLICATOR_LOCAL_REPLICAS=$3 timeout 120 "$prog" shards | grep '^shards' ;;
    mpi) "${mpi[@]}" -np "$2" -x REPLICATOR_LOCAL_REPLICAS="$3" "$prog" shards | grep '^shards' ;;
    gloo) timeout 120 "$launcher" launch -n "$2" --local-replicas "$3" -- "$prog" shards |
      sed 's/^\[rank [0-9]*\] //' | grep '^shards' ;;
  esac
}

# expect_same_shards ENGINE: 8 shards give the same bits on R = 1, 3 and 8 threads and on
# R = 2, 3, 5 processes and 2 x 2 of ENGINE.
expect_same_shards() {
  local first line
  first=$(shards_of local 1 1)
  [[ "$first" == "shards S=8 "* ]] || fail "no shards line from 1 replica ('$first')"
  for layout in "local 1 3" "local 1 8" "$1 2 1" "$1 3 1" "$1 5 1" "$1 2 2"; do
    # shellcheck disable=SC2086
    line=$(shards_of $layout)
    [[ "$line" == "$first" ]] || fail "shards on $layout: '$line' differs from '$first'"
  done
  echo "8 shards: R = 1, 3, 8 threads, 2, 3, 5 $1 processes and 2 x 2 agree: $first"
}

# expect_same R LINE...: every layout of R replicas printed the same digest.
expect_same() {
  local r=$1; shift
  local first=$1
  [[ "$first" == "digest R=$r "* ]] || fail "R=$r: no digest from the reference ('$first')"
  for line in "$@"; do
    [[ "$line" == "$first" ]] || fail "R=$r: '$line' differs from '$first'"
  done
  echo "R=$r: ${#@} layouts agree: $first"
}

# expect_mismatch_cases OUTPUT: every case of the local-mismatch scenario on both processes.
expect_mismatch_cases() {
  local n
  n=$(grep -c ': mismatch ok' <<<"$1")
  [[ $n == 22 ]] || fail "expected 11 cases x 2 processes 'mismatch ok', got $n: $1"
  echo "local mismatch: 11 cases raised CollectiveMismatch on every replica of both processes"
}

# expect_stop_ended OUTPUT SECONDS: the stop scenario's survivor detected it, its flight
# recorder summary names the stopped replica and shows its own collective in progress, the
# job ended within the deadline plus launcher time, and no process of it is left.
expect_stop_ended() {
  grep -q 'stop detected: Timeout' <<<"$1" || fail "the survivor did not time out: $1"
  grep -q '^\(\[rank 0\] \)\?flight recorder' <<<"$1" || fail "no flight recorder summary: $1"
  grep -q 'replica 1 (process 1): never arrived at all_reduce #100 within 3000 ms' <<<"$1" ||
    fail "the summary does not name the stopped replica 1: $1"
  grep -q 'replica 0: step 2, #100 all_reduce f32 x 1024 (4 KiB) at multiproc_main.cc:[0-9]*, in progress for [0-9.]* s' \
    <<<"$1" || fail "the summary does not show the survivor's collective in progress: $1"
  (( $2 < 60 )) || fail "the job took $2 s to end after a 3 s timeout: $1"
  if pgrep -f "replicator_multiproc stop" > /dev/null; then
    pkill -9 -f "replicator_multiproc stop"
    fail "a process of the job was left behind: $1"
  fi
  echo "stopped process: the job ended after $2 s: $(grep -m1 'stop detected' <<<"$1")"
}

case "$case_name" in
  determinism-mpi)
    expect_same 2 "$(digest_local 2)" "$(digest_mpi 2 1)"
    expect_same 4 "$(digest_local 4)" "$(digest_mpi 2 2)" "$(digest_mpi 4 1)"
    expect_same 3 "$(digest_local 3)" "$(digest_mpi 3 1)"
    expect_same 6 "$(digest_local 6)" "$(digest_mpi 2 3)" "$(digest_mpi 3 2)" "$(digest_mpi 6 1)"
    ;;
  determinism-gloo)
    expect_same 4 "$(digest_local 4)" "$(digest_gloo 2 2)" "$(digest_gloo 4 1)"
    expect_same 3 "$(digest_local 3)" "$(digest_gloo 3 1)"
    expect_same 6 "$(digest_local 6)" "$(digest_gloo 2 3)" "$(digest_gloo 3 2)" "$(digest_gloo 6 1)"
    ;;
  shards-mpi | shards-gloo)
    expect_same_shards "${case_name#shards-}"
    ;;
  mismatch-mpi)
    for scenario in mismatch signature; do
      out=$("${mpi[@]}" -np 2 -x REPLICATOR_LOCAL_REPLICAS=2 "$prog" $scenario 2>&1) || fail "$out"
      [[ $(grep -c '^mismatch ok' <<<"$out") == 2 ]] || fail "$scenario: expected 2 'mismatch ok': $out"
    done
    ;;
  mismatch-gloo)
    for scenario in mismatch signature; do
      out=$(timeout 120 "$launcher" launch -n 2 --local-replicas 2 -- "$prog" $scenario 2>&1) ||
        fail "$out"
      [[ $(grep -c 'mismatch ok' <<<"$out") == 2 ]] || fail "$scenario: expected 2 'mismatch ok': $out"
    done
    ;;
  devices-mpi | devices-gloo)
    # 2 processes of 2 replicas on fake devices: the same bits as the host's, with the
    # all-reduces in the device between the processes (shared memory on), and through the
    # host with it off.
    for shm in on off; do
      export REPLICATOR_DEVICES=fake:2 REPLICATOR_SHARED_MEMORY=$shm
      if [[ $case_name == devices-mpi ]]; then
        out=$("${mpi[@]}" -np 2 -x REPLICATOR_LOCAL_REPLICAS=2 -x REPLICATOR_DEVICES \
          -x REPLICATOR_SHARED_MEMORY "$prog" devices 2>&1) || fail "shared memory $shm: $out"
      else
        out=$(timeout 120 "$launcher" launch -n 2 --local-replicas 2 -- "$prog" devices 2>&1) ||
          fail "shared memory $shm: $out"
      fi
      [[ $(grep -c 'devices ok' <<<"$out") == 2 ]] || fail "shared memory $shm: $out"
      if [[ $shm == on ]]; then
        grep -q 'waits 0$' <<<"$out" && fail "an all-reduce left the device: $out"
      else
        [[ $(grep -c 'waits 0$' <<<"$out") == 2 ]] || fail "shared memory off: $out"
      fi
    done
    ;;
  local-mismatch-mpi)
    out=$("${mpi[@]}" -np 2 -x REPLICATOR_LOCAL_REPLICAS=2 "$prog" local-mismatch 2>&1) ||
      fail "$out"
    expect_mismatch_cases "$out"
    ;;
  local-mismatch-gloo)
    out=$(timeout 120 "$launcher" launch -n 2 --local-replicas 2 -- "$prog" local-mismatch 2>&1) ||
      fail "$out"
    expect_mismatch_cases "$out"
    ;;
  stop-mpi)
    # A stopped process never answers: the others time out, and the job must end (no
    # survivor left in MPI_Finalize), saying why once per survivor.
    start=$(date +%s)
    out=$(REPLICATOR_TIMEOUT=3s "${mpi[@]}" -np 2 -x REPLICATOR_TIMEOUT "$prog" stop 2>&1) &&
      fail "the job should have failed: $out"
    took=$(( $(date +%s) - start ))
    expect_stop_ended "$out" "$took"
    ;;
  native-deadline-mpi)
    # The engine's own all-reduce cannot be cancelled: past its deadline the process that
    # waits ends the job, naming what it waited for and the peer that did not come.
    start=$(date +%s)
    out=$("${mpi[@]}" -np 2 "$prog" native-deadline 2>&1) && fail "the job should have failed: $out"
    took=$(( $(date +%s) - start ))
    grep -q 'MPI_Allreduce of 1048576 bytes on lane 0 did not complete within 2000 ms: process 1' \
      <<<"$out" || fail "no message naming the all-reduce and process 1: $out"
    grep -q 'not ended\|returned without' <<<"$out" && fail "the job went on: $out"
    (( took < 40 )) || fail "the job took $took s to end after a 2 s deadline: $out"
    if pgrep -f "replicator_multiproc native-deadline" > /dev/null; then
      pkill -9 -f "replicator_multiproc native-deadline"
      fail "a process of the job was left behind: $out"
    fi
    echo "engine's own all-reduce past its deadline: the job ended after $took s"
    ;;
  stop-gloo)
    start=$(date +%s)
    out=$(REPLICATOR_TIMEOUT=3s timeout 120 "$launcher" launch -n 2 -- "$prog" stop 2>&1) &&
      fail "the job should have failed: $out"
    took=$(( $(date +%s) - start ))
    expect_stop_ended "$out" "$took"
    ;;
  throw-mpi)
    out=$("${mpi[@]}" -np 3 -x REPLICATOR_LOCAL_REPLICAS=2 "$prog" throw 2>&1) || fail "$out"
    [[ $(grep -c 'released ok' <<<"$out") == 3 ]] || fail "expected 3 'released ok': $out"
    ;;
  throw-gloo)
    out=$(timeout 120 "$launcher" launch -n 3 --local-replicas 2 -- "$prog" throw 2>&1) ||
      fail "$out"
    [[ $(grep -c 'released ok' <<<"$out") == 3 ]] || fail "expected 3 'released ok': $out"
    ;;
  kill-mpi)
    # OpenMPI ends the whole job when a process dies: the test is that it ends, promptly,
    # with a message naming the lost rank (not a hang).
    start=$(date +%s)
    out=$("${mpi[@]}" -np 3 "$prog" kill 2>&1) && fail "the job should have failed: $out"
    grep -q 'rank 2' <<<"$out" || fail "no message names rank 2: $out"
    echo "job ended after $(( $(date +%s) - start )) s: $(grep -m1 'rank 2' <<<"$out")"
    ;;
  straggler-mpi | straggler-gloo)
    expect_straggler "${case_name#straggler-}"
    expect_slow "${case_name#straggler-}"
    ;;
  kill-gloo)
    # Plain background processes (the launcher would stop the survivors itself).
    store=$(mktemp -d)
    pids=()
    for rank in 0 1 2; do
      REPLICATOR_ENGINE=gloo REPLICATOR_RANK=$rank REPLICATOR_WORLD_SIZE=3 \
        REPLICATOR_STORE="file://$store" REPLICATOR_TIMEOUT=30s \
        timeout 120 "$prog" kill > "$store/out.$rank" 2>&1 &
      pids+=($!)
    done
    status=0
    for rank in 0 1; do wait "${pids[$rank]}" || status=1; done
    wait "${pids[2]}"
    cat "$store"/out.0 "$store"/out.1
    for rank in 0 1; do
      grep -q 'peer-lost' "$store/out.$rank" || status=1
    done
    rm -rf "$store"
    [[ $status == 0 ]] || fail "survivors did not report the lost process"
    ;;
  timeline-mpi | timeline-gloo)
    # 2 processes x 2 replicas with REPLICATOR_TIMELINE: one file per process, each a valid
    # JSON array with a track per local replica and the digest step's collectives in order.
    dir=$(mktemp -d)
    if [[ $case_name == timeline-mpi ]]; then
      out=$("${mpi[@]}" -np 2 -x REPLICATOR_LOCAL_REPLICAS=2 -x REPLICATOR_TIMELINE="$dir/run.json" \
        "$prog" digest 2>&1) || fail "$out"
    else
      out=$(REPLICATOR_TIMELINE="$dir/run.json" timeout 120 "$launcher" launch -n 2 \
        --local-replicas 2 -- "$prog" digest 2>&1) || fail "$out"
    fi
    python3 - "$dir" <<'PY' || { ls -l "$dir"; rm -rf "$dir"; fail "bad timeline files"; }
import json, sys
for rank in (0, 1):
    events = json.load(open(f"{sys.argv[1]}/run.rank{rank}.json"))
    assert all(e["pid"] == rank for e in events), "pid is not the rank"
    names = {e["tid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {r: f"replica {r}" for r in (2 * rank, 2 * rank + 1)}, names
    for tid in names:
        mine = [e for e in events if e["ph"] == "X" and e["tid"] == tid]
        assert [e["name"] for e in mine if e["cat"] == "step"][:2] == ["step 1", "step 2"]
        digest = [e for e in mine if e["cat"] == "collective" and e["args"]["step"] == 2]
        assert [e["name"] for e in digest] == ["all_reduce"] * 8 + ["end of step"], digest
        assert [e["args"]["seq"] for e in digest] == list(range(9)), digest
        assert [e["args"]["bytes"] for e in digest[:4]] == [4, 2, 148, 74], digest
print("timeline: 2 files, a track per replica, the digest's collectives in order")
PY
    rm -rf "$dir"
    ;;
  two-hosts-gloo)
    exec "$(dirname "$0")/two_hosts.sh" "$build"
    ;;
  *)
    echo "unknown case $case_name" >&2
    exit 2
    ;;
esac
