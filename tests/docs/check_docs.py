#!/usr/bin/env python3
"""The docs stay a map: every cited anchor and function resolves, and no
comment or heading says when it was written. Run by `make test` (label unit):

    check_docs.py [REPO_ROOT]

Checks, each failure printed as FILE:LINE: message (exit 1 when any):
  anchors    every citation of a markdown heading by anchor (a path ending
             in .md, then '#', then the anchor) in code (C, CUDA, Python,
             JS, CSS, shell, CMake, SQL, YAML, JSON, Lua, HTML) and in
             markdown names a heading of that file (GitHub's anchor rules;
             headings inside code fences do not count). Paths are relative
             to the citing file, then to the repository root.
  sections   code may not cite HACKING.md by a quoted section name: it holds
             no contracts; cite an anchor of docs/protocol.md or
             ARCHITECTURE.md instead.
  functions  every function ARCHITECTURE.md names, written in backticks with
             () after the name, is defined in a C source (.c, .h, .cu).
  dates      no markdown heading and no code comment names an issue number
             (the word issue, an optional '#', digits) or the delivery round
             it came in: the git log carries the history.
  layers     nothing under server/core includes a header of server/api,
             server/state or server/store; nothing under server/store one of
             server/api or server/state; nothing under server/state one of
             server/api (ARCHITECTURE.md#layers).
There are no exclusions: fix the line, or the docs it cites.
"""
import io
import os
import re
import subprocess
import sys
import tokenize

C_LIKE = {".c", ".h", ".cu", ".cpp", ".js", ".mjs", ".css"}
HASH = {".py", ".sh", ".cmake", ".yaml", ".yml", ".toml", ".sbatch", ".service",
        ".example", ".txt"}
DASH = {".sql", ".lua"}
HASH_NAMES = {"Makefile", "Dockerfile", "CMakeLists.txt"}
SKIP_DIRS = {".git", "node_modules", "__pycache__"}

ISSUE_RE = re.compile(r"\bissues?\s*#?\s*\d+|\bwaves?\b", re.I)
ANCHOR_RE = re.compile(r"((?:[\w.-]+/)*[\w.-]+\.md)#([\w-]+)")
SAME_FILE_LINK_RE = re.compile(r"\]\(#([^)\s]+)\)")
# HACKING.md then a quoted name, on the same line or the next comment line
HACKING_SECTION_RE = re.compile(r"HACKING\.md[,:]?[ \t]*(?:\n[ \t]*(?:\*|#|//|--)?[ \t]*)?"
                                r"\(?[ \t]*[\"\u201c]")
FUNC_RE = re.compile(r"`([A-Za-z_]\w*)\(\)`")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)

failures = []


def fail(path, line, msg):
    failures.append("%s:%d: %s" % (path, line, msg))


def repo_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others",
                              "--exclude-standard", "-z"], capture_output=True, check=True)
        files = [f for f in out.stdout.decode().split("\0") if f]
        return sorted(f for f in files if os.path.isfile(os.path.join(root, f)))
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith("build")]
            for n in names:
                files.append(os.path.relpath(os.path.join(d, n), root))
        return sorted(files)


def read(root, rel):
    try:
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            return f.read()
    except (UnicodeDecodeError, OSError):
        return None


def kind(rel, text):
    """How comments look in this file: 'c', 'py', 'hash', 'dash', 'html',
    'json', 'md', or None (not checked)."""
    base = os.path.basename(rel)
    ext = os.path.splitext(base)[1]
    if ext == ".md":
        return "md"
    if ext in C_LIKE:
        return "c"
    if ext == ".py":
        return "py"
    if ext == ".txt" and base != "CMakeLists.txt":
        return None
    if base in HASH_NAMES or ext in HASH:
        return "hash"
    if ext in DASH:
        return "dash"
    if ext == ".html":
        return "html"
    if ext == ".json":
        return "json"
    if not ext and text.startswith("#!"):
        return "py" if "python" in text.split("\n", 1)[0] else "hash"
    return None


# ---- comments --------------------------------------------------------------

C_TOKEN_RE = re.compile(r'//[^\n]*|/\*.*?(?:\*/|\Z)|"(?:\\.|[^"\\\n])*"'
                        r"|'(?:\\.|[^'\\\n])*'|`(?:\\.|[^`\\])*`", re.S)


def c_comments(text):
    """(line, text) of every // and /* */ comment, skipping string and char
    literals (and JS template strings)."""
    out = []
    for m in C_TOKEN_RE.finditer(text):
        tok = m.group(0)
        if tok.startswith("//"):
            body = tok[2:]
        elif tok.startswith("/*"):
            body = tok[2:-2] if tok.endswith("*/") else tok[2:]
        else:
            continue
        line = text.count("\n", 0, m.start()) + 1
        for k, part in enumerate(body.split("\n")):
            out.append((line + k, part))
    return out


def py_comments(text):
    """(line, text) of every # comment and every docstring-like string (a
    string that is a whole statement)."""
    out = []
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return hash_comments(text)
    prev = tokenize.NEWLINE
    for i, t in enumerate(toks):
        if t.type == tokenize.COMMENT:
            out.append((t.start[0], t.string[1:]))
        elif t.type == tokenize.STRING and prev in (tokenize.NEWLINE, tokenize.NL,
                                                    tokenize.INDENT, tokenize.DEDENT):
            nxt = toks[i + 1].type if i + 1 < len(toks) else tokenize.ENDMARKER
            if nxt in (tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.COMMENT):
                for k, part in enumerate(t.string.split("\n")):
                    out.append((t.start[0] + k, part))
        if t.type not in (tokenize.COMMENT,):
            prev = t.type
    return out


def hash_comments(text):
    out = []
    for no, l in enumerate(text.split("\n"), 1):
        m = re.search(r"(?:^|\s)#(?!!)", l)
        if m:
            out.append((no, l[m.end():]))
    return out


def dash_comments(text):
    return [(no, l[l.index("--") + 2:]) for no, l in enumerate(text.split("\n"), 1)
            if "--" in l]


def html_comments(text):
    out = []
    for m in re.finditer(r"<!--(.*?)-->", text, re.S):
        line = text.count("\n", 0, m.start()) + 1
        for k, part in enumerate(m.group(1).split("\n")):
            out.append((line + k, part))
    return out


def comments(k, text):
    return {"c": c_comments, "py": py_comments, "hash": hash_comments,
            "dash": dash_comments, "html": html_comments}.get(k, lambda t: [])(text)


# ---- markdown ----------------------------------------------------------------

def md_headings(text):
    """(line, level, title) of every ATX heading outside code fences."""
    out, fence = [], None
    for no, l in enumerate(text.split("\n"), 1):
        s = l.lstrip()
        m = re.match(r"(`{3,}|~{3,})", s)
        if m:
            if fence is None:
                fence = m.group(1)[0] * len(m.group(1))
            elif s.startswith(fence):
                fence = None
            continue
        if fence is not None:
            continue
        m = re.match(r"(#{1,6})\s+(.*?)\s*#*\s*$", l)
        if m:
            out.append((no, len(m.group(1)), m.group(2)))
    return out


def slug(title):
    """GitHub's anchor for a heading: the rendered text, lower case, without
    punctuation, spaces as hyphens."""
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", title)   # links, images
    t = re.sub(r"<[^>]+>", "", t)                           # inline html
    t = t.replace("`", "").lower()
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")


def anchors_of(text):
    seen, out = {}, set()
    for _, _, title in md_headings(text):
        a = slug(title)
        if a in seen:
            seen[a] += 1
            a = "%s-%d" % (a, seen[a])
        else:
            seen[a] = 0
        out.add(a)
    return out


# ---- C definitions -------------------------------------------------------------

def strip_c(text):
    """Comments and string literals blanked out, newlines kept."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
                  blank, text, flags=re.S)


KEYWORDS = {"if", "while", "for", "switch", "return", "sizeof", "else", "do", "case"}


def c_definitions(text):
    """Names of the functions (and function-like macros) this file defines."""
    t = strip_c(text)
    names = set(re.findall(r"^\s*#\s*define\s+([A-Za-z_]\w*)\(", t, re.M))
    for m in re.finditer(r"^[A-Za-z_][^;{}()=#\n]*?\b([A-Za-z_]\w*)\s*\(", t, re.M):
        name = m.group(1)
        if name in KEYWORDS:
            continue
        depth, i = 0, m.end() - 1
        while i < len(t):
            if t[i] == "(":
                depth += 1
            elif t[i] == ")":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        rest = t[i + 1:i + 400]
        rest = re.sub(r"__attribute__\s*\(\(.*?\)\)", "", rest, flags=re.S)
        if rest.lstrip().startswith("{"):
            names.add(name)
    return names


# ---- the checks ------------------------------------------------------------------

def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), "..", ".."))
    files = repo_files(root)
    texts, kinds = {}, {}
    for rel in files:
        text = read(root, rel)
        if text is None:
            continue
        k = kind(rel, text)
        if k:
            texts[rel], kinds[rel] = text, k

    anchor_cache = {}

    def anchors(md_rel):
        if md_rel not in anchor_cache:
            t = texts.get(md_rel)
            anchor_cache[md_rel] = None if t is None else anchors_of(t)
        return anchor_cache[md_rel]

    def resolve_md(cited, rel):
        """The repository path of a cited .md file: relative to the citing
        file's folder, then to the root."""
        here = os.path.dirname(rel)
        for cand in (os.path.normpath(os.path.join(here, cited)), os.path.normpath(cited)):
            if cand in texts and kinds[cand] == "md":
                return cand
        return None

    def check_anchor(rel, line, cited, anchor):
        md = resolve_md(cited, rel)
        if md is None:
            fail(rel, line, "cites %s#%s: no such markdown file" % (cited, anchor))
        elif anchor.lower() not in anchors(md):
            fail(rel, line, "cites %s#%s: %s has no heading with that anchor"
                 % (cited, anchor, md))

    c_defs = set()
    for rel, k in kinds.items():
        if os.path.splitext(rel)[1] in (".c", ".h", ".cu", ".cpp"):
            c_defs |= c_definitions(texts[rel])

    for rel in sorted(texts):
        text, k = texts[rel], kinds[rel]
        lines = text.split("\n")
        if k == "md":
            for no, level, title in md_headings(text):
                if ISSUE_RE.search(title):
                    fail(rel, no, "heading names an issue or a wave: %r" % title)
            in_fence = False
            for no, l in enumerate(lines, 1):
                if re.match(r"\s*(```|~~~)", l):
                    in_fence = not in_fence
                    continue
                if in_fence:
                    continue
                for m in ANCHOR_RE.finditer(l):
                    if not re.search(r"[a-z]+://\S*$", l[:m.start()]):
                        check_anchor(rel, no, m.group(1), m.group(2))
                for m in SAME_FILE_LINK_RE.finditer(l):
                    check_anchor(rel, no, os.path.basename(rel), m.group(1))
            continue
        # code: anchors anywhere in the file (comments and strings alike)
        for no, l in (enumerate(lines, 1) if ".md" in text else []):
            for m in ANCHOR_RE.finditer(l):
                check_anchor(rel, no, m.group(1), m.group(2))
        for m in (HACKING_SECTION_RE.finditer(text) if "HACKING" in text else []):
            fail(rel, text.count("\n", 0, m.start()) + 1, "cites a HACKING.md section by "
                 "name; cite an anchor of docs/protocol.md or ARCHITECTURE.md")
        for no, c in (comments(k, text) if ISSUE_RE.search(text) else []):
            m = ISSUE_RE.search(c)
            if m:
                fail(rel, no, "comment names an issue or a wave (%r): say why, not when"
                     % m.group(0))

    arch = texts.get("ARCHITECTURE.md")
    if arch is None:
        fail("ARCHITECTURE.md", 1, "missing")
    else:
        for no, l in enumerate(arch.split("\n"), 1):
            for m in FUNC_RE.finditer(l):
                if m.group(1) not in c_defs:
                    fail("ARCHITECTURE.md", no, "names %s(), which no C source defines"
                         % m.group(1))
    for need in ("README.md", "docs/protocol.md", "bench/RESULTS.md"):
        if need not in texts:
            fail(need, 1, "missing")

    # layers: which headers live where
    def headers(d):
        return {os.path.basename(r) for r in texts
                if r.startswith(d + "/") and r.endswith(".h")}
    api, state, store = headers("server/api"), headers("server/state"), headers("server/store")
    forbidden = {"server/core": api | state | store, "server/store": api | state,
                 "server/state": api}
    for rel in sorted(texts):
        for d, bad in forbidden.items():
            if rel.startswith(d + "/") and os.path.splitext(rel)[1] in (".c", ".h"):
                own = headers(d)
                for m in INCLUDE_RE.finditer(texts[rel]):
                    h = os.path.basename(m.group(1))
                    if h in bad and h not in own:
                        no = texts[rel].count("\n", 0, m.start()) + 1
                        fail(rel, no, "includes %s from a layer above %s "
                             "(ARCHITECTURE.md#layers)" % (m.group(1), d))

    for f in failures:
        print(f)
    if failures:
        print("check_docs: %d problem(s)" % len(failures), file=sys.stderr)
        return 1
    print("check_docs: ok (%d files)" % len(texts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
