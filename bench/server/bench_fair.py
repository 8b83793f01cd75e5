#!/usr/bin/env python3
"""Lease latency with many experiments (fair share).

A lease looks only at the live (RUNNING) experiments (server/state/state_live.c):
it should cost the same with 1,000 ended experiments as with none, and stay
small with 1,000 live ones. Three scenarios on a fresh server each
(--no-auth, --durability normal, loopback, one keep-alive connection):

  live    LIVE experiments RUNNING (default 1,000)
  ended   ENDED experiments TERMINATED (each ran its one trial) + 10 live,
          then a restart (the ended ones are loaded, as on a long-lived server)
          (each live experiment plans 1,000 trials: a random searcher's first
          suggestion costs time in proportion to num_samples)
  small   10 live, nothing else (the baseline)

One worker with 1,024 cpus first takes FILL leases (spread over the
experiments by the fair order), then LEASES times: complete its oldest
trial, then lease again (timed). Prints p50/p99/max of the timed lease
calls (client side, HTTP included) and the server's CPU time per
complete + lease pair (cpu_us, from /proc: the lease's own cost shows as
the difference between builds). With a second BIN_DIR, the same for
that build (say, the code before the live list) side by side.

usage: bench_fair.py BIN_DIR [BIN_DIR_BEFORE] [--live 1000] [--ended 1000]
                     [--leases 2000] [--fill 200] [--only live,ended,small]
"""
import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


class Srv:
    def __init__(self, bin_dir, tmp):
        self.log = open(os.path.join(tmp, "server.log"), "a")
        self.p = subprocess.Popen(
            [os.path.join(bin_dir, "ctune-server"), "--db", os.path.join(tmp, "c.db"),
             "--port", "0", "--no-auth", "--durability", "normal", "--lease-timeout", "600"],
            stdout=subprocess.PIPE, stderr=self.log)
        line = self.p.stdout.readline().decode().strip()
        self.port = int(line.rsplit(":", 1)[1])
        self.c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)

    def call(self, method, path, body=None, lease=None):
        h = {"Content-Type": "application/json"} if body is not None else {}
        if lease:
            h["X-Ctune-Lease"] = lease
        self.c.request(method, path, json.dumps(body) if body is not None else None, h)
        r = self.c.getresponse()
        data = r.read()
        if r.status >= 400:
            raise RuntimeError("%s %s -> %d %s" % (method, path, r.status, data[:300]))
        return json.loads(data) if data else None

    def cpu_s(self):
        """The server's user + system CPU time so far (/proc), in seconds."""
        with open("/proc/%d/stat" % self.p.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.p.terminate()
        self.p.wait(timeout=60)
        self.log.close()


def cfg(name, n):
    return {"name": name, "metric": "loss", "mode": "min", "num_samples": n, "seed": 1,
            "param_space": {"lr": {"type": "uniform", "lower": 0, "upper": 1}},
            "trainable": {"type": "command", "argv": ["true"]}}


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))]


def scenario(bin_dir, live, ended, leases, fill):
    tmp = tempfile.mkdtemp(prefix="bench-fair-")
    s = Srv(bin_dir, tmp)
    try:
        wid = s.call("POST", "/api/v1/workers",
                     {"name": "w", "resources": {"cpu": 1024, "gpu": 0, "memory_mb": 0}})["id"]
        lease_path = "/api/v1/workers/%d/lease" % wid
        t0 = time.time()
        # The ended ones first (older ids: the old code scanned them first).
        for i in range(ended):
            s.call("POST", "/api/v1/experiments", cfg("done%d" % i, 1))
            t = s.call("POST", lease_path, {})["trial"]
            s.call("POST", "/api/v1/trials/%d/complete" % t["id"], {},
                   lease="%d:%d" % (wid, t["attempt"]))
        for i in range(live):
            s.call("POST", "/api/v1/experiments", cfg("live%d" % i, 1000))
        if ended:
            # The ended experiments as a restart finds them: loaded from SQLite.
            s.stop()
            s = Srv(bin_dir, tmp)
        setup_s = time.time() - t0
        running = []
        for _ in range(fill):
            running.append(s.call("POST", lease_path, {})["trial"])
        times = []
        c0 = s.cpu_s()
        for _ in range(leases):
            t = running.pop(0)
            s.call("POST", "/api/v1/trials/%d/complete" % t["id"], {},
                   lease="%d:%d" % (wid, t["attempt"]))
            a = time.perf_counter()
            got = s.call("POST", lease_path, {})
            times.append((time.perf_counter() - a) * 1e3)
            running.append(got["trial"])
        cpu_us = (s.cpu_s() - c0) / leases * 1e6
        return {"setup_s": setup_s, "p50": pct(times, 50), "p99": pct(times, 99),
                "max": max(times), "cpu_us": cpu_us}
    finally:
        s.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir")
    ap.add_argument("bin_dir_before", nargs="?")
    ap.add_argument("--live", type=int, default=1000)
    ap.add_argument("--ended", type=int, default=1000)
    ap.add_argument("--leases", type=int, default=2000)
    ap.add_argument("--fill", type=int, default=200)
    ap.add_argument("--only", default="live,ended,small", help="scenarios to run, comma-separated")
    a = ap.parse_args()
    cases = [c for c in [("live", a.live, 0), ("ended", 10, a.ended), ("small", 10, 0)]
             if c[0] in a.only.split(",")]
    builds = [("this", a.bin_dir)] + ([("before", a.bin_dir_before)] if a.bin_dir_before else [])
    print("lease latency, ms (client side over loopback HTTP; %d timed leases, %d running)"
          % (a.leases, a.fill))
    print("%-7s %-30s %8s %8s %8s %9s %8s" % ("build", "scenario", "p50", "p99", "max",
                                               "cpu_us", "setup_s"))
    for bname, bdir in builds:
        for name, live, ended in cases:
            r = scenario(bdir, live, ended, a.leases, a.fill)
            desc = "%s: %d live + %d ended" % (name, live, ended)
            print("%-7s %-30s %8.3f %8.3f %8.3f %9.1f %8.1f"
                  % (bname, desc, r["p50"], r["p99"], r["max"], r["cpu_us"], r["setup_s"]),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
