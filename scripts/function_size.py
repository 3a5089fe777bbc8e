#!/usr/bin/env python3
"""Lists the C++ functions longer than a limit (default 120 lines), lambdas included in the
function that holds them, and exits 1 when there is one.

    function_size.py [--max N] [--exclude GLOB ...] PATH...

PATHs are files or folders (searched for *.h, *.cc, *.cu). Generated code (*.pb.*) is skipped.
The reader is lexical, for clang-formatted code: it drops comments, string and character
literals, then follows braces. A brace opens a function body when the text before it, back to
the previous `;`, `{` or `}`, holds a parameter list and is not a namespace, a type, an
initializer (`= {`, `({`, `[{`) or a control statement; a function's length runs from the line
of its name to its closing brace.
"""
import argparse
import fnmatch
import pathlib
import re
import sys

SCOPE = re.compile(r"\b(namespace|class|struct|union|enum)\b|extern\s*\"C\"")
CONTROL = re.compile(r"^\s*(if|for|while|switch|catch|else|do|try)\b")


def strip(text):
    """The text with comments and literals blanked (newlines kept, so lines still count)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            end = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            # A digit separator (1'000) is no character literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and j < n and text[j] != c:
                out.append(c)
                i += 1
                continue
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_directives(code):
    """`code` with its preprocessor lines (and their continuations) blanked."""
    lines = code.split("\n")
    directive = False
    for i, text in enumerate(lines):
        if directive or text.lstrip().startswith("#"):
            directive = text.endswith("\\")
            lines[i] = ""
    return "\n".join(lines)


def functions(text):
    """(first line, last line, name) of every outermost function body in `text`."""
    code = drop_directives(strip(text))
    stack = []  # per open brace: "function", "inner" (inside a function) or "scope"
    head_start = 0  # where the text before the next brace begins
    found = []
    line_at = [0]
    for ch in code:
        line_at.append(line_at[-1] + (ch == "\n"))
    for i, ch in enumerate(code):
        if ch in ";":
            if not stack or stack[-1][0] == "scope":
                head_start = i + 1
        elif ch == "{":
            inside = any(kind == "function" for kind, _, _ in stack)
            head = code[head_start:i]
            kind = "inner"
            if not inside:
                flat = " ".join(head.split())
                if (SCOPE.search(flat) and "(" not in flat.split("{")[0]) or not flat:
                    kind = "scope"
                elif (")" in flat and not flat.endswith("=") and not CONTROL.match(flat)
                      and not re.search(r"[=(\[,]\s*$", flat)):
                    kind = "function"
                elif SCOPE.search(flat):
                    kind = "scope"
                else:
                    kind = "inner"
            if kind == "function":
                first = head.lstrip("\n ")
                start = line_at[head_start + (len(head) - len(first))] + 1
                name = re.findall(r"([~\w:<>]+)\s*\(", " ".join(head.split()))
                stack.append((kind, start, name[0] if name else "?"))
            else:
                stack.append((kind, 0, ""))
            head_start = i + 1
        elif ch == "}":
            if stack:
                kind, start, name = stack.pop()
                if kind == "function":
                    found.append((start, line_at[i] + 1, name))
            head_start = i + 1
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max", type=int, default=120)
    parser.add_argument("--exclude", action="append", default=[])
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args()
    files = []
    for p in map(pathlib.Path, args.paths):
        if p.is_dir():
            files += [f for ext in ("*.h", "*.cc", "*.cu") for f in sorted(p.rglob(ext))]
        else:
            files.append(p)
    long = 0
    for f in files:
        if ".pb." in f.name or any(fnmatch.fnmatch(str(f), g) for g in args.exclude):
            continue
        for first, last, name in functions(f.read_text(errors="replace")):
            if last - first + 1 > args.max:
                print(f"{f}:{first}: {name} is {last - first + 1} lines (at most {args.max})")
                long += 1
    if long:
        print(f"function_size: {long} function(s) over {args.max} lines", file=sys.stderr)
    return 1 if long else 0


if __name__ == "__main__":
    sys.exit(main())
