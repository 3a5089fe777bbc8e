#!/usr/bin/env bash
# Checks the relative links and image references of the project's Markdown pages: README.md,
# docs/**/*.md, apps/README.md, bench/README.md, examples/README.md,
# bench/results/**/README.md and src/**/README.md. A target must exist in the tree, and a
# #anchor into a Markdown file must name one of its headings (GitHub's rule: lowercase,
# spaces to '-', punctuation other than '-' and '_' dropped, a repeated heading gets -1,
# -2, ...). http(s) and other URLs with a scheme are not checked; code blocks and code spans
# are skipped.
#   scripts/check_links.sh     exit 0, or 1 with one line per broken link: file:line: target (why)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
exec python3 - "$root" <<'PY'
import os, re, sys
from urllib.parse import unquote

root = os.path.realpath(sys.argv[1])

def pages():
    found = set()
    def add(rel):
        p = os.path.join(root, rel)
        if os.path.isfile(p):
            found.add(os.path.normpath(p))
    def walk(top, keep):
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs.sort()
            for f in files:
                if keep(f):
                    found.add(os.path.normpath(os.path.join(d, f)))
    add('README.md'); add('apps/README.md'); add('bench/README.md'); add('examples/README.md')
    walk('docs', lambda f: f.endswith('.md'))
    walk('bench/results', lambda f: f == 'README.md')
    walk('src', lambda f: f == 'README.md')
    return sorted(found)

FENCE = re.compile(r'^ {0,3}(`{3,}|~{3,})')

def prose_lines(text):
    """The file's lines with fenced code blocks blanked and code spans replaced by spaces
    (line count unchanged, so line numbers stay right)."""
    lines = text.split('\n')
    out, fence = [], None
    for line in lines:
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                    and line.strip() == m.group(1)[0] * len(line.strip()):
                fence = None
            out.append('')
            continue
        if m:
            fence = m.group(1)
            out.append('')
            continue
        out.append(line)
    # Code spans may run over line ends within a paragraph: strip them paragraph by paragraph.
    joined = '\n'.join(out)
    def blank(m):
        return re.sub(r'[^\n]', ' ', m.group(0))
    paras = re.split(r'(\n[ \t]*\n)', joined)
    paras = [re.sub(r'(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)', blank, p, flags=re.S) for p in paras]
    return ''.join(paras).split('\n')

def slug(heading):
    t = heading
    t = re.sub(r'!\[([^\]]*)\]\([^)]*\)', r'\1', t)      # images: their alt text
    t = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', t)       # links: their text
    t = re.sub(r'<[^>]+>', '', t)                        # inline HTML
    t = t.lower()
    t = re.sub(r'[^\w\- ]', '', t)                       # punctuation but '-' and '_'
    return t.replace(' ', '-')

_anchors = {}
def anchors(path):
    if path in _anchors:
        return _anchors[path]
    with open(path, encoding='utf-8') as f:
        text = f.read()
    seen, result = {}, set()
    raw = text.split('\n')
    fence = None
    prev = ''
    for line in raw:
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            prev = ''
            continue
        if m:
            fence = m.group(1); prev = ''
            continue
        h = None
        a = re.match(r'^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$', line)
        if a:
            h = a.group(1) or ''
        elif prev.strip() and re.match(r'^ {0,3}(=+|-+)[ \t]*$', line) \
                and not re.match(r'^ {0,3}([-*+] |\||>)', prev):
            h = prev.strip()
        if h is not None:
            s = slug(h.strip())
            n = seen.get(s, 0)
            seen[s] = n + 1
            result.add(s if n == 0 else f'{s}-{n}')
        for name in re.findall(r'<a\s[^>]*(?:name|id)\s*=\s*"([^"]+)"', line):
            result.add(name)
        prev = line
    _anchors[path] = result
    return result

TARGET = r'(<[^>\n]*>|[^\s()<>]*(?:\([^\s()]*\)[^\s()<>]*)*)'
INLINE = re.compile(r'\]\(\s*' + TARGET + r'(?:\s+(?:"[^"]*"|\'[^\']*\'|\([^)]*\)))?\s*\)')
REFDEF = re.compile(r'^ {0,3}\[[^\]]+\]:\s*(\S+)')
HTML = re.compile(r'<(?:a|img)\s[^>]*(?:href|src)\s*=\s*"([^"]+)"', re.I)
SCHEME = re.compile(r'^[A-Za-z][A-Za-z0-9+.-]*:')

def check(page, lineno, target, errors):
    if target.startswith('<') and target.endswith('>'):
        target = target[1:-1]
    if not target or SCHEME.match(target) or target.startswith('//'):
        return 0
    path, _, anchor = target.partition('#')
    path = unquote(path)
    if not path:
        dest = page
    elif path.startswith('/'):
        dest = os.path.normpath(os.path.join(root, path.lstrip('/')))
    else:
        dest = os.path.normpath(os.path.join(os.path.dirname(page), path))
    rel = os.path.relpath(page, root)
    if dest != root and not dest.startswith(root + os.sep):
        errors.append(f'{rel}:{lineno}: {target} (outside the repository)')
        return 1
    if not os.path.exists(dest):
        errors.append(f'{rel}:{lineno}: {target} (no such file)')
        return 1
    if anchor:
        md = dest
        if os.path.isdir(dest):
            md = os.path.join(dest, 'README.md')
        if md.endswith('.md') and os.path.isfile(md):
            if unquote(anchor) not in anchors(md):
                errors.append(f'{rel}:{lineno}: {target} (no heading #{anchor} in '
                              f'{os.path.relpath(md, root)})')
                return 1
        elif os.path.isdir(dest):
            errors.append(f'{rel}:{lineno}: {target} (a folder without README.md has no #{anchor})')
            return 1
    return 1

errors, links, files = [], 0, pages()
for page in files:
    with open(page, encoding='utf-8') as f:
        lines = prose_lines(f.read())
    for i, line in enumerate(lines, 1):
        targets = [m.group(1) for m in INLINE.finditer(line)]
        m = REFDEF.match(line)
        if m:
            targets.append(m.group(1))
        targets += HTML.findall(line)
        for t in targets:
            links += check(page, i, t, errors)

for e in errors:
    print(e)
if errors:
    print(f'check_links: {len(errors)} broken of {links} relative links in {len(files)} files')
    sys.exit(1)
print(f'check_links: {links} relative links in {len(files)} files, all resolve')
PY
