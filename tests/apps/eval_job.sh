#!/usr/bin/env bash
# `replicator eval real` end to end (tests/CMakeLists.txt runs it): a classifier trained for
# a few dozen steps, then the trivial generator's quality as one JSON line with every field,
# its FD floor below its ceiling; the table without --json; a missing classifier fails with
# a message naming it. One process at a time, about half a minute.
# Usage: eval_job.sh BUILD_DIR
set -euo pipefail
replicator="$1/replicator"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$replicator" train classifier --replicas 1 --threads 2 --batch 128 --steps 40 --no-eval \
  --no-progress --out "$work/classifier" 2>"$work/train.err" ||
  fail "train classifier: $(cat "$work/train.err")"
checkpoint="$(ls "$work"/classifier/checkpoint-*.pt | tail -n 1)"
[ -f "$checkpoint" ] || fail "no checkpoint: $(ls "$work/classifier")"

"$replicator" eval real --classifier "$checkpoint" --samples 2000 --json >"$work/eval.json" \
  2>"$work/eval.err" || fail "eval real: $(cat "$work/eval.err")"
[ "$(wc -l <"$work/eval.json")" -eq 1 ] || fail "not one JSON line: $(cat "$work/eval.json")"
python3 - "$work/eval.json" <<'PY' || fail "JSON: $(cat "$work/eval.json")"
import json, sys
j = json.load(open(sys.argv[1]))
for key in ("samples", "fd", "fd_floor", "fd_ceiling", "gan_test_accuracy",
            "classifier_test_accuracy", "ceiling_gan_test_accuracy", "cas", "cas_real"):
    assert key in j, key
assert j["samples"] == 2000 and j["cas"] is None and j["cas_real"] is None, j
assert 0 <= j["fd_floor"] < j["fd_ceiling"], j
for key in ("gan_test_accuracy", "classifier_test_accuracy", "ceiling_gan_test_accuracy"):
    assert 0 <= j[key] <= 1, key
print("eval real: FD floor %.3f < ceiling %.3f (trivial generator %.3f), GAN-test %.3f"
      % (j["fd_floor"], j["fd_ceiling"], j["fd"], j["gan_test_accuracy"]))
PY

"$replicator" eval real --classifier "$checkpoint" --samples 500 >"$work/table.txt"
grep -q "^ceiling: trivial generator" "$work/table.txt" || fail "no table: $(cat "$work/table.txt")"
echo "eval real: table"

if "$replicator" eval real --classifier "$work/missing.pt" 2>"$work/missing.err"; then
  fail "a missing classifier was accepted"
fi
grep -q "$work/missing.pt" "$work/missing.err" || fail "no file named: $(cat "$work/missing.err")"
echo "eval real: a missing classifier names the file"
