"""schema/openapi.yaml is the API: schemathesis fuzzes a live ctune-server
(with a token file, as the admin) from it, and must find no 5xx, no status,
content type or body that the description does not list, and no crash: the
server still answers and stops cleanly.

By default it makes one pass of each phase over every operation (coverage:
the boundary and negative cases of each parameter and body; fuzzing:
CTUNE_ST_MAX_EXAMPLES random cases per operation, default 15; stateful:
sequences along the API's links), with a fixed seed: the same cases every
run, about 25 s, nearly all of it schemathesis' own generating (a release
server takes as long as a sanitizer one). CTUNE_ST_MAX_TIME=S makes it a
longer run instead: fuzzing and stateful testing repeat, with new cases,
until S seconds are spent (75 was the old default; 600 for a soak: run the
script directly, or give ctest a --timeout over S + 200).

schemathesis comes from PyPI, installed by scripts/install-deps --test into a venv
of its own (CTUNE_SCHEMATHESIS names its `st`); without it the test skips
(exit 77) and says how to get it."""
import os
import subprocess
import sys
import time

from ctune_e2e import Server, experiment, register, lease, tmpdir

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ST_VERSION = "4.32.5"  # keep in step with scripts/install-deps
ADMIN = "admin-token-for-schemathesis-0123"
WORKER = "worker-token-for-schemathesis-0123"
MAX_EXAMPLES = int(os.environ.get("CTUNE_ST_MAX_EXAMPLES", "15"))
MAX_TIME_S = int(os.environ.get("CTUNE_ST_MAX_TIME", "0"))  # 0: one pass
CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,"
          "response_schema_conformance")


def find_st():
    st = os.environ.get("CTUNE_SCHEMATHESIS")
    if st:
        return st if os.access(st, os.X_OK) else None
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    st = os.path.join(cache, "ctune", "schemathesis-" + ST_VERSION, "bin", "st")
    return st if os.access(st, os.X_OK) else None


def seed(s):
    """Something behind the ids the fuzzer tries first: an experiment with
    trials, a worker holding a lease, a stored result, a checkpoint, a log."""
    s.ok("POST", "/api/v1/experiments", experiment(n=3, sched={"type": "asha", "max_t": 8}),
         status=201)
    s.ok("POST", "/api/v1/experiments", experiment(name="second", n=2), status=201)
    w = register(s, cpu=2)
    t = lease(s, w)
    fence = {"X-Ctune-Lease": "%d:%d" % (w, t.get("attempt", 1))}
    s.ok("POST", "/api/v1/trials/%d/results" % t["id"],
         {"training_iteration": 1, "loss": 0.08244031539977931}, headers=fence)
    s.ok("PUT", "/api/v1/trials/%d/logs" % t["id"], "epoch 1\n",
         headers=dict(fence, **{"Content-Type": "text/plain"}))


def main():
    st = find_st()
    if not st:
        print("SKIP: schemathesis %s not found; run scripts/install-deps --test (or set "
              "CTUNE_SCHEMATHESIS to its st)" % ST_VERSION)
        return 77
    d = tmpdir()
    tokens = os.path.join(d, "tokens")
    # 0600: the server refuses a group/other-readable token file
    with os.fdopen(os.open(tokens, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write("admin=%s\nworker=%s\n" % (ADMIN, WORKER))
    s = Server(args=["--token-file", tokens], token=ADMIN)
    seed(s)
    url = "http://%s:%d" % (s.host, s.port)
    # One worker: schemathesis' threads race inside hypothesis' source
    # inspection on Python 3.11 ("AST constructor recursion depth mismatch").
    cmd = [st, "run", os.path.join(ROOT, "schema", "openapi.yaml"), "--url", url,
           "-H", "Authorization: Bearer " + ADMIN, "--checks", CHECKS,
           "--max-examples", str(MAX_EXAMPLES),
           "--seed", "1", "--workers", "1", "--request-timeout", "10",
           "--suppress-health-check", "all", "--no-color", "--generation-database", "none",
           # GET /api/v1/events is an endless text/event-stream: schemathesis
           # reads a whole body (request timeout, counted as a failure).
           # test_pages_events.py covers it, its 400s included.
           "--exclude-path", "/api/v1/events"]
    if MAX_TIME_S:
        cmd += ["--max-time", str(MAX_TIME_S)]
    env = dict(os.environ, NO_COLOR="1", SCHEMATHESIS_HOOKS="")
    t0 = time.time()
    log = os.path.join(d, "st.log")
    # The pass is bounded by its cases, not by time: about 20 s of CPU, so
    # on a machine loaded five times over it takes minutes. The limit only
    # ends a run that hangs (ctest's TIMEOUT is 240 s).
    limit = MAX_TIME_S + 200
    with open(log, "w") as out:
        try:
            rc = subprocess.run(cmd, cwd=d, env=env, stdout=out, stderr=subprocess.STDOUT,
                                timeout=limit).returncode
        except subprocess.TimeoutExpired:
            rc = None
    text = open(log, errors="replace").read()
    print(text[-12000:])
    print("schemathesis exited %s after %.1f s" % (rc, time.time() - t0))
    alive = s.proc.poll() is None
    health = s.get("/healthz")[0] if alive else None
    if not alive or health != 200:
        print("FAIL: the server did not survive the run (alive %s, /healthz %s)\n%s"
              % (alive, health, s.stderr()[-3000:]))
        return 1
    s.stop()  # SIGTERM: exits 0
    if rc != 0:
        print("FAIL: schemathesis did not finish in %d s" % limit if rc is None else
              "FAIL: schemathesis found responses the description does not allow")
        return 1
    print("ok   schemathesis against %s: no 5xx, every answer as described" % url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
