"""schema/openapi.yaml and server/api/routes.c describe the same routes: every
(method, path) of the routing table is documented and vice versa. And the
description is one tools can load and fuzz: OpenAPI 3.1, no reference to
another file, and on every operation the answers every request may get
(401/403 by the route's role, 400/413 for a body, 500, 503; the lease header
on each fenced trial write)."""
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def roles():
    src = open(os.path.join(ROOT, "server", "api", "routes.c")).read()
    out = {}
    for m, p, r in re.findall(r'\{RM_(GET|POST|PUT|DELETE), "([^"]+)", RA_(\w+), H_\w+\}', src):
        if "*" in p:  # static files: documented as "/"
            continue
        out[(m.lower(), p)] = r
    return out


def table():
    return set(roles())


FENCED = {("post", "/api/v1/trials/{id}/" + w) for w in ("results", "complete", "fail", "release", "rendezvous")}
FENCED |= {("put", "/api/v1/trials/{id}/checkpoint"), ("put", "/api/v1/trials/{id}/logs")}


def check_answers():
    """Every operation lists what any request to it may be answered."""
    try:
        import yaml
    except ImportError:
        print("note: python3-yaml missing (scripts/install-deps --test): answers not checked")
        return True
    text = open(os.path.join(ROOT, "schema", "openapi.yaml")).read()
    doc = yaml.safe_load(text)
    ok = True

    def bad(msg):
        nonlocal ok
        ok = False
        print(msg)

    if not str(doc.get("openapi", "")).startswith("3.1."):
        bad("openapi.yaml must be OpenAPI 3.1 (JSON Schema 2020-12 inside), got %r"
            % doc.get("openapi"))
    for ref in re.findall(r'\$ref: *"?([^"}\s,]+)', text):
        if not ref.startswith("#/"):
            bad("reference to another file (tools cannot load it): %s" % ref)
    rl = roles()
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method not in ("get", "post", "put", "delete"):
                continue
            codes = set(op.get("responses", {}))
            role = rl.get((method, path), "PUBLIC")
            want = {"500", "503"}
            if role != "PUBLIC":
                want.add("401")
            if role == "ADMIN":
                want.add("403")
            if "requestBody" in op or method in ("post", "put"):
                want |= {"400", "413"}
            if (method, path) in FENCED:
                want.add("409")
                names = [p.get("name") or p.get("$ref", "").rsplit("/", 1)[-1]
                         for p in op.get("parameters", [])]
                if "X-Ctune-Lease" not in names and "Lease" not in names:
                    bad("%s %s: the fenced write does not take X-Ctune-Lease" % (method, path))
            for c in sorted(want - codes):
                bad("%s %s: answer %s is not described" % (method, path, c))
    return ok


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
    ok = check_answers() and ok
    print("%d routes, %s" % (len(t), "consistent" if ok else "INCONSISTENT"))
    return 0 if ok and len(t) > 20 else 1


if __name__ == "__main__":
    sys.exit(main())
