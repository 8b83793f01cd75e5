#!/usr/bin/env python3
"""Load benchmark for ctune-server: many trials report results at once.

Starts the real daemon on a free port with a fresh database, creates one
experiment of N trials (FIFO, so every trial keeps reporting), leases them all,
then runs wrk (bench/server/results.lua) posting results for all trials over
C connections for D seconds. Prints wrk's numbers and checks them against the
server: every acknowledged result must be in the database (each reply is sent
only after its commit).

usage: bench_results.py BIN_DIR [--trials 2000] [--connections 16]
                        [--threads 2] [--duration 10] [--server-threads 2]
                        [--repeat 1] [--durability full|normal] [--compare]
                        [--baseline OLD_BIN_DIR] [--fsync-probe N]
                        [--floor mhd,mhd-durable,mhd-tpc-durable,epoll,epoll-durable]

--compare measures --durability full (fsync per commit) and normal side by
side: two servers, their wrk runs alternating, one table at the end;
--baseline BIN_DIR adds an older build to the same alternation (without
--compare: that build and this one, both with --durability, alternating).
--fsync-probe N times N fdatasyncs of a 4 KiB write in the databases'
directory before each round and prints p50/p99/max beside it: this host's
virtual disk has slow phases that move every durable figure. Each run also
prints the server's own WAL flushes in it (count and mean time, from
/metrics) and its CPU per result.

Credentials (bench_auth.py): the admin token from <db>.tokens for the
experiment and /metrics, the worker token to register, and the per-worker
secret of the registration reply for leases and results (wrk sends it with
X-Ctune-Lease). An older build makes no token file: nothing is sent.

--floor MODE[,MODE...] adds bench/server/http_floor.c's servers to the same
alternation (built here with cc): HTTP servers that answer a result without
SQLite, routing or authentication (mhd: libmicrohttpd set up as ctune-server
sets it up, answering at once; mhd-durable: each batch of bodies appended and
fdatasynced before its replies, suspended and resumed as ctune-server does;
mhd-tpc-durable: a thread per connection waiting instead; epoll and
epoll-durable: the same without libmicrohttpd). They show what this machine, wrk and the HTTP layer leave for
everything else.

With --repeat N the wrk run is repeated N times on the same server (each run
continues the time values) and the median run is reported as well, because
on a shared machine single runs vary a lot.
"""
import argparse
import http.client
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

from bench_auth import bearer, read_tokens, register

HERE = os.path.dirname(os.path.abspath(__file__))


class Bench:
    """One ctune-server on a fresh database, its trials created and leased."""

    def __init__(self, a, durability, bin_dir=None, label=None):
        self.a = a
        self.durability = durability
        self.label = label or durability or "default"
        self.tmp = tempfile.mkdtemp(prefix="ctune-bench-", dir=a.tmpdir)
        self.db = os.path.join(self.tmp, "bench.db")
        self.runs = []
        # The benchmark plays a worker that never heartbeats: a long lease
        # timeout keeps its trials leased across long or repeated runs (with
        # the default 30 s they would go back to PENDING and every later
        # result would be answered "stop" without being stored).
        args = [os.path.join(bin_dir or a.bin_dir, "ctune-server"), "--db", self.db, "--port", "0",
                "--threads", str(a.server_threads), "--lease-timeout", "86400"]
        if a.wal_frames:
            args += ["--wal-checkpoint-frames", str(a.wal_frames)]
        if durability:
            args += ["--durability", durability]
        self.srv = subprocess.Popen(args, stdout=subprocess.PIPE,
                                    stderr=open(os.path.join(self.tmp, "server.log"), "w"))
        line = self.srv.stdout.readline().decode().strip()
        self.port = int(line.rsplit(":", 1)[1])
        # tokens by default: the admin token for experiments and metrics, the
        # worker token to register, the worker's own secret for its results
        self.tokens = read_tokens(self.db)
        self.c = http.client.HTTPConnection("127.0.0.1", self.port)
        cfg = {"name": "bench", "metric": "loss", "mode": "min", "num_samples": a.trials,
               "seed": 1, "param_space": {"lr": {"type": "loguniform", "lower": 1e-4, "upper": 0.1}},
               "scheduler": {"type": "fifo"},
               "trainable": {"type": "command", "argv": ["true"]}}
        st, _ = self.call("POST", "/api/v1/experiments", cfg)
        assert st == 201
        self.wid, self.secret = register(self.call, self.tokens, "bench", {"cpu": a.trials})
        attempts = set()
        for _ in range(a.trials):
            st, b = self.call("POST", "/api/v1/workers/%d/lease" % self.wid, {},
                              bearer(self.secret))
            assert st == 200, (st, b)
            attempts.add(json.loads(b)["trial"].get("attempt", 1))
        assert attempts == {1}, attempts  # one fence for all: W:1
        self.lease = "%d:1" % self.wid

    def call(self, method, path, body, headers=None):
        """headers replace the admin token (another credential)."""
        h = {"Content-Type": "application/json"}
        h.update(headers if headers is not None else bearer(self.tokens.get("admin")))
        self.c.request(method, path, json.dumps(body), h)
        r = self.c.getresponse()
        return r.status, r.read()

    def wrk(self, k):
        a = self.a
        # each run starts past the time values the previous runs used
        env = dict(os.environ, CTUNE_FIRST_TRIAL="1", CTUNE_NUM_TRIALS=str(a.trials),
                   CTUNE_WRK_THREADS=str(a.threads), CTUNE_T_OFFSET=str(k * 10 ** 7),
                   CTUNE_LEASE=self.lease)
        env.pop("CTUNE_TOKEN", None)
        cpu0 = self.cpu_s()
        fl0 = self.flush_stats()
        if self.secret:
            env["CTUNE_TOKEN"] = self.secret  # results.lua: Authorization: Bearer
        out = subprocess.run(["wrk", "-t%d" % a.threads, "-c%d" % a.connections,
                              "-d%ds" % a.duration, "--latency", "-s",
                              os.path.join(HERE, "results.lua"), "http://127.0.0.1:%d" % self.port],
                             env=env, capture_output=True, text=True, check=True).stdout
        if a.repeat == 1 and not a.compare:
            print(out)
        m = re.search(r"ctune: requests=(\d+) bad=(\d+) p50_ms=([\d.]+) p90_ms=([\d.]+) "
                      r"p99_ms=([\d.]+) max_ms=([\d.]+)", out)
        rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
        # server CPU per request: a figure the other processes' load moves less
        cpu_us = (self.cpu_s() - cpu0) / max(int(m.group(1)), 1) * 1e6
        # the server's own WAL flushes in this run, beside the probe's
        fl1 = self.flush_stats()
        flushes = fl1[0] - fl0[0]
        flush_ms = (fl1[1] - fl0[1]) / flushes * 1e3 if flushes else 0.0
        load = open("/proc/loadavg").read().split()[0]
        self.runs.append((rps, int(m.group(1)), int(m.group(2))) + tuple(m.group(3, 4, 5, 6)) +
                         (load, cpu_us))
        print("%-7s run %d: %.0f results/s, p50 %s ms, p90 %s ms, p99 %s ms, max %s ms, "
              "server CPU %.0f us/result, %d WAL flushes of %.2f ms mean (load avg %s)"
              % (self.label, k + 1, rps, m.group(3), m.group(4), m.group(5),
                 m.group(6), cpu_us, flushes, flush_ms, load), flush=True)

    def flush_stats(self):
        """The server's WAL flushes so far and their seconds (durable commits), from
        /metrics; (0, 0) from a build without them."""
        c = http.client.HTTPConnection("127.0.0.1", self.port)
        try:
            c.request("GET", "/metrics", headers=bearer(self.tokens.get("admin")))
            m = c.getresponse().read().decode()
        finally:
            c.close()
        n = re.search(r"ctune_commit_flushes_total (\d+)", m)
        t = re.search(r"ctune_commit_flush_seconds_total ([\d.eE+-]+)", m)
        return (int(n.group(1)), float(t.group(1))) if n and t else (0, 0.0)

    def cpu_s(self):
        """The server's user + system CPU seconds so far."""
        f = open("/proc/%d/stat" % self.srv.pid).read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

    def finish(self):
        """Stops the server and checks every acknowledged result is stored."""
        a = self.a
        runs = self.runs
        requests = sum(r[1] for r in runs)
        bad = sum(r[2] for r in runs)
        self.med = med = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
        # each column's own median as well: one stalled flush moves one run's p99
        self.med_p99 = sorted(float(r[5]) for r in runs)[len(runs) // 2]
        self.med_cpu = sorted(r[8] for r in runs)[len(runs) // 2]
        # A fresh connection: the setup one sat idle through the other
        # servers' runs, past the server's idle timeout (30 s).
        self.c.close()
        self.c = http.client.HTTPConnection("127.0.0.1", self.port)
        self.c.request("GET", "/metrics", headers=bearer(self.tokens.get("admin")))
        metrics = self.c.getresponse().read().decode()
        received = int(re.search(r"ctune_results_received_total (\d+)", metrics).group(1))
        batches = int(re.search(r"ctune_commit_batches_total (\d+)", metrics).group(1))
        self.c.close()
        self.srv.terminate()
        self.srv.wait(timeout=30)
        stored = sqlite3.connect(self.db).execute("SELECT COUNT(*) FROM results").fetchone()[0]
        name = self.label
        print("[%s] acknowledged results/s: %.0f (median run; wrk: %d requests in %d x %ds, %d "
              "not acknowledged)" % (name, med[0], requests, a.repeat, a.duration, bad))
        print("[%s] latency ms (median run): p50 %s  p90 %s  p99 %s  max %s" % ((name,) + med[3:7]))
        print("[%s] server: %d results received, %d stored in SQLite, %d commits (%.1f results "
              "per commit)" % (name, received, stored, batches, received / max(batches, 1)))
        # wrk may cut requests in flight at the end: those are stored but not
        # counted by wrk, so stored >= acknowledged is the durability check.
        ok = bad == 0 and stored == received and stored >= requests - bad
        print("[%s] check: every acknowledged result is stored: %s" % (name, "yes" if ok else "NO"))
        return ok

    def close(self):
        if self.srv.poll() is None:
            self.srv.kill()
            self.srv.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


class FloorBench(Bench):
    """One http_floor server (bench/server/http_floor.c) in the same alternation."""

    def __init__(self, a, mode, exe):
        self.a = a
        self.label = mode
        self.tmp = tempfile.mkdtemp(prefix="ctune-floor-", dir=a.tmpdir)
        self.runs = []
        self.srv = subprocess.Popen([exe, mode, self.tmp], stdout=subprocess.PIPE)
        line = self.srv.stdout.readline().decode().strip()
        self.port = int(line.rsplit(":", 1)[1])
        self.lease, self.secret = "1:1", None

    def flush_stats(self):
        return (0, 0.0)

    def finish(self):
        runs = self.runs
        self.med = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
        self.med_p99 = sorted(float(r[5]) for r in runs)[len(runs) // 2]
        self.med_cpu = sorted(r[8] for r in runs)[len(runs) // 2]
        self.srv.terminate()
        tail = self.srv.communicate(timeout=30)[0].decode().strip()
        print("[%s] results/s: %.0f (median run); latency ms p50 %s  p90 %s  p99 %s  max %s; %s"
              % ((self.label, self.med[0]) + self.med[3:7] + (tail,)))
        return sum(r[2] for r in runs) == 0


def build_floor(tmpdir):
    """Compiles http_floor.c into tmpdir: its path."""
    exe = os.path.join(tmpdir, "http_floor")
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-o", exe,
                    os.path.join(HERE, "http_floor.c"), "-lmicrohttpd", "-lpthread"], check=True)
    return exe


def fsync_probe(directory, n):
    """n x (4 KiB pwrite + fdatasync) in directory: p50, p99, max in ms."""
    path = os.path.join(directory, "fsync-probe")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        block = b"x" * 4096
        times = []
        for i in range(n):
            os.pwrite(fd, block, (i % 16) * 4096)
            t0 = time.perf_counter()
            os.fdatasync(fd)
            times.append((time.perf_counter() - t0) * 1e3)
    finally:
        os.close(fd)
        os.unlink(path)
    times.sort()
    return times[len(times) // 2], times[min(len(times) - 1, len(times) * 99 // 100)], times[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir")
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2, help="wrk threads")
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--server-threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--wal-frames", type=int, default=None,
                    help="passed to ctune-server --wal-checkpoint-frames")
    ap.add_argument("--durability", choices=("full", "normal"), default=None,
                    help="passed to ctune-server --durability (default: the server's, full)")
    ap.add_argument("--compare", action="store_true",
                    help="durability full and normal side by side: two servers, their wrk "
                         "runs alternating (full, normal, full, ...) so both see the same load")
    ap.add_argument("--baseline", metavar="BIN_DIR",
                    help="an older ctune-server, labelled 'before', in the same alternation "
                         "(with --compare run without --durability; otherwise with it)")
    ap.add_argument("--fsync-probe", type=int, default=0, metavar="N",
                    help="before each round: N fdatasyncs of a 4 KiB write beside the "
                         "databases, p50/p99/max printed")
    ap.add_argument("--floor", default="", metavar="MODES",
                    help="comma list of http_floor.c modes (mhd, mhd-durable, mhd-tpc-durable, epoll, "
                         "epoll-durable) to run in the same alternation")
    ap.add_argument("--tmpdir", default=None,
                    help="where the databases go (default: the system's temporary directory)")
    a = ap.parse_args()
    if not shutil.which("wrk"):
        print("wrk is not installed", file=sys.stderr)
        return 77
    modes = ["full", "normal"] if a.compare else [a.durability]
    benches = []
    floor_dir = tempfile.mkdtemp(prefix="ctune-floor-build-", dir=a.tmpdir)
    try:
        if a.baseline:
            benches.append(Bench(a, None if a.compare else a.durability, bin_dir=a.baseline,
                                 label="before"))
        for mode in modes:
            benches.append(Bench(a, mode, label=None if a.compare or not a.baseline else "new"))
        floors = [m for m in a.floor.split(",") if m]
        if floors:
            exe = build_floor(floor_dir)
            benches += [FloorBench(a, m, exe) for m in floors]
        probes = []
        for k in range(a.repeat):
            if a.fsync_probe:
                probes.append(fsync_probe(benches[0].tmp, a.fsync_probe))
                print("round %d: fsync probe (%d x 4 KiB fdatasync) p50 %.2f ms, p99 %.2f ms, "
                      "max %.2f ms" % ((k + 1, a.fsync_probe) + probes[-1]), flush=True)
            # alternate which server goes first, so neither always follows the other
            order = benches if k % 2 == 0 else benches[::-1]
            for b in order:
                b.wrk(k)
        ok = all([b.finish() for b in benches])
        if a.compare or a.baseline or floors:
            print("side by side (median of %d x %d s runs, alternating):" % (a.repeat, a.duration))
            print("  %-13s %10s %8s %8s %14s %18s" % ("mode", "results/s", "p50 ms", "p99 ms",
                                                      "median p99 ms", "CPU us/result"))
            for b in benches:
                print("  %-13s %10.0f %8s %8s %14.3f %18.0f" % (
                    b.label, b.med[0], b.med[3], b.med[5], b.med_p99, b.med_cpu))
            print("  (results/s, p50 and p99 of the median run by results/s; median p99 and "
                  "CPU: each column's median)")
            if probes:
                print("  fsync probe, per round (p50/p99/max ms): " +
                      ", ".join("%.2f/%.2f/%.1f" % p for p in probes))
        return 0 if ok else 1
    finally:
        for b in benches:
            b.close()
        shutil.rmtree(floor_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
