#!/usr/bin/env python3
"""Every C, CUDA and header file git tracks follows .clang-format.

Runs `clang-format --dry-run --Werror` (clang-format 14, the version the
style was applied with: another version may format differently) over the
tracked sources and names each file that `make format` would change.
Usage: check_format.py SOURCE_DIR
"""
import os
import shutil
import subprocess
import sys


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    exe = shutil.which("clang-format-14") or shutil.which("clang-format")
    if not exe:
        print("check_format: clang-format (14) not found; scripts/install-deps --test installs it",
              file=sys.stderr)
        return 1
    files = subprocess.run(["git", "-C", root, "ls-files", "*.c", "*.h", "*.cu", "*.cuh"],
                           check=True, capture_output=True, text=True).stdout.split()
    if not files:
        print("check_format: no tracked sources under " + root, file=sys.stderr)
        return 1
    bad = []
    for i in range(0, len(files), 64):
        chunk = [os.path.join(root, f) for f in files[i:i + 64]]
        r = subprocess.run([exe, "--dry-run", "--Werror", "--style=file"] + chunk,
                           capture_output=True, text=True)
        if r.returncode:
            for line in r.stderr.splitlines():
                if ": error:" in line:
                    name = os.path.relpath(line.split(":", 1)[0], root)
                    if name not in bad:
                        bad.append(name)
    if bad:
        print("check_format: %d file(s) do not follow .clang-format; run `make format`:" % len(bad))
        for name in bad:
            print("  " + name)
        return 1
    print("check_format: %d files follow .clang-format" % len(files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
