# What the tests that start replicator processes in the background share (sourced): a work
# folder $work, the list $pids of processes to stop at exit (SIGTERM, then SIGKILL: `replicator
# launch` passes SIGTERM on to its processes), fail MESSAGE (prints the end of every
# $work/*.log, exits 1), and json_field FILE FIELD.
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  sleep 0.5
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*.log; do
    [[ -f $f ]] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
  done
  exit 1
}
json_field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
