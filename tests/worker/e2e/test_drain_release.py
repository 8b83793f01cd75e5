#!/usr/bin/env python3
"""A draining worker (SIGTERM) gives back every trial it holds, including
one that has reported nothing yet, and the trial is PENDING again within
about 2 s of the SIGTERM, not after the lease timeout
(docs/protocol.md#stop-drain-and-release). The server runs with a 30 s
lease timeout and a 10 s heartbeat interval, so a trial requeued by lease
expiry or by the unlisted-trial rule would come far later than 2 s.

1. running: the trainable sleeps before its first result; the worker is
   SIGTERMed while the trial's process runs with no result, no checkpoint
   and no iteration. Its `release` must reach the server.
2. lease in flight: the worker talks to the server through a proxy that
   holds back the reply of a lease that granted a trial. The server has
   leased the trial (RUNNING) but the worker has not seen it yet when it is
   SIGTERMed. The worker must wait for that reply (within its drain
   deadline) and give the trial back, not exit at once and leave it to the
   lease timeout (the bug seen as a 30 s wait in server_e2e_promo_workers).
3. starting: a worker SIGTERMed as soon as it has claimed its CPUs, before
   its event loop runs, still exits 0 (the signal waits, blocked, for the
   loop's handler); it used to die of the signal, 10 times in 10.
"""
import http.client
import http.server
import os
import signal
import threading
import time
import urllib.parse

from harness import command_config, main, wait_for

SLEEPER = r"""
import json, os, sys, time
print("sleeping in pid %d" % os.getpid(), flush=True)
time.sleep(float(sys.argv[1]))
print(json.dumps({"training_iteration": 1, "loss": 1.0}), flush=True)
"""


class HoldingProxy:
    """Forwards every request to the server; holds back the reply of a lease
    that granted a trial until release() (or 5 s)."""

    def __init__(self, upstream):
        u = urllib.parse.urlparse(upstream)
        self.host, self.port = u.hostname, u.port
        self.held = threading.Event()   # a granting lease reply is being held
        self.go = threading.Event()     # let it through
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def forward(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                hdrs = {k: v for k, v in self.headers.items()
                        if k.lower() not in ("host", "connection", "content-length")}
                c = http.client.HTTPConnection(proxy.host, proxy.port, timeout=20)
                try:
                    c.request(self.command, self.path, body=body, headers=hdrs)
                    r = c.getresponse()
                    data = r.read()
                    status, rh = r.status, r.getheaders()
                finally:
                    c.close()
                if self.path.endswith("/lease") and status == 200 and not proxy.held.is_set():
                    proxy.held.set()
                    proxy.go.wait(5)
                try:
                    self.send_response(status)
                    for k, v in rh:
                        if k.lower() not in ("connection", "content-length",
                                             "transfer-encoding", "date", "server"):
                            self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the worker hung up

            do_GET = do_POST = do_PUT = do_DELETE = forward

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.srv.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.go.set()
        self.srv.shutdown()
        self.srv.server_close()


def wait_pending(env, tid, t0, what):
    st = wait_for(lambda: (lambda x: x["status"] != "RUNNING" and x)(env.trial(tid)), 8,
                  "trial %d to leave RUNNING after the drain (%s)" % (tid, what), step=0.02)
    took = time.time() - t0
    print("%s: trial %d is %s %.2f s after the worker's SIGTERM" % (what, tid, st["status"], took))
    assert st["status"] == "PENDING", st
    # Typically 0.05-0.45 s. Without the release the trial would wait for
    # two missed heartbeats (20 s) or the lease timeout (30 s): a bound of
    # 6 s tells them apart with room for a slow sanitizer build.
    assert took < 6.0, "%s: trial %d was requeued %.2f s after SIGTERM" % (what, tid, took)


def check_exit(env, w, what):
    rc = w.p.wait(20)
    assert rc == 0, "%s: worker exited %d:\n%s" % (what, rc, w.log()[-3000:])
    log = w.log()
    assert "not_leased" not in log and "dropped" not in log, log[-3000:]
    assert "undelivered" not in log, log[-3000:]


def running(env, exp):
    return [x for x in env.trials(exp) if x["status"] == "RUNNING"]


def body(env):
    env.start_server("--lease-timeout", "30", "--heartbeat-interval", "10")
    script = os.path.join(env.tmp, "sleeper.py")
    with open(script, "w") as f:
        f.write(SLEEPER)

    # 1. A running trial that has reported nothing.
    w = env.start_worker("a", "--cpus", "1")
    exp = env.submit(command_config("drain", ["/usr/bin/python3", script, "60"]))
    tid = wait_for(lambda: running(env, exp), 20, "the trial to be leased")[0]["id"]
    wait_for(lambda: env.trial_processes(), 10, "the trial's process")
    time.sleep(0.3)
    assert not env.results(tid), env.results(tid)
    t0 = time.time()
    os.kill(w.pid, signal.SIGTERM)
    wait_pending(env, tid, t0, "running")
    check_exit(env, w, "running")
    assert not env.results(tid)
    assert "released by worker" in env.server_proc.log(), env.server_proc.log()[-3000:]
    wait_for(lambda: not env.trial_processes(), 5, "the trial's process to be gone")
    # Attempt 2 on another worker: the trial's history has both attempts and
    # the release between them, and its log keeps attempt 1's output, each
    # attempt's lines under a line naming it.
    w3 = env.start_worker("c", "--cpus", "1")
    log = wait_for(lambda: (lambda x: "--- attempt 2 " in x and x)(
        env.api("GET", "/api/v1/trials/%d/logs" % tid)["log"]), 30, "attempt 2's log")
    print("log of both attempts:", repr(log))
    a1 = log.index("--- attempt 1 (worker 1) ---\nsleeping in pid ")
    assert a1 == 0 and log.index("--- attempt 2 (worker 2) ---\nsleeping in pid ") > a1, log
    hist = [(a["kind"], a["data"]["attempt"]) for a in env.trial(tid)["attempts"]]
    assert hist == [("leased", 1), ("released", 1), ("leased", 2)], env.trial(tid)
    os.kill(w3.pid, signal.SIGTERM)
    check_exit(env, w3, "attempt 2")
    wait_for(lambda: not env.trial_processes(), 5, "attempt 2's process to be gone")

    # 2. A lease the server granted whose reply the worker has not read yet.
    # (a server of its own: nothing else is there to lease)
    env.start_server("--lease-timeout", "30", "--heartbeat-interval", "10",
                     db=os.path.join(env.tmp, "second.db"))
    proxy = HoldingProxy(env.url)
    try:
        direct, env.url = env.url, proxy.url
        w2 = env.start_worker("b", "--cpus", "1")
        env.url = direct
        exp2 = env.submit(command_config("drain2", ["/usr/bin/python3", script, "60"]))
        assert proxy.held.wait(20), "no lease was granted through the proxy"
        tid2 = wait_for(lambda: running(env, exp2), 5, "the trial to be leased")[0]["id"]
        t0 = time.time()
        os.kill(w2.pid, signal.SIGTERM)
        time.sleep(0.4)   # the worker has begun draining with the lease in flight
        proxy.go.set()
        wait_pending(env, tid2, t0, "lease in flight")
        check_exit(env, w2, "lease in flight")
        assert not env.trial_processes(), "a trial process ran after the drain"
    finally:
        proxy.close()

    # 3. A SIGTERM while the worker starts (on the second server).
    for i in range(3):
        w0 = env.start_worker("s%d" % i, "--cpus", "1")
        wait_for(lambda: "claimed CPU(s)" in w0.log(), 10, "the worker to claim its CPU", step=0.002)
        os.kill(w0.pid, signal.SIGTERM)
        check_exit(env, w0, "starting")


main("drain_release", body)
