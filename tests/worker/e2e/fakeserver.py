"""A scriptable stand-in for ctune-server's worker endpoints (protocol v2),
over real HTTP, for tests that need precise fault timing: which reply is
late, refused or never comes. It records every request, checks that each
trial-scoped write carries the X-Ctune-Lease fence, and hands out the
leases a test queues."""
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TRIAL_WRITE = re.compile(r"^/api/v1/trials/(\d+)/(results|complete|fail|release|checkpoint|logs)$")


class Request:
    def __init__(self, method, path, headers, raw):
        self.method = method
        self.path = path
        self.headers = headers
        self.raw = raw
        self.t = time.time()
        self.lease = headers.get("X-Ctune-Lease")
        m = TRIAL_WRITE.match(path)
        self.trial = int(m.group(1)) if m else None
        self.what = m.group(2) if m else None
        self.body = None
        if raw and headers.get("Content-Type", "").startswith("application/json"):
            self.body = json.loads(raw.decode("utf-8"))  # raises on invalid UTF-8

    def attempt(self):
        return int(self.lease.split(":")[1]) if self.lease else None

    def results(self):
        """The result objects of a results POST (one, or a batch)."""
        return self.body if isinstance(self.body, list) else [self.body]


class FakeServer:
    def __init__(self, lease_timeout_s=30, heartbeat_interval_s=1):
        self.lock = threading.Condition()
        self.requests = []
        self.leases = []          # trial objects to hand out, in order
        self.hb_stop = []         # entries for the next heartbeat replies
        self.lease_timeout_s = lease_timeout_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.hook = None          # f(req) -> None | (status, body_dict[, headers]) | "hang"
        self.errors = []
        self.worker_id = 0
        self.stored = {}          # trial id -> [training_iteration] accepted
        self.checkpoints = {}     # trial id -> bytes
        fake = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def handle(self):
                try:
                    super().handle()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the worker gave up on a held reply (it exited)

            def _handle(self):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    req = Request(self.command, self.path, dict(self.headers), raw)
                except Exception as e:  # invalid JSON or UTF-8: the worker's fault
                    fake.errors.append("%s %s: unreadable body (%s): %r" %
                                       (self.command, self.path, e, raw[:200]))
                    return self._reply(400, {"error": {"code": "invalid_body",
                                                       "message": str(e)}})
                with fake.lock:
                    fake.requests.append(req)
                    fake.lock.notify_all()
                if req.trial and self.command in ("POST", "PUT") and not (
                        req.lease and re.match(r"^\d+:\d+$", req.lease)):
                    fake.errors.append("%s %s without a fence" % (self.command, self.path))
                    return self._reply(400, {"error": {"code": "missing_lease"}})
                out = fake.hook(req) if fake.hook else None
                if out is None:
                    out = fake.default(req)
                status, body = out[:2]
                headers = out[2] if len(out) > 2 else {}
                if isinstance(body, (bytes, bytearray)):
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self._reply(status, body, headers)

            def _reply(self, status, body, headers=None):
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                if data:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        # close() waits for serve_forever to look at its stop flag, which it
        # does every poll_interval (0.5 s by default).
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- default answers ---------------------------------------------------
    def default(self, req):
        p = req.path
        if p == "/api/v1/workers" and req.method == "POST":
            with self.lock:
                self.worker_id += 1
                # like ctune-server: a secret of the worker's own (not checked here)
                return 201, {"id": self.worker_id,
                             "secret": "%d.%s" % (self.worker_id, "ab" * 32),
                             "heartbeat_interval_s": self.heartbeat_interval_s,
                             "lease_timeout_s": self.lease_timeout_s}
        if p.endswith("/heartbeat"):
            with self.lock:
                stop = list(self.hb_stop)
            return 200, {"stop": stop, "lease_timeout_s": self.lease_timeout_s,
                         "heartbeat_interval_s": self.heartbeat_interval_s}
        if p.endswith("/lease"):
            with self.lock:
                if self.leases:
                    return 200, {"trial": self.leases.pop(0)}
            return 204, None
        if req.what == "results":
            with self.lock:
                its = self.stored.setdefault(req.trial, [])
                for r in req.results():
                    if r["training_iteration"] not in its:
                        its.append(r["training_iteration"])
            if isinstance(req.body, list):
                return 200, {"decisions": ["continue"] * len(req.body), "decision": "continue"}
            return 200, {"decision": "continue"}
        if req.what == "checkpoint" and req.method == "PUT":
            self.checkpoints[req.trial] = req.raw
            return 200, {}
        if req.what == "checkpoint" and req.method == "GET":
            data = self.checkpoints.get(req.trial)
            if data is None:
                return 404, {"error": {"code": "not_found"}}
            return 200, data
        if req.what in ("complete", "fail", "release", "logs"):
            return 200, {}
        return 404, {"error": {"code": "not_found", "message": p}}

    # -- queries -------------------------------------------------------------
    def find(self, pred):
        with self.lock:
            return [r for r in self.requests if pred(r)]

    def wait(self, pred, timeout, what):
        deadline = time.time() + timeout
        with self.lock:
            while True:
                got = [r for r in self.requests if pred(r)]
                if got:
                    return got
                left = deadline - time.time()
                if left <= 0:
                    raise AssertionError("fake server: timed out after %.0f s waiting for %s"
                                         % (timeout, what))
                self.lock.wait(min(left, 0.2))


def lease(trial_id, attempt, argv, max_t=30, has_checkpoint=False):
    return {"id": trial_id, "experiment_id": 1, "name": "t%d" % trial_id, "config": {"x": 0.5},
            "trainable": {"type": "command", "argv": argv},
            "resources": {"cpu": 1, "gpu": 0, "memory_mb": 0}, "metric": "loss", "mode": "min",
            "time_attr": "training_iteration", "max_t": max_t, "start_iteration": 0,
            "has_checkpoint": has_checkpoint, "attempt": attempt}
