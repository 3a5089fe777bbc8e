#!/usr/bin/env bash
# `replicator train classifier --shards 8`: the parameters digest after 20 steps is the same
# for R = 1, 2, 3, 4, 5 and 8 replicas as threads of one process, as R processes on mpi and
# on gloo, and as 2 processes x 2 threads; the same job without shards ends elsewhere on
# 2 replicas than on 1 (what the shards change); a run stopped at step 10 on 3 replicas and
# resumed on 5 ends with the same bits; a resume under other conditions is refused; the GAN
# on 4 shards after 5 steps has the same bits for R = 1, 2, 4 (threads, mpi and gloo
# processes); bad shard counts fail clearly.
# Usage: shards_job.sh BUILD_DIR HAVE_MPI HAVE_GLOO   (HAVE_*: 1 or 0)
set -euo pipefail
replicator="$1/replicator"
have_mpi="${2:-0}"
have_gloo="${3:-0}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
base=(train classifier --batch 64 --no-eval --no-progress --json --threads 1 --shards 8)
job=(train classifier --batch 64 --steps 20 --no-eval --no-progress --json --threads 1)
sharded=("${job[@]}" --shards 8)

digest() { sed -n 's/.*"digest":"\([0-9a-f]*\)".*/\1/p'; }
fail() { echo "FAIL: $*" >&2; exit 1; }
started=$SECONDS

reference=$("$replicator" "${sharded[@]}" --replicas 1 | digest)
[ -n "$reference" ] || fail "no digest from the 1-replica run"
echo "1 replica: $reference"
expect_reference() {  # expect_reference LAYOUT DIGEST
  [ "$2" = "$reference" ] || fail "$1 ended with $2, 1 replica with $reference"
  echo "$1: same bits"
}
for r in 2 3 4 5 8; do
  expect_reference "1 process x $r threads" \
    "$("$replicator" "${sharded[@]}" --replicas "$r" | digest)"
done
if [ "$have_mpi" = 1 ]; then
  mpi=(mpirun --oversubscribe --bind-to none)
  for r in 2 3 4 5 8; do
    expect_reference "$r mpi processes" \
      "$("${mpi[@]}" -np "$r" "$replicator" "${sharded[@]}" --replicas 1 | digest)"
  done
  expect_reference "2 mpi processes x 2 threads" \
    "$("${mpi[@]}" -np 2 "$replicator" "${sharded[@]}" --replicas 2 | digest)"
fi
if [ "$have_gloo" = 1 ]; then
  for r in 2 3 4 5 8; do
    expect_reference "$r gloo processes" \
      "$("$replicator" launch -n "$r" -- "$replicator" "${sharded[@]}" --replicas 1 | digest)"
  done
fi

# Exact continuation on another replica count: 10 steps on 3, the rest on 5.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$replicator" "${base[@]}" --replicas 3 --steps 10 --out "$work/run" >/dev/null
expect_reference "10 steps on 3 replicas, resumed on 5" \
  "$("$replicator" "${sharded[@]}" --replicas 5 --out "$work/run" | digest)"

# Without shards the reduction tree is over replicas: 2 replicas end elsewhere than 1.
plain1=$("$replicator" "${job[@]}" --replicas 1 | digest)
plain2=$("$replicator" "${job[@]}" --replicas 2 | digest)
[ "$plain1" != "$plain2" ] || fail "without shards 1 and 2 replicas agree ($plain1)"
echo "without shards: 1 replica $plain1, 2 replicas $plain2"

# The GAN: its models, buffers and the EMA's standing statistics included.
gan=(train gan --width 4 --global-batch 16 --shards 4 --steps 5 --standing-batches 2
  --ema-start 1 --sample-every 0 --no-progress --json --threads 1 --memory system)
gan_reference=$("$replicator" "${gan[@]}" --replicas 1 | digest)
[ -n "$gan_reference" ] || fail "no digest from the 1-replica GAN"
expect_gan() {  # expect_gan LAYOUT DIGEST
  [ "$2" = "$gan_reference" ] || fail "GAN on $1 ended with $2, on 1 replica with $gan_reference"
  echo "GAN on $1: same bits"
}
for r in 2 4; do
  expect_gan "1 process x $r threads" "$("$replicator" "${gan[@]}" --replicas "$r" | digest)"
done
if [ "$have_mpi" = 1 ]; then
  for r in 2 4; do
    expect_gan "$r mpi processes" \
      "$(mpirun --oversubscribe --bind-to none -np $r "$replicator" "${gan[@]}" --replicas 1 | digest)"
  done
fi
if [ "$have_gloo" = 1 ]; then
  for r in 2 4; do
    expect_gan "$r gloo processes" \
      "$("$replicator" launch -n $r -- "$replicator" "${gan[@]}" --replicas 1 | digest)"
  done
fi

source "$(dirname "$0")/expect_error.sh"
expect_error "multiple of the shards" "${job[@]}" --shards 6 --replicas 2
expect_error "each replica takes at least one shard" "${job[@]}" --shards 2 --replicas 4
expect_error "takes the place of --accumulate" "${gan[@]}" --accumulate 2
# A resume under other conditions (here the intra-op threads) is refused, naming both.
out=$("$replicator" train classifier --batch 64 --no-eval --no-progress --json --shards 8 \
  --replicas 5 --out "$work/run" --steps 30 --threads 2 2>&1) &&
  fail "a resume with 2 intra-op threads from a 1-thread checkpoint succeeded"
terms="8 shards of a batch of 64; intra-op threads"
echo "$out" | grep -q "was written under \"$terms 1, .*this run is under \"$terms 2, " ||
  fail "the refused resume did not name both conditions: $out"
echo "resume under other conditions: refused"
echo "shards job: all checks passed in $((SECONDS - started)) s"
