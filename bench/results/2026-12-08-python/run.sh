#!/usr/bin/env bash
# #36's figures, three runs each, one after the other: bench/python_ddp.py (DDP on "replicator"
# against "gloo"), bench/python_collectives.py (all_reduce from Python against C++) and
# bench/python_threads.py (a Python loop on 2 replica threads against 1), into OUTPUT_DIR
# (python_ddp.txt/.jsonl, python_collectives.txt/.jsonl, python_threads.txt; progress.log
# with the times). Run from the repository's root with nothing else running: run.sh OUTPUT_DIR
set -euo pipefail
out="${1:?output dir}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONPATH=build/python
py=.venv/bin/python
echo "ddp start $(date -u +%H:%M:%S)" >> "$out/progress.log"
$py bench/python_ddp.py --runs 3 --out "$out/python_ddp.jsonl" > "$out/python_ddp.txt" 2>&1
echo "collectives start $(date -u +%H:%M:%S)" >> "$out/progress.log"
OMP_NUM_THREADS=1 $py bench/python_collectives.py --runs 3 --out "$out/python_collectives.jsonl" \
  > "$out/python_collectives.txt" 2>&1
echo "threads start $(date -u +%H:%M:%S)" >> "$out/progress.log"
$py bench/python_threads.py --runs 3 > "$out/python_threads.txt" 2>&1
echo "end $(date -u +%H:%M:%S)" >> "$out/progress.log"
