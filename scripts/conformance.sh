#!/usr/bin/env bash
# Conformance of the batched environments with their reference implementations, in full:
# CartPole against gymnasium's CartPole-v1, every MinAtar game against the minatar package
# (exact trajectories, then 1000 random-policy episodes per game and side, compared by
# Welch's t-test and the Kolmogorov-Smirnov test; prints a Markdown table).
#
# Usage: scripts/conformance.sh [BUILD_DIR] [EPISODES]   (default: build, 1000)
# Needs the virtual environment of scripts/install_deps.sh and env_dump built in BUILD_DIR.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${1:-$ROOT/build}"
EPISODES="${2:-1000}"
python="$ROOT/.venv/bin/python"
dump="$BUILD_DIR/tests/rl/env_dump"
for f in "$python" "$dump"; do
  if [[ ! -x "$f" ]]; then
    echo "conformance: no $f (scripts/install_deps.sh, then build the env_dump target)" >&2
    exit 2
  fi
done
"$python" -W ignore "$ROOT/tests/rl/conformance_cartpole.py" "$dump" --cases 2000
"$python" -W ignore "$ROOT/tests/rl/conformance_minatar.py" "$dump" --episodes "$EPISODES"
