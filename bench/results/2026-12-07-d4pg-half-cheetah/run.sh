#!/usr/bin/env bash
# D4PG on HalfCheetah, 3 seeds from base 0 side by side (bench/rl_seeds.py --parallel 3), the
# job's defaults and 100,000 updates; the runs in seeds/ (their checkpoints are not kept
# here), the summary and the curve with its band in seeds/. speed.sh is the learner's speed.
set -euo pipefail
cd "$(dirname "$0")"
bw=$(../../../.venv/bin/python -c 'import sys; sys.path.insert(0, "../.."); from copy_bandwidth import copy_gbps; print(f"{copy_gbps():.1f}")')
echo "copy bandwidth $bw GB/s, $(date -u +%H:%M)" | tee -a seeds.log
../../../.venv/bin/python ../../rl_seeds.py --seeds 3 --parallel 3 --out seeds \
  -- train d4pg --env half_cheetah --steps 100000 --checkpoint-every 10000 --report-every 1000 \
  --eval-every 5000 2>&1 | tee -a seeds.log
