"""Helpers for the ctune-server end-to-end tests: start the real daemon on a
free port, talk JSON over HTTP, always clean up (processes and temp dirs)."""
import atexit
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
import ctune_harness as harness  # noqa: E402
from ctune_harness import read_tokens  # noqa: E402,F401  (the suite's tests import it from here)

BIN_DIR = os.environ.get("CTUNE_BIN_DIR") or (sys.argv[1] if len(sys.argv) > 1 else "")
# Trial-scoped writes carry the lease they belong to
# (docs/protocol.md#leases-and-fencing): X-Ctune-Lease: <worker_id>:<attempt>.
FENCED = re.compile(r"^/api/v1/trials/(\d+)/(results|complete|fail|release|checkpoint|logs|rendezvous)$")
LEASE_PATH = re.compile(r"^/api/v1/workers/(\d+)/lease$")
_servers = []
_tmpdirs = []


def _cleanup():
    for s in list(_servers):
        s.kill()
    for d in _tmpdirs:
        shutil.rmtree(d, ignore_errors=True)


atexit.register(_cleanup)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))


def tmpdir():
    d = tempfile.mkdtemp(prefix="ctune-e2e-")
    _tmpdirs.append(d)
    return d


class Server:
    def __init__(self, db=None, args=(), token=None, env=None):
        self.dir = tmpdir()
        self.env = env  # extra environment (test hooks: CTUNE_TEST_*)
        self.db = db or os.path.join(self.dir, "ctune.db")
        self.args = list(args)
        self.token = token
        self.proc = None
        # trial id -> "worker:attempt" of the last lease this client saw; sent
        # on trial writes unless the caller names a lease (or lease=False)
        self.leases = {}
        self.start()

    def start(self, expect_fail=False):
        srv = harness.start_server(BIN_DIR, db=self.db, args=self.args,
                                   log_path=os.path.join(self.dir, "stderr.log"), log_mode="a",
                                   env=dict(os.environ, **self.env) if getattr(self, "env", None) else None,
                                   wait=False)
        self.proc = srv.p
        _servers.append(self)
        if expect_fail:
            srv.readline(harness.START_TIMEOUT)
            return self.proc.wait(timeout=10)
        try:
            srv.await_listening()
        except harness.StartError:
            self.kill()
            raise
        self.host, self.port = srv.host, srv.port
        self.conn = None
        # Tokens by default: the server made (or reused) <db>.tokens; this
        # client is the admin unless the test named a token or --no-auth.
        self.tokens = read_tokens(self.db + ".tokens") if os.path.exists(self.db + ".tokens") else {}
        if self.token is None and "--no-auth" not in self.args and "--token-file" not in self.args:
            self.token = self.tokens.get("admin")
        return 0

    def stderr(self):
        return harness.read_text(os.path.join(self.dir, "stderr.log"))

    def kill(self, sig=signal.SIGKILL):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=10)
        if self.proc and self.proc.stdout:
            self.proc.stdout.close()
        if self in _servers:
            _servers.remove(self)
        self.conn = None

    def stop(self):
        """SIGTERM and check the exit status is 0."""
        rc = harness.stop_popen(self.proc, timeout=10)
        self.kill()
        assert rc == 0, "server exited %d on SIGTERM\n%s" % (rc, self.stderr())

    def restart(self):
        self.kill()
        self.start()

    def request(self, method, path, body=None, headers=None, raw=False, token=None, lease=None):
        """Returns (status, parsed JSON or bytes, headers dict). A trial write
        carries the lease: `lease` ("W:A"), else the last one leased through
        this client; lease=False sends none."""
        h = {}
        m = FENCED.match(path) if method in ("POST", "PUT") else None
        if m and lease is not False:
            lh = getattr(self, "leases", {}).get(int(m.group(1))) if lease is None else lease
            if lh is not None:
                h["X-Ctune-Lease"] = lh
        if body is not None and method in ("POST", "PATCH"):
            h["Content-Type"] = "application/json"  # the server takes JSON only
        if headers:
            h.update(headers)
        if self.conn is None or (self.conn.host, self.conn.port) != (self.host.strip("[]"), self.port):
            self.conn = harness.JsonClient(self.host, self.port, timeout=30)
        tok = token if token is not None else self.token
        status, payload, hdrs = self.conn.request(method, path, body, headers=h, token=tok or "")
        if raw or not payload:
            return status, payload, hdrs
        if "json" in hdrs.get("content-type", ""):
            parsed = json.loads(payload)
            lm = LEASE_PATH.match(path) if method == "POST" else None
            if lm and status == 200:
                tr = parsed["trial"]
                self.__dict__.setdefault("leases", {})[tr["id"]] = "%s:%d" % (lm.group(1), tr["attempt"])
            return status, parsed, hdrs
        return status, payload, hdrs

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body if body is not None else {}, **kw)

    def ok(self, method, path, body=None, status=None, **kw):
        st, b, _ = self.request(method, path, body, **kw)
        want = status or (200, 201, 204)
        if isinstance(want, int):
            want = (want,)
        assert st in want, "%s %s -> %d %s" % (method, path, st, b)
        return b


def experiment(name="e", n=4, metric="loss", mode="min", sched=None, **extra):
    cfg = {"name": name, "metric": metric, "mode": mode, "num_samples": n, "seed": 7,
           "param_space": {"lr": {"type": "loguniform", "lower": 1e-4, "upper": 1e-1}},
           "trainable": {"type": "command", "argv": ["true"]}}
    if sched:
        cfg["scheduler"] = sched
    cfg.update(extra)
    return cfg


def register(srv, cpu=4, gpu=0, memory_mb=0, name="w"):
    return srv.ok("POST", "/api/v1/workers",
                  {"name": name, "resources": {"cpu": cpu, "gpu": gpu, "memory_mb": memory_mb}})["id"]


def lease(srv, wid, free=None):
    st, b, _ = srv.post("/api/v1/workers/%d/lease" % wid, {"free": free} if free else {})
    assert st in (200, 204), (st, b)
    return b["trial"] if st == 200 else None


def report(srv, tid, **result):
    """Posts one result with the trial's last lease; its decision. A 409
    not_leased (the trial is no longer leased to us) answers "stop" too."""
    st, b, _ = srv.post("/api/v1/trials/%d/results" % tid, result)
    assert st == 200 or (st == 409 and b["error"]["code"] == "not_leased"), (st, b)
    return b["decision"]


def heartbeat(srv, wid, running):
    """running: [(trial id, attempt)] -> the reply's stop list as
    [(id, attempt, reason)]."""
    b = srv.ok("POST", "/api/v1/workers/%d/heartbeat" % wid,
               {"running": [{"id": i, "attempt": a} for i, a in running]})
    return [(x["id"], x["attempt"], x["reason"]) for x in b["stop"]]


class Runner:
    """Runs test functions, prints one line each, exits 1 if any failed."""

    def __init__(self):
        self.failed = 0

    def run(self, fn):
        t0 = time.time()
        try:
            fn()
            print("ok   %-40s %.2fs" % (fn.__name__, time.time() - t0), flush=True)
        except Exception:
            import traceback
            self.failed += 1
            print("FAIL %s" % fn.__name__, flush=True)
            traceback.print_exc()
            for s in list(_servers):
                print("--- server stderr ---\n" + s.stderr()[-3000:])
        finally:
            for s in list(_servers):
                s.kill()

    def done(self):
        sys.exit(1 if self.failed else 0)
