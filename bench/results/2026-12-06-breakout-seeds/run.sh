#!/usr/bin/env bash
# A MinAtar game (GAME, default breakout), 5M frames, SEEDS seeds (default 5) drawn from
# BASE (default 0) per setting: bench/rl_seeds.py per setting, the runs in
# /tmp/breakout-seeds, the summaries and curves here.
#   run.sh NAME JOB-ARGS...
set -euo pipefail
cd "$(dirname "$0")/../../.."
here=bench/results/2026-12-06-breakout-seeds
name="$1"; shift
base="${BASE:-0}" game="${GAME:-breakout}" seeds="${SEEDS:-5}"
threshold=()
[ "$game" != breakout ] || threshold=(--threshold 10)
bw=$(.venv/bin/python -c 'import sys; sys.path.insert(0, "bench"); from copy_bandwidth import copy_gbps; print(f"{copy_gbps():.1f}")')
echo "== $name ($game, $seeds seeds from base $base): $* (copy bandwidth $bw GB/s, $(date -u +%H:%M))" | tee -a "$here/sweep.txt"
.venv/bin/python bench/rl_seeds.py --seeds "$seeds" --base "$base" "${threshold[@]}" --out "/tmp/breakout-seeds/$name" \
  -- train impala --env "$game" --frames 5000000 --checkpoint-every 200 "$@" | tee -a "$here/sweep.txt"
mkdir -p "$here/$name"
cp "/tmp/breakout-seeds/$name"/summary.{md,json} "/tmp/breakout-seeds/$name/curve.png" "$here/$name/"
