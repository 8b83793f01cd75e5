#!/usr/bin/env python3
"""The server's layer rule, checked on the source (ARCHITECTURE.md "Layers").

ctune-server is built in layers whose arrows point down:
    main.c > api/ > state/ > store/ > core/        (common/ below them all)
A file may include its own layer's headers and those of the layers below,
never a higher one: nothing under state/, store/ or core/ includes an api/
header, store/ knows nothing of the model, and core/ is pure logic (no I/O,
no threads, no clock, no environment). The build already enforces most of it
(each layer's library sees only the include folders below it); this check
names the line when someone widens an include path.

Usage: check_layers.py [REPO_ROOT]   (exit 1 and file:line per violation)
"""
import os
import re
import sys

LAYERS = ["core", "store", "state", "api"]  # low to high; main.c is on top
# What pure logic may include from the system: computation, never I/O.
CORE_SYSTEM_OK = {"errno.h", "math.h", "stdarg.h", "stdio.h", "stdlib.h", "string.h",
                  "stdint.h", "stddef.h", "stdbool.h", "float.h", "limits.h", "assert.h",
                  "ctype.h", "inttypes.h", "cJSON.h"}
# Calls that reach outside the process or the clock: none of them in core/.
CORE_FORBIDDEN_CALLS = re.compile(
    r"\b(fopen|fdopen|freopen|fread|fwrite|fgets|fputs|fprintf|printf|vfprintf|puts|putchar|"
    r"getchar|perror|open|openat|read|write|pread|pwrite|close|socket|connect|bind|listen|"
    r"accept|send|recv|getenv|setenv|time|clock_gettime|gettimeofday|sleep|usleep|nanosleep|"
    r"system|popen|fork|exec[lv]p?e?|opendir|readdir|unlink|rename|mkdir|rmdir|stat|fstat|"
    r"lstat|getrandom|rand|srand|pthread_\w+|sqlite3_\w+|curl_\w+|MHD_\w+|uv_\w+|syslog)\s*\(")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def strip_comments(text):
    """Comments and string literals blanked, newlines kept (line numbers hold)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"', blank, text, flags=re.S)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    server = os.path.join(root, "server")
    owner = {}  # header basename -> layer
    for layer in LAYERS:
        for name in os.listdir(os.path.join(server, layer)):
            if name.endswith(".h"):
                if name in owner:
                    print(f"server/{layer}/{name}: the header name is also in server/{owner[name]}/ "
                          "(one name, one header: includes find headers by name)")
                    return 1
                owner[name] = layer
    bad = []
    nfiles = 0
    for layer in LAYERS:
        rank = LAYERS.index(layer)
        folder = os.path.join(server, layer)
        for name in sorted(os.listdir(folder)):
            if not name.endswith((".c", ".h")):
                continue
            nfiles += 1
            rel = f"server/{layer}/{name}"
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                text = f.read()
            for lineno, line in enumerate(text.splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                kind, inc = m.group(1), os.path.basename(m.group(2))
                if kind == '"' and inc in owner and LAYERS.index(owner[inc]) > rank:
                    bad.append(f"{rel}:{lineno}: includes {inc} of server/{owner[inc]}/, a higher "
                               f"layer than {layer}/ (arrows point down: move the code, or pass "
                               "a callback down)")
                if layer == "core" and kind == "<" and inc not in CORE_SYSTEM_OK:
                    bad.append(f"{rel}:{lineno}: core/ is pure logic; <{m.group(2)}> is not one "
                               "of the headers it may use")
                if layer == "core" and kind == '"' and inc not in owner and inc != "cJSON.h":
                    bad.append(f"{rel}:{lineno}: core/ includes only core/ headers and cJSON.h, "
                               f"not {inc}")
            if layer == "core":
                for lineno, line in enumerate(strip_comments(text).splitlines(), 1):
                    m = CORE_FORBIDDEN_CALLS.search(line)
                    if m:
                        bad.append(f"{rel}:{lineno}: core/ does no I/O: {m.group(1)}() belongs in "
                                   "a layer above (state/ or store/)")
    for b in bad:
        print(b)
    if bad:
        print(f"check_layers: {len(bad)} violation(s) of the layer rule (ARCHITECTURE.md)")
        return 1
    print(f"check_layers: {nfiles} files in server/{{{','.join(LAYERS)}}} keep the layer rule")
    return 0


if __name__ == "__main__":
    sys.exit(main())
