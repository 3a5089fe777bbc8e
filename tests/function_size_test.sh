#!/usr/bin/env bash
# scripts/function_size.py names exactly the functions over the limit in a file made to have
# them: a member function and a function holding a lambda one line over, one exactly at the
# limit, and braces that are no function (namespaces, a table, a string, a macro, an if).
set -euo pipefail
root="${1:?source root}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
lines() { for ((i = 0; i < $1; i++)); do echo "  x += 1;"; done; }
{
  echo '// a comment with { a brace'
  echo '#define BLOCK(a) { a; }'
  echo 'namespace a {'
  echo 'namespace {'
  echo 'constexpr int kTable[] = {1, 2, 3};'
  echo 'struct S {'
  echo '  int member(int x) {'
  lines 119
  echo '  }'
  echo '  int small() { return 1; }'
  echo '};'
  echo '}  // namespace'
  echo 'int with_lambda(int x) {'
  echo '  auto f = [&](int z) {'
  echo '    return "}{";'
  echo '  };'
  lines 117
  echo '}'
  echo 'int at_the_limit(int x) {'
  lines 118
  echo '}'
  echo 'void control() {'
  echo '  if (true) {'
  echo '  }'
  echo '}'
  echo '}  // namespace a'
} >"$tmp/t.cc"
if out="$(python3 "$root/scripts/function_size.py" "$tmp/t.cc" 2>&1)"; then
  echo "FAIL: the long functions were not found" >&2
  exit 1
fi
want="$tmp/t.cc:7: member is 121 lines (at most 120)
$tmp/t.cc:131: with_lambda is 122 lines (at most 120)
function_size: 2 function(s) over 120 lines"
[ "$out" = "$want" ] || { printf 'FAIL: got\n%s\nwanted\n%s\n' "$out" "$want" >&2; exit 1; }
python3 "$root/scripts/function_size.py" --max 122 "$tmp/t.cc"
echo "function_size: the two long functions named, nothing else"
