#!/usr/bin/env bash
# Lint checks of the C++ sources and CMake files:
#   1. no line over 100 columns (*.h, *.cc, *.cu, CMakeLists.txt, *.cmake, *.cmake.in);
#   2. clang-format (the repository's .clang-format) leaves *.h, *.cc and *.cu unchanged;
#   3. no function over 120 lines (scripts/function_size.py, the whole tree);
#   4. clang-tidy (the repository's .clang-tidy) reports no warning in the repository's files.
#
# Usage: scripts/lint.sh [BUILD_DIR]
#   BUILD_DIR holds compile_commands.json (default: ROOT/build; scripts/build.sh writes it).
#   Exit status 0 when every check passes; one summary line per check.
#
# Files checked: those changed since the merge base with origin/main (or main), plus modified
# and untracked ones. When nothing changed, or with LINT_ALL=1, checks 1 and 2 cover the whole
# tree, and clang-tidy covers the whole tree only if its estimated time fits LINT_TIDY_BUDGET,
# otherwise the changed files. A changed header brings in the .cc files that include it.
#
# Environment:
#   LINT_ALL=1            whole tree (see above)
#   LINT_TIDY=all|changed|core|off   force clang-tidy's file set (all ignores the budget;
#                         core: the layers below LibTorch, src/{base,rendezvous,comm,
#                         engines,collectives,runtime,launch}, about a minute at -j2:
#                         what CI checks)
#   LINT_TIDY_BUDGET=60   seconds clang-tidy may take on the whole tree
#   LINT_JOBS=N           clang-tidy processes at once (default: nproc)
#
# clang-tidy 14 per translation unit, measured on this tree (Release compile_commands.json, one
# clang-tidy at a time on 2 shared cores; CPU seconds, mean wall seconds in brackets):
#   core, no heavy third-party header (25 units: src/core, src/collectives, src/engines, ...)
#                                                1.2-9.5 s, mean 5 s  (7 s)
#   gtest tests (10 units)                       8.7-14 s, mean 11 s  (16 s)
#   CLI11 / nlohmann::json apps (6 units)        22-38 s,  mean 31 s  (48 s)
#   LibTorch (15 units: src/torch, src/data, tests/torch, ...)
#                                                86-110 s, mean 100 s (90-170 s)
# The whole tree (56 units) is about 2000 CPU seconds: over 30 min at -j1, 17 min at -j2, far
# over a minute, so clang-tidy checks the changed files unless LINT_TIDY=all; a few changed
# core units fit the budget, a widely included header or one LibTorch unit does not.
#
# Compile commands from a build with precompiled headers name GCC's .gch through -include;
# clang cannot read it, so clang-tidy gets the header itself instead. clang 14 rejects some
# valid C++20 that GCC 12 builds: LibTorch 1.13's headers with libstdc++ 12 (std::vector of
# the incomplete c10::IValue), lambdas capturing structured bindings, __builtin_cpu_supports
# ("f16c"). Such front-end errors are listed but not counted; clang-tidy warnings in the
# repository's files fail the check.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$(cd "${1:-$ROOT/build}" 2>/dev/null && pwd || echo "${1:-$ROOT/build}")"
LINT_ALL="${LINT_ALL:-0}"
LINT_TIDY="${LINT_TIDY:-}"
LINT_TIDY_BUDGET="${LINT_TIDY_BUDGET:-60}"
LINT_JOBS="${LINT_JOBS:-$(nproc)}"
# Estimated clang-tidy CPU seconds per translation unit (see the figures above): without heavy
# headers, with CLI11/json/gtest, with LibTorch.
TIDY_COST_CORE=5
TIDY_COST_LIB=20
TIDY_COST_TORCH=100

cd "$ROOT"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/lint.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }
summaries=()
failed=0
summary() {  # summary NAME ok|FAIL|skip TEXT...
  local name="$1" state="$2"
  shift 2
  summaries+=("$(printf '%-12s %-4s %s' "$name" "$state" "$*")")
  if [[ "$state" == FAIL ]]; then failed=1; fi
}

# ---- Which files -------------------------------------------------------------------------------
base_ref=""
for ref in origin/main main; do
  if git rev-parse -q --verify "$ref^{commit}" >/dev/null; then base_ref="$ref"; break; fi
done
changed=()
if [[ -n "$base_ref" ]]; then
  merge_base="$(git merge-base HEAD "$base_ref")"
  # Committed since the merge base, staged and unstaged changes, then untracked files.
  mapfile -t changed < <({
    git diff --name-only --diff-filter=d "$merge_base" --
    git ls-files --others --exclude-standard
  } | sort -u | while IFS= read -r f; do [[ -f "$f" ]] && printf '%s\n' "$f"; done)
fi
scope=changed
if [[ "$LINT_ALL" == 1 || ${#changed[@]} -eq 0 ]]; then scope=all; fi
if [[ "$scope" == all ]]; then
  mapfile -t files < <(git ls-files --cached --others --exclude-standard | sort -u |
    while IFS= read -r f; do [[ -f "$f" ]] && printf '%s\n' "$f"; done)
else
  files=("${changed[@]}")
fi
cxx_files=()
length_files=()
for f in "${files[@]}"; do
  case "$f" in
    *.h | *.cc | *.cu) cxx_files+=("$f"); length_files+=("$f") ;;
    CMakeLists.txt | */CMakeLists.txt | *.cmake | *.cmake.in) length_files+=("$f") ;;
  esac
done
if [[ "$scope" == all ]]; then
  reason="LINT_ALL=1"
  if ((${#changed[@]} == 0)); then
    reason="nothing changed since the merge base with ${base_ref:-main}"
  fi
  echo "lint: whole tree, ${#length_files[@]} C++/CMake files ($reason)"
else
  echo "lint: ${#changed[@]} files changed since the merge base with $base_ref" \
    "(${#length_files[@]} C++/CMake)"
fi

# ---- 1. Line length ----------------------------------------------------------------------------
t0="$(now)"
long=0
if ((${#length_files[@]})); then
  # Columns are characters, not bytes (comments hold UTF-8).
  LC_ALL=C.UTF-8 grep -nHP '^.{101}' -- "${length_files[@]}" | cut -d: -f1,2 >"$tmp/long" || true
  long="$(wc -l <"$tmp/long")"
  if ((long)); then
    echo "Lines over 100 columns:"
    sed 's/^/  /' "$tmp/long"
  fi
fi
if ((long)); then
  summary length FAIL "$long lines over 100 columns in ${#length_files[@]} files ($(elapsed "$t0"))"
else
  summary length ok "no line over 100 columns in ${#length_files[@]} files ($(elapsed "$t0"))"
fi

# ---- 2. clang-format ---------------------------------------------------------------------------
t0="$(now)"
unformatted=()
if ((${#cxx_files[@]})); then
  mapfile -t unformatted < <(clang-format --dry-run --Werror -- "${cxx_files[@]}" 2>&1 |
    sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: .*clang-format-violations.*/\1/p' | sort -u)
fi
if ((${#unformatted[@]})); then
  echo "Files clang-format would change:"
  printf '  %s\n' "${unformatted[@]}"
  echo "Fix them with: (cd $ROOT && clang-format -i ${unformatted[*]})"
  summary clang-format FAIL "${#unformatted[@]} of ${#cxx_files[@]} files differ ($(elapsed "$t0"))"
else
  summary clang-format ok "${#cxx_files[@]} files formatted ($(elapsed "$t0"))"
fi

# ---- 3. Function size -----------------------------------------------------------------------------
# No function over 120 lines (scripts/function_size.py; lambdas count in the function that holds
# them), in the whole tree's C++ but generated code.
t0="$(now)"
if python3 "$ROOT/scripts/function_size.py" src include apps bench examples tests \
  >"$tmp/size" 2>&1; then
  summary function-size ok "no function over 120 lines ($(elapsed "$t0"))"
else
  sed 's/^/  /' "$tmp/size"
  summary function-size FAIL \
    "$(grep -c ' lines (at most' "$tmp/size") functions over 120 lines ($(elapsed "$t0"))"
fi

# ---- 4. clang-tidy -----------------------------------------------------------------------------
t0="$(now)"
tidy_mode="${LINT_TIDY:-auto}"
if [[ "$tidy_mode" == off ]]; then
  summary clang-tidy skip "LINT_TIDY=off"
elif [[ ! -f "$BUILD_DIR/compile_commands.json" ]]; then
  summary clang-tidy FAIL "no $BUILD_DIR/compile_commands.json (configure with scripts/build.sh)"
else
  printf '%s\n' "${changed[@]}" >"$tmp/changed"
  # Writes $tmp/db/compile_commands.json and $tmp/tus (the translation units to check) and
  # prints one line saying why.
  python3 - "$ROOT" "$BUILD_DIR" "$tmp" "$scope" "$tidy_mode" "$LINT_TIDY_BUDGET" "$LINT_JOBS" \
    "$TIDY_COST_CORE" "$TIDY_COST_LIB" "$TIDY_COST_TORCH" <<'PY'
import json, os, re, shlex, shutil, subprocess, sys

root, build, tmp, scope, mode = sys.argv[1:6]
budget, jobs = float(sys.argv[6]), float(sys.argv[7])
costs = [float(x) for x in sys.argv[8:11]]
jobs = max(jobs, 1)

def inside(path, top):
    return os.path.commonpath([path, top]) == top

# One entry per repository source file: generated files (under the build directory) and files
# outside the repository are left out; of two entries for a file, the one without LibTorch.
entries = {}
for e in json.load(open(os.path.join(build, "compile_commands.json"))):
    path = os.path.normpath(os.path.join(e["directory"], e["file"]))
    if not inside(path, root) or inside(path, build) or not os.path.isfile(path):
        continue
    args = e["arguments"] if "arguments" in e else shlex.split(e["command"])
    key = ("torch" in " ".join(args), len(args))
    if path not in entries or key < entries[path][0]:
        entries[path] = (key, dict(e, file=path), args)

# #include graph of the repository's files (quoted includes, matched by path suffix).
tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                          "--", "*.h", "*.cc"], cwd=root, capture_output=True, text=True,
                         check=True).stdout.split()
headers = [f for f in tracked if f.endswith(".h")]
include_re = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
# Third-party header-only libraries that make a translation unit slow to parse (see the
# figures at the top of the script): 2 for LibTorch, 1 for these.
HEAVY_LIBS = ("CLI", "nlohmann", "gtest", "gmock")
KINDS = ("core", "lib", "torch")
direct, weight_of = {}, {}
for f in tracked:
    try:
        text = open(os.path.join(root, f), errors="replace").read()
    except OSError:
        continue
    deps, weight = set(), 0
    for kind, name in include_re.findall(text):
        top = name.split("/")[0]
        if kind == "<" and top in ("torch", "ATen", "c10"):
            weight = 2
        elif kind == "<" and top in HEAVY_LIBS:
            weight = max(weight, 1)
        for h in headers:
            if h == name or h.endswith("/" + name):
                deps.add(h)
    direct[f], weight_of[f] = deps, weight

def closure(f):
    seen, todo = set(), [f]
    while todo:
        for d in direct.get(todo.pop(), ()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen

def rewrite(args, n):
    # GCC precompiled headers: pass the header text instead of its .gch.
    out, i = [], 0
    while i < len(args):
        a = args[i]
        if a == "-include" and i + 1 < len(args) and any(
                os.path.exists(args[i + 1] + s) for s in (".gch", ".pch")):
            copy = os.path.join(tmp, "pch", str(n), os.path.basename(args[i + 1]))
            os.makedirs(os.path.dirname(copy), exist_ok=True)
            shutil.copyfile(args[i + 1], copy)
            out += ["-include", copy]
            i += 2
            continue
        if a != "-Winvalid-pch":
            out.append(a)
        i += 1
    return out

tus = {}
for path, (_, e, args) in entries.items():
    rel = os.path.relpath(path, root)
    if rel.endswith(".cu"):
        continue  # nvcc's sources: clang-tidy reads them without the CUDA headers nvcc brings
    pch = any("-include" == a for a in args) and "torch" in " ".join(args)
    weight = max([2 if pch else 0, weight_of.get(rel, 0)]
                 + [weight_of.get(h, 0) for h in closure(rel)])
    tus[rel] = (e, args, weight)

def cost(names):
    return sum(costs[tus[t][2]] for t in names) / jobs

changed = [l for l in open(os.path.join(tmp, "changed")).read().splitlines() if l]
changed_headers = {f for f in changed if f.endswith(".h")}
# Translation units without LibTorch first: their findings come back sooner.
order = lambda t: (tus[t][2], t)
picked = sorted((t for t in tus if t in changed or closure(t) & changed_headers), key=order)
whole = sorted(tus, key=order)
ntorch = sum(tus[t][2] == 2 for t in whole)
nlib = sum(tus[t][2] == 1 for t in whole)
desc = (f"whole tree: {len(whole)} translation units ({ntorch} with LibTorch, {nlib} with "
        f"CLI11/json/gtest), "
        f"estimated {cost(whole):.0f} s at -j{jobs:.0f}")
if mode == "all":
    chosen, why = whole, f"LINT_TIDY=all; {desc}"
elif mode == "changed":
    chosen, why = picked, f"LINT_TIDY=changed: {len(picked)} translation units"
elif mode == "core":
    layers = tuple(f"src/{l}/" for l in ("base", "rendezvous", "comm", "engines",
                                         "collectives", "runtime", "launch"))
    chosen = [t for t in whole if t.startswith(layers)]
    why = (f"LINT_TIDY=core: the layers below LibTorch, {len(chosen)} translation units, "
           f"estimated {cost(chosen):.0f} s")
elif scope == "all" and cost(whole) <= budget:
    chosen, why = whole, f"{desc} <= budget {budget:.0f} s"
else:
    chosen = picked
    why = (f"changed files: {len(picked)} translation units, estimated {cost(picked):.0f} s "
           f"({desc} > budget {budget:.0f} s)" if scope == "all" or cost(whole) > budget else
           f"changed files: {len(picked)} translation units, estimated {cost(picked):.0f} s")
missing = sorted(f for f in changed if f.endswith(".cc") and f not in tus)
if missing:
    print("clang-tidy: not in compile_commands.json, not checked (re-run cmake?): "
          + " ".join(missing))
db = []
for n, t in enumerate(chosen):
    e, args, _ = tus[t]
    e = {k: v for k, v in e.items() if k not in ("command", "arguments")}
    db.append(dict(e, arguments=rewrite(args, n)))
os.makedirs(os.path.join(tmp, "db"), exist_ok=True)
json.dump(db, open(os.path.join(tmp, "db", "compile_commands.json"), "w"), indent=1)
with open(os.path.join(tmp, "tus"), "w") as out:
    for t in chosen:
        out.write(f"{KINDS[tus[t][2]]} {t}\n")
print(f"clang-tidy: {why}")
PY
  if [[ ! -s "$tmp/tus" ]]; then
    summary clang-tidy skip "no changed translation unit; the whole tree is over the budget" \
      "(see above; LINT_TIDY=all checks it)"
  else
    mkdir -p "$tmp/out"
    # One clang-tidy per translation unit; each writes its diagnostics, status and timing.
    # shellcheck disable=SC2317  # run by xargs through export -f
    tidy_one() {  # tidy_one TMP KIND FILE
      local out
      out="$1/out/$(printf '%s' "$3" | tr '/' '_')"
      local start end
      start="$(date +%s.%N)"
      /usr/bin/time -f '%U %S' -o "$out.cpu" \
        clang-tidy --quiet -p "$1/db" "$3" >"$out.txt" 2>&1 && echo 0 >"$out.rc" ||
        echo $? >"$out.rc"
      end="$(date +%s.%N)"
      awk -v a="$start" -v b="$end" -v k="$2" -v f="$3" -v cpu="$(tail -n1 "$out.cpu")" \
        'BEGIN { split(cpu, c, " "); printf "%s %s %.1f %.1f\n", k, f, b - a, c[1] + c[2] }' \
        >"$out.time"
      printf '  %-5s %-48s %6.1f s\n' "$2" "$3" "$(cut -d' ' -f3 "$out.time")"
    }
    export -f tidy_one
    # shellcheck disable=SC2016  # $0..$2 belong to the inner bash
    tr '\n' '\0' <"$tmp/tus" | tr ' ' '\0' |
      xargs -0 -n2 -P"$LINT_JOBS" bash -c 'tidy_one "$0" "$1" "$2"' "$tmp"
    # Deduplicated diagnostics (a header's warning shows once per including file).
    set +e
    python3 - "$ROOT" "$BUILD_DIR" "$tmp" <<'PY'
import collections, glob, os, re, sys

root, build, tmp = sys.argv[1:4]
diag_re = re.compile(r"^(/[^:\n]+):(\d+):(\d+): (warning|error): (.*?)(?: \[([^\]]+)\])?$")
ours, errors, theirs, broken = {}, {}, {}, []
for txt in sorted(glob.glob(os.path.join(tmp, "out", "*.txt"))):
    stem = txt[:-4]
    found = False
    for line in open(txt, errors="replace"):
        m = diag_re.match(line.rstrip("\n"))
        if not m:
            continue
        found = True
        path, ln, col, level, msg, check = m.groups()
        path = os.path.normpath(path)
        key = (path, int(ln), int(col), check or level, msg)
        mine = os.path.commonpath([path, root]) == root and \
            os.path.commonpath([path, build]) != build
        if not mine:
            theirs[key] = line
        elif level == "error" and (check or "").startswith("clang-diagnostic"):
            errors[key] = line.rstrip("\n")
        else:
            ours[key] = line.rstrip("\n")
    rc = open(stem + ".rc").read().strip() if os.path.exists(stem + ".rc") else "?"
    if rc != "0" and not found:
        broken.append((os.path.basename(stem), rc))
for key in sorted(ours):
    print(ours[key].replace(root + "/", ""))
if errors:
    print("clang front-end errors in the repository's files (not counted: GCC builds them; "
          "clang 14 lacks C++20 lambda captures of structured bindings and some "
          "__builtin_cpu_supports features; checks may miss code in these functions):")
    for key in sorted(errors):
        print("  " + errors[key].replace(root + "/", ""))
by_check = collections.Counter(k[3] for k in ours)
if by_check:
    print("clang-tidy findings per check:")
    for check, n in by_check.most_common():
        files = sorted({os.path.relpath(k[0], root) for k in ours if k[3] == check})
        print(f"  {n:4d} {check}: {', '.join(files)}")
if theirs:
    first = sorted(theirs)[0]
    print(f"clang-tidy: {len(theirs)} compiler errors in headers outside the repository, not "
          f"counted (first: {os.path.basename(first[0])}:{first[1]}: {first[4][:90]})")
for name, rc in broken:
    print(f"clang-tidy: {name} exited {rc} without diagnostics:")
    print(open(os.path.join(tmp, "out", name + ".txt"), errors="replace").read()[-2000:])
with open(os.path.join(tmp, "tidy_count"), "w") as out:
    out.write(f"{len(ours)} {len(by_check)} {len(broken)} {len(errors)} {len(theirs)}\n")
PY
    set -e
    read -r nwarn nchecks nbroken nerrors ntheirs <"$tmp/tidy_count"
    ntu="$(wc -l <"$tmp/tus")"
    notes=""
    if ((nerrors + ntheirs)); then
      notes=", $nerrors clang errors in the repository and $ntheirs in third-party headers ignored"
    fi
    if ((nwarn || nbroken)); then
      broken_note=""
      if ((nbroken)); then broken_note=", $nbroken failed to run"; fi
      summary clang-tidy FAIL "$nwarn findings ($nchecks checks) in $ntu translation" \
        "units$broken_note$notes ($(elapsed "$t0"))"
    else
      summary clang-tidy ok "no finding in $ntu translation units$notes ($(elapsed "$t0"))"
    fi
  fi
fi

echo "---- lint summary"
printf '%s\n' "${summaries[@]}"
exit "$failed"
