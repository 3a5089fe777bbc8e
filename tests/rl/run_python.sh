#!/usr/bin/env bash
# run_python.sh PYTHON SCRIPT ARGS...: runs a test script with the project's virtual
# environment; exits 77 (CTest's skip) when that environment has not been made.
set -euo pipefail
python="$1"
shift
if [[ ! -x "$python" ]]; then
  echo "skipped: no virtual environment at $python (scripts/install_deps.sh makes it)" >&2
  exit 77
fi
exec "$python" "$@"
