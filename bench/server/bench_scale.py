#!/usr/bin/env python3
"""Scale check for ctune-server: one experiment of 10,000 trials x 10 results.

Measures the server's memory (VmRSS and peak VmHWM from /proc) and the
best-trial query time (median and max over repeated calls, measured by the
client on loopback, so HTTP included), then restarts the server on the same
database and measures the load time, memory and best query again.
Exits 1 when RSS >= 200 MB or the best query's median >= 50 ms.

usage: bench_scale.py BIN_DIR [--trials 10000] [--results 10]
"""
import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from bench_auth import bearer, read_tokens, register

# The admin token of the server under test ({} for an older build: none sent).
TOKENS = {}


def rss_mb(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                k, v = line.split(":")
                out[k] = int(v.split()[0]) / 1024.0
    return out


class Srv:
    def __init__(self, bin_dir, db, log):
        t0 = time.time()
        self.p = subprocess.Popen([os.path.join(bin_dir, "ctune-server"), "--db", db, "--port", "0"],
                                  stdout=subprocess.PIPE, stderr=log)
        line = self.p.stdout.readline().decode().strip()
        self.start_s = time.time() - t0
        self.port = int(line.rsplit(":", 1)[1])

    def conn(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)

    def stop(self):
        self.p.terminate()
        self.p.wait(timeout=60)


def call(c, method, path, body=None, headers=None):
    """headers with an Authorization replace the admin token."""
    h = bearer(TOKENS.get("admin"))
    if body is not None:
        h["Content-Type"] = "application/json"
    h.update(headers or {})
    c.request(method, path, json.dumps(body) if body is not None else None, h)
    r = c.getresponse()
    return r.status, r.read()


def time_best(srv, query, n=20):
    c = srv.conn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        st, b = call(c, "GET", "/api/v1/experiments/1/best" + query)
        times.append((time.perf_counter() - t0) * 1000)
        assert st == 200, b
    times.sort()
    return times[len(times) // 2], times[-1], json.loads(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir")
    ap.add_argument("--trials", type=int, default=10000)
    ap.add_argument("--results", type=int, default=10)
    ap.add_argument("--clients", type=int, default=4)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ctune-scale-")
    log = open(os.path.join(tmp, "server.log"), "w")
    db = os.path.join(tmp, "scale.db")
    srv = Srv(a.bin_dir, db, log)
    TOKENS.update(read_tokens(db))  # tokens by default; the same after the restart
    ok = True
    try:
        c = srv.conn()
        cfg = {"name": "scale", "metric": "loss", "mode": "min", "num_samples": a.trials, "seed": 3,
               "param_space": {"lr": {"type": "loguniform", "lower": 1e-4, "upper": 0.1},
                               "batch_size": {"type": "choice", "values": [16, 32, 64]}},
               "scheduler": {"type": "fifo"}, "trainable": {"type": "command", "argv": ["true"]}}
        t0 = time.time()
        st, b = call(c, "POST", "/api/v1/experiments", cfg)
        assert st == 201, b
        print("create %d trials: %.2f s" % (a.trials, time.time() - t0))
        wid, secret = register(lambda m, p, b, h: call(c, m, p, b, h), TOKENS, "scale",
                               {"cpu": a.trials})
        as_worker = bearer(secret)  # the worker's own secret (none: older build)
        t0 = time.time()
        for _ in range(a.trials):
            st, r = call(c, "POST", "/api/v1/workers/%d/lease" % wid, {}, as_worker)
            assert st == 200, r
        print("lease %d trials: %.2f s" % (a.trials, time.time() - t0))

        def poster(k):
            cc = srv.conn()
            for t in range(1, a.results + 1):
                for tid in range(1 + k, a.trials + 1, a.clients):
                    body = {"training_iteration": t, "loss": 1.0 / t + (tid % 97) * 1e-3,
                            "accuracy": 0.5 + t * 0.01, "time_total_s": t * 1.5}
                    # every trial was leased once, by this worker: attempt 1
                    st, r = call(cc, "POST", "/api/v1/trials/%d/results" % tid, body,
                                 dict(as_worker, **{"X-Ctune-Lease": "%d:1" % wid}))
                    assert st == 200, r

        t0 = time.time()
        th = [threading.Thread(target=poster, args=(k,)) for k in range(a.clients)]
        for x in th:
            x.start()
        for x in th:
            x.join()
        dt = time.time() - t0
        n = a.trials * a.results
        print("post %d results: %.2f s (%.0f/s from %d Python clients)" % (n, dt, n / dt, a.clients))
        for phase in ("running", "after restart"):
            mem = rss_mb(srv.p.pid)
            last = time_best(srv, "")
            alls = time_best(srv, "?scope=all")
            avg5 = time_best(srv, "?scope=last-5-avg")
            other = time_best(srv, "?metric=accuracy&mode=max", n=5)
            cl = srv.conn()
            t0 = time.perf_counter()
            # Lists come in pages (1,000 trials by default); 10,000 is the
            # most one page holds, so the figure is for the whole list up to
            # that many trials.
            st, body = call(cl, "GET", "/api/v1/experiments/1/trials?limit=10000")
            list_ms = (time.perf_counter() - t0) * 1000
            last_seq = json.loads(body)["last_seq"]
            t0 = time.perf_counter()
            st, body = call(cl, "GET", "/api/v1/experiments/1/trials?since=%d" % last_seq)
            since_ms = (time.perf_counter() - t0) * 1000
            t0 = time.perf_counter()
            st, body = call(cl, "GET", "/api/v1/experiments/1")
            exp_ms = (time.perf_counter() - t0) * 1000
            print("[%s] server RSS %.1f MB (peak %.1f MB)" % (phase, mem["VmRSS"], mem["VmHWM"]))
            print("[%s] GET trials (all %d): %.1f ms; trials?since=last_seq: %.2f ms; "
                  "GET experiment: %.2f ms" % (phase, a.trials, list_ms, since_ms, exp_ms))
            print("[%s] best scope=last: median %.2f ms, max %.2f ms -> trial %d"
                  % (phase, last[0], last[1], last[2]["trial_id"]))
            print("[%s] best scope=all: median %.2f ms; last-5-avg: median %.2f ms"
                  % (phase, alls[0], avg5[0]))
            print("[%s] best by another metric (accuracy, mode max): median %.2f ms"
                  % (phase, other[0]))
            if mem["VmHWM"] >= 200 or last[0] >= 50 or alls[0] >= 50:
                ok = False
            if phase == "running":
                srv.stop()
                srv = Srv(a.bin_dir, db, log)
                print("restart: listening after %.2f s (loads %d results, rebuilds the scheduler)"
                      % (srv.start_s, n))
        print("check: RSS < 200 MB and best < 50 ms: %s" % ("yes" if ok else "NO"))
        return 0 if ok else 1
    finally:
        if srv.p.poll() is None:
            srv.p.kill()
            srv.p.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
