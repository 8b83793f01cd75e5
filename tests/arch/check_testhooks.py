#!/usr/bin/env python3
"""Test hooks live in one place (common/testhook.h, ARCHITECTURE.md "Test hooks").

The programs read no CTUNE_TEST_ variable themselves: a test site is a
TESTHOOK(TESTHOOK_...) call, which is a constant NULL unless the build defines
CTUNE_TESTHOOKS, and only common/testhook.c (compiled empty otherwise) names
the variables. So `make build`'s binaries hold no CTUNE_TEST_ string. This
check fails, naming the line, when program code names one anyway.

Usage: check_testhooks.py [REPO_ROOT]
"""
import os
import re
import sys

PROGRAM_DIRS = ["common", "server", "worker", "cli", "trainer", "kernels"]
ALLOWED = {os.path.join("common", "testhook.c")}
STRING = re.compile(r'"(?:\\.|[^"\\\n])*"')
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    bad, n = [], 0
    for top in PROGRAM_DIRS:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".c", ".h", ".cu", ".cpp")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                n += 1
                if rel in ALLOWED:
                    continue
                text = open(path, encoding="utf-8", errors="replace").read()
                code = COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
                for lineno, line in enumerate(code.splitlines(), 1):
                    for lit in STRING.findall(line):
                        if "CTUNE_TEST_" in lit:
                            bad.append(f"{rel}:{lineno}: names a test variable ({lit}): use "
                                       "TESTHOOK(TESTHOOK_...) from common/testhook.h")
    for b in bad:
        print(b)
    if bad:
        print(f"check_testhooks: {len(bad)} test variable(s) named outside common/testhook.c")
        return 1
    print(f"check_testhooks: {n} program files; test variables only in common/testhook.c")
    return 0


if __name__ == "__main__":
    sys.exit(main())
