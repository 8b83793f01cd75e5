"""schema/openapi.yaml and server/routes.c describe the same routes: every
(method, path) of the routing table is documented and vice versa."""
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def table():
    src = open(os.path.join(ROOT, "server", "routes.c")).read()
    out = set()
    for m, p in re.findall(r'\{RM_(GET|POST|PUT|DELETE), "([^"]+)", RA_\w+, H_\w+\}', src):
        if "*" in p:  # static files: documented as "/"
            continue
        out.add((m.lower(), p.replace("{id}", "{id}")))
    return out


def openapi():
    out = set()
    path = None
    for line in open(os.path.join(ROOT, "schema", "openapi.yaml")):
        m = re.match(r"^  (/[^:]*):\s*$", line)
        if m:
            path = m.group(1)
            continue
        if re.match(r"^\S", line):
            path = None
        m = re.match(r"^    (get|post|put|delete):", line)
        if m and path and path != "/":
            out.add((m.group(1), path))
    return out


def main():
    t, o = table(), openapi()
    ok = True
    for r in sorted(t - o):
        print("in routes.c but not in openapi.yaml: %s %s" % r)
        ok = False
    for r in sorted(o - t):
        print("in openapi.yaml but not in routes.c: %s %s" % r)
        ok = False
    print("%d routes, %s" % (len(t), "consistent" if ok else "INCONSISTENT"))
    return 0 if ok and len(t) > 20 else 1


if __name__ == "__main__":
    sys.exit(main())
