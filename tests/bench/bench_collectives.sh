#!/usr/bin/env bash
# `replicator bench collectives` on the local engine, small sizes, --check: every row checked
# ok, all_reduce held against the memory's update bandwidth and the others against copy, the
# memory line with both, and no row of these in-cache sizes flagged as faster than memory.
#   tests/bench/bench_collectives.sh BUILD_DIR
set -euo pipefail
build="${1:?build dir}"
out="$(REPLICATOR_LOCAL_REPLICAS=2 timeout 120 "$build/replicator" bench collectives \
  --collectives all_reduce,all_gather,broadcast --min-bytes 4 --max-bytes 64K --step-factor 64 \
  --repeats 1 --check --json)"
python3 - <<PY || { echo "FAIL: $out" >&2; exit 1; }
import json
lines = [json.loads(l) for l in """$out""".splitlines() if l.startswith("{")]
memory = [l for l in lines if l["type"] == "memory"]
assert len(memory) == 1 and memory[0]["copy_gbps"] > 0 and memory[0]["update_gbps"] > 0, memory
rows = [l for l in lines if l["type"] == "collective"]
assert {r["collective"] for r in rows} == {"all_reduce", "all_gather", "broadcast"}, rows
for r in rows:
    assert r["check"] == "ok", r
    want = "update" if r["collective"] == "all_reduce" else "copy"
    assert r["yardstick"] == want, r
    gbps = memory[0]["update_gbps" if want == "update" else "copy_gbps"]
    assert r["yardstick_gbps"] == gbps, r
    assert r["faster_than_memory"] is False, r
print(f"bench collectives: {len(rows)} rows checked, yardsticks update and copy")
PY
