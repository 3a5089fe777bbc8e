# expect_error PATTERN ARGS...: `$replicator ARGS...` must fail with PATTERN in its output
# and without a backtrace (sourced; uses $replicator and fail MESSAGE of the test).
expect_error() {
  local pattern="$1"; shift
  local out rc=0
  out=$("$replicator" "$@" 2>&1) || rc=$?
  [ "$rc" -ne 0 ] || fail "'$*' succeeded, expected an error matching '$pattern'"
  echo "$out" | grep -q -- "$pattern" || fail "'$*' failed without '$pattern': $out"
  echo "$out" | grep -q "^frame #" && fail "'$*' printed a backtrace: $out"
  echo "error as expected: $(echo "$out" | head -1)"
}
