#!/usr/bin/env bash
# `replicator bench collectives` across 2 processes under mpirun with the engine's own
# all-reduce beside ours: every native row carries the ratio ours/native as the median of
# the repeats' pairs (time_ours_over_native), and its busbw ratio is that ratio's inverse
# scaled by the bus factors of R replicas (ours) and P processes (native): with 1 local
# replica they are the same, with 2 (R = 4, P = 2) the busbw ratio is 1.5 / 1 over it.
#   tests/bench/bench_native_ratio.sh BUILD_DIR
set -euo pipefail
build="${1:?build dir}"
for local in 1 2; do
  out="$(timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
    "$build/replicator" bench collectives --collectives all_reduce --min-bytes 4 --max-bytes 64K \
    --step-factor 128 --repeats 3 --iters 20 --replicas "$local" --json 2>&1)"
  python3 - "$local" <<PY || { echo "FAIL (--replicas $local): $out" >&2; exit 1; }
import json, sys
local = int(sys.argv[1])
lines = [json.loads(l[l.find("{"):]) for l in """$out""".splitlines() if "{" in l]
rows = [l for l in lines if l.get("type") == "collective"]
ours = {r["bytes"]: r for r in rows if r["engine"] == "mpi"}
native = {r["bytes"]: r for r in rows if r["engine"] == "mpi-native"}
assert sorted(ours) == sorted(native) == [4, 512, 65536], (sorted(ours), sorted(native))
R, P = 2 * local, 2
for size, n in native.items():
    t, b = n["time_ours_over_native"], n["busbw_ours_over_native"]
    assert t is not None and t > 0, n
    want = (2 * (R - 1) / R) / (2 * (P - 1) / P) / t
    assert abs(b - want) < 1e-9 * want, (size, b, want)
    # A median of pair ratios lies between the smallest and largest ratio any pair can have.
    lo = ours[size]["time_us_min"] / n["time_us_max"]
    hi = ours[size]["time_us_max"] / n["time_us_min"]
    assert lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9), (size, lo, t, hi)
print(f"native ratios with {local} local replica(s): paired, bus factors R = {R}, P = {P}")
PY
done
