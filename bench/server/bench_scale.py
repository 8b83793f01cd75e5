#!/usr/bin/env python3
"""Scale benchmark for ctune-server (one server for a team), side by side with an
older build.

--mode team (default): one server holding 1,000 experiments (all RUNNING),
1,000,000 trials and 10,000,000 results, made by the bulk path
(bench/server/bulk_load.py: the server creates and migrates the database,
then rows go straight into SQLite). For each build, on its own copy of the
same database:

  first start   process start -> "listening on" line -> first successful
                GET /api/v1/experiments?limit=1 (a new build may compute the
                trials' summaries here, once); RSS after it
  restart       SIGTERM, then the same timings again (the target: < 10 s)
  RSS           VmRSS / VmHWM (/proc) after the restart, and at the end
                (peak over the restarted server's whole run: < 1 GiB)
  best          GET /api/v1/experiments/{id}/best over every experiment in
                turn (--best-calls calls), p50 / p99 (target p99 < 5 ms)
  dashboard     headless Chromium started as tests/web/harness.py does: the
                experiment list loaded (window.__ctune.page 'experiments',
                readyAt set, rows in #experiments-table; target < 1 s) and the
                100,000-trial experiment's page (page 'experiment', readyAt,
                rows in #trials-table, as tests/web/test_dashboard_scale.py;
                target < 2 s); readyAt = ms after navigation, median of
                --browser-loads fresh loads. Since the page reads its trials
                page by page, readyAt is when its header,
                counts, cards and the first table page (the list's first
                1,000 trials) are drawn; the time until every trial is in
                (window.__ctune.allTrialsAt) is reported beside it
                ("heavy_all_ms"), not a target. --web-dir serves another
                dashboard (e.g. an older web/) to compare.
  lease         one worker (4,096 cpus) leases one trial of every experiment
                (the first lease of each: reported apart, it makes that
                experiment's searcher), then --leases times: complete the
                oldest running trial (protocol v2 fence), lease again (timed,
                client side over loopback HTTP); p50 / p99 with all
                experiments live (target p99 < 2 ms)

Servers run with --no-auth --lease-timeout 600 --durability normal (the
setting of bench_fair.py; --durability full adds an fsync to every lease).
Prints progress lines with elapsed times, then one table (this build vs
--baseline), writes --json FILE, and exits 1 when a target (TARGETS below)
fails for the first build.

--mode single: today's check, one experiment of 10,000 trials x 10 results
made through the API (RSS, best, trial list, restart), for each build: "at
10,000 trials no worse than today's".

usage:
  bench_scale.py BIN_DIR [--baseline OLD_BIN_DIR] [--scale F]
                 [--baseline-scale F] [--mode team|single] [--json FILE]
                 [--db PRISTINE.db] [--leases 2000] [--best-calls 2000]
                 [--browser-loads 3] [--no-browser] [--web-dir DIR] [--with-summaries]
                 [--workdir DIR] [--keep]

examples:
  # a dry run (about 15 s)
  /usr/bin/python3 bench/server/bench_scale.py build/bin --scale 0.01
  # full scale against the code before bounded memory (f6c92c5);
  # about 2 min for the bulk load + copy, then ~70 s + its starts per build
  mkdir -p /tmp/ctune-base && git archive f6c92c5 | tar -x -C /tmp/ctune-base
  cmake -S /tmp/ctune-base -B /tmp/ctune-base/build -DCMAKE_BUILD_TYPE=Release \\
        -DCTUNE_CUDA=OFF && cmake --build /tmp/ctune-base/build -j2 --target ctune-server
  /usr/bin/python3 bench/server/bench_scale.py build-rel/bin \\
        --baseline /tmp/ctune-base/build/bin --json scale.json --workdir /tmp/scale --keep
  # again, reusing the bulk-loaded database of that run (made by the baseline)
  /usr/bin/python3 bench/server/bench_scale.py build-rel/bin \\
        --baseline /tmp/ctune-base/build/bin --db /tmp/scale/pristine-1.db
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_auth import bearer, read_tokens, register  # noqa: E402
import bulk_load  # noqa: E402

T0 = time.time()
GIB = 1024.0  # MB

# The targets a team server must meet, checked for the first build (team mode)
TARGETS = [  # (key, label, limit, unit)
    ("rss_peak_mb", "RSS, restarted server's peak", 1024.0, "MB"),
    ("restart_ready_s", "restart to first GET", 10.0, "s"),
    ("lease_p99_ms", "lease p99, all live", 2.0, "ms"),
    ("best_p99_ms", "best p99", 5.0, "ms"),
    ("list_ms", "dashboard experiment list", 1000.0, "ms"),
    ("heavy_page_ms", "dashboard heaviest experiment", 2000.0, "ms"),
]


def say(msg):
    print("[%7.1f s] %s" % (time.time() - T0, msg), flush=True)


def mem_mb(pid):
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(("VmRSS", "VmHWM")):
                    k, v = line.split(":")
                    out[k] = int(v.split()[0]) / 1024.0
    except OSError:
        pass
    return out


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))] if xs else float("nan")


# ---------------------------------------------------------------- team mode

WEB_DIR = None  # --web-dir: the dashboard files the servers serve (None: their own)


class Server:
    """A ctune-server on a free port (--no-auth); times its start."""

    def __init__(self, bin_dir, db, log_path, durability, what):
        self.log = open(log_path, "a")
        cmd = [os.path.join(bin_dir, "ctune-server"), "--db", db, "--port", "0", "--no-auth",
               "--lease-timeout", "600", "--durability", durability]
        if WEB_DIR:
            cmd += ["--web-dir", WEB_DIR]
        t0 = time.perf_counter()
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log)
        done = threading.Event()

        def watch():  # a long start says how far it is
            while not done.wait(15):
                m = mem_mb(self.p.pid)
                say("  %s: still starting after %.0f s (RSS %.0f MB)"
                    % (what, time.perf_counter() - t0, m.get("VmRSS", 0)))
        threading.Thread(target=watch, daemon=True).start()
        try:
            while True:
                line = self.p.stdout.readline().decode()
                if not line:
                    raise RuntimeError("%s: server exited (%s) before listening; log %s"
                                       % (what, self.p.wait(), log_path))
                if "listening on http://" in line:
                    break
            self.listen_s = time.perf_counter() - t0
            self.port = int(line.strip().rsplit(":", 1)[1].split("/")[0])
            while True:
                try:
                    st, _ = self.call("GET", "/api/v1/experiments?limit=1")
                    if st == 200:
                        break
                except (OSError, http.client.HTTPException):
                    self.c = None
                if self.p.poll() is not None:
                    raise RuntimeError("%s: server exited; log %s" % (what, log_path))
                time.sleep(0.01)
            self.ready_s = time.perf_counter() - t0
        finally:
            done.set()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for _ in self.p.stdout:
            pass

    c = None

    def call(self, method, path, body=None, lease=None):
        if self.c is None:
            self.c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        h = {"Content-Type": "application/json"} if body is not None else {}
        if lease:
            h["X-Ctune-Lease"] = lease
        try:
            self.c.request(method, path, json.dumps(body) if body is not None else None, h)
            r = self.c.getresponse()
            data = r.read()
        except (OSError, http.client.HTTPException):
            self.c.close()
            self.c = None
            raise
        return r.status, data

    def ok(self, method, path, body=None, lease=None):
        st, data = self.call(method, path, body, lease)
        if st >= 300:
            raise RuntimeError("%s %s -> %d %s" % (method, path, st, data[:300]))
        return json.loads(data) if data else None

    def stop(self):
        t0 = time.perf_counter()
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=300)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()
        return time.perf_counter() - t0


def make_db(bin_dir, path, scale, with_summaries, workdir, margin):
    """A database the server created and migrated, then the bulk rows."""
    say("bulk: creating %s with %s/ctune-server" % (path, bin_dir))
    s = Server(bin_dir, path, os.path.join(workdir, "create.log"), "normal", "create")
    s.stop()
    return bulk_load.load(path, scale=scale, with_summaries=with_summaries,
                          progress=lambda m: say(m), margin=margin)


def count_experiments(s):
    n, cursor = 0, None
    while True:
        q = "/api/v1/experiments?limit=10000" + ("&cursor=" + cursor if cursor else "")
        page = s.ok("GET", q)
        n += len(page["experiments"])
        cursor = page.get("next_cursor")
        if not cursor:
            return n


def browser_times(port, loads, workdir):
    """(list ms, heavy page ms, details) in headless Chromium, started as
    tests/web/harness.py starts it; 'loaded' as its tests define it."""
    sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "web"))
    from harness import CHROME_FLAGS
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    profile = tempfile.mkdtemp(prefix="profile-", dir=workdir)
    for f in CHROME_FLAGS + ["--user-data-dir=" + profile, "--window-size=1400,1000"]:
        opts.add_argument(f)
    d = webdriver.Chrome(options=opts, service=Service("/usr/bin/chromedriver"))
    d.set_script_timeout(60)
    d.set_page_load_timeout(600)
    base = "http://127.0.0.1:%d" % port
    ready_js = ("return window.__ctune && window.__ctune.page === arguments[0] && "
                "window.__ctune.readyAt && document.querySelectorAll(arguments[1]).length > 0 "
                "&& window.__ctune.readyAt")

    def load(url, page, rows, alls=None):
        out = []
        for _ in range(loads):
            d.get("about:blank")
            d.get(base + url)
            deadline = time.time() + 600
            while True:
                v = d.execute_script(ready_js, page, rows)
                if v:
                    out.append(float(v))
                    break
                if time.time() > deadline:
                    raise RuntimeError("%s did not load in 600 s" % url)
                time.sleep(0.02)
            # A page that reads its trials in the background: until every
            # one is in (an older dashboard has no allTrialsAt: ready is all).
            while alls is not None:
                v = d.execute_script("return document.getElementById('trials-loaded') ? "
                                     "window.__ctune.allTrialsAt : window.__ctune.readyAt")
                if v:
                    alls.append(float(v))
                    break
                if time.time() > deadline:
                    raise RuntimeError("%s did not load every trial in 600 s" % url)
                time.sleep(0.02)
        return sorted(out)

    try:
        lst = load("/#/", "experiments", "#experiments-table tbody tr")
        nrows = d.execute_script("return document.querySelectorAll('#experiments-table tbody tr').length")
        alls = []
        heavy = load("/#/experiments/1", "experiment", "#trials-table tbody tr", alls)
        info = d.execute_script("const e = document.querySelector('.table-tools span.muted');"
                                "return e ? e.textContent : ''")
        return lst, heavy, {"list_rows": nrows, "heavy_table": info, "heavy_all_ms": sorted(alls)}
    finally:
        d.quit()


def run_team_build(label, bin_dir, pristine, shape, a, workdir):
    r = {"bin_dir": bin_dir, "scale": shape["scale"], "experiments": shape["experiments"],
         "trials": shape["trials"], "results": shape["results"],
         "heavy_trials": shape["heavy_trials"]}
    db = os.path.join(workdir, "%s.db" % label)
    log = os.path.join(workdir, "%s-server.log" % label)
    t = time.time()
    shutil.copyfile(pristine, db)
    say("%s: copied the database (%.0f MB) in %.1f s" % (label, os.path.getsize(db) / 1e6,
                                                          time.time() - t))
    say("%s: first start" % label)
    s = Server(bin_dir, db, log, a.durability, label + " first start")
    r["first_listen_s"], r["first_ready_s"] = s.listen_s, s.ready_s
    m = mem_mb(s.p.pid)
    r["first_rss_mb"], r["first_hwm_mb"] = m.get("VmRSS"), m.get("VmHWM")
    say("%s: first start: listening %.2f s, ready %.2f s, RSS %.0f MB (peak %.0f)"
        % (label, s.listen_s, s.ready_s, m.get("VmRSS", 0), m.get("VmHWM", 0)))
    r["stop_s"] = s.stop()
    say("%s: stopped (SIGTERM) in %.2f s; restart" % (label, r["stop_s"]))
    s = Server(bin_dir, db, log, a.durability, label + " restart")
    try:
        r["restart_listen_s"], r["restart_ready_s"] = s.listen_s, s.ready_s
        m = mem_mb(s.p.pid)
        r["rss_mb"], r["hwm_mb"] = m.get("VmRSS"), m.get("VmHWM")
        say("%s: restart: listening %.2f s, ready %.2f s, RSS %.0f MB (peak %.0f)"
            % (label, s.listen_s, s.ready_s, m.get("VmRSS", 0), m.get("VmHWM", 0)))
        t = time.perf_counter()
        r["listed_experiments"] = n = count_experiments(s)
        say("%s: GET every experiment page: %d experiments, %.2f s"
            % (label, n, time.perf_counter() - t))
        if n != shape["experiments"]:
            raise RuntimeError("%s lists %d experiments, the database holds %d (see %s)"
                               % (label, n, shape["experiments"], log))

        # best, every experiment in turn
        ids = list(range(1, n + 1))
        times, heavy = [], []
        for k in range(max(a.best_calls, n)):
            eid = ids[k % n]
            t = time.perf_counter()
            st, body = s.call("GET", "/api/v1/experiments/%d/best" % eid)
            dt = (time.perf_counter() - t) * 1e3
            if st != 200:
                raise RuntimeError("best of %d -> %d %s" % (eid, st, body[:200]))
            times.append(dt)
            if eid == 1:
                heavy.append(dt)
        for _ in range(20):
            t = time.perf_counter()
            s.ok("GET", "/api/v1/experiments/1/best")
            heavy.append((time.perf_counter() - t) * 1e3)
        r.setdefault("rss_after_mb", {})["best"] = mem_mb(s.p.pid).get("VmRSS")
        r.update(best_calls=len(times), best_p50_ms=pct(times, 50), best_p99_ms=pct(times, 99),
                 best_max_ms=max(times), best_heavy_p50_ms=pct(heavy, 50))
        say("%s: best: %d calls, p50 %.3f ms, p99 %.3f ms, max %.2f ms; heaviest p50 %.3f ms"
            % (label, len(times), r["best_p50_ms"], r["best_p99_ms"], r["best_max_ms"],
               r["best_heavy_p50_ms"]))

        # dashboard
        if not a.no_browser:
            say("%s: dashboard in headless Chromium (%d fresh loads each)" % (label, a.browser_loads))
            try:
                lst, hv, info = browser_times(s.port, a.browser_loads, workdir)
                r.update(list_ms=pct(lst, 50), list_all_ms=lst, heavy_page_ms=pct(hv, 50),
                         heavy_page_all_ms=hv, **info)
                say("%s: experiment list %s ms (%d rows); heaviest page %s ms (%s), every trial in %s ms"
                    % (label, ", ".join("%.0f" % x for x in lst), info["list_rows"],
                       ", ".join("%.0f" % x for x in hv), info["heavy_table"],
                       ", ".join("%.0f" % x for x in info["heavy_all_ms"])))
            except Exception as e:  # noqa: BLE001 - the rest still counts
                r["browser_error"] = str(e)[:300]
                say("%s: dashboard not measured: %s" % (label, r["browser_error"]))

        if not a.no_browser:
            r["rss_after_mb"]["dashboard"] = mem_mb(s.p.pid).get("VmRSS")
            # The bench's own connection sat idle through the browser's
            # loads (a minute or more): the server may have closed it.
            if s.c is not None:
                s.c.close()
                s.c = None
        # leases with every experiment live
        wid = s.ok("POST", "/api/v1/workers",
                   {"name": "bench", "resources": {"cpu": 4096, "gpu": 0, "memory_mb": 0}})["id"]
        lp = "/api/v1/workers/%d/lease" % wid
        running, first = [], []
        fill = min(n, 4000)
        t0 = time.time()
        for i in range(fill):
            t = time.perf_counter()
            st, body = s.call("POST", lp, {})
            first.append((time.perf_counter() - t) * 1e3)
            if st != 200:
                raise RuntimeError("fill lease %d -> %d %s" % (i, st, body[:200]))
            running.append(json.loads(body)["trial"])
        r["rss_after_mb"]["first_leases"] = mem_mb(s.p.pid).get("VmRSS")
        r.update(first_lease_p50_ms=pct(first, 50), first_lease_p99_ms=pct(first, 99),
                 first_lease_max_ms=max(first))
        eids = {x["experiment_id"] for x in running}
        say("%s: first lease of each experiment (%d leases over %d experiments, %.1f s): "
            "p50 %.3f ms, p99 %.3f ms, max %.1f ms"
            % (label, fill, len(eids), time.time() - t0, r["first_lease_p50_ms"],
               r["first_lease_p99_ms"], r["first_lease_max_ms"]))
        times = []
        t0 = time.time()
        for i in range(a.leases):
            tr = running.pop(0)
            s.ok("POST", "/api/v1/trials/%d/complete" % tr["id"], {},
                 lease="%d:%d" % (wid, tr["attempt"]))
            t = time.perf_counter()
            st, body = s.call("POST", lp, {})
            times.append((time.perf_counter() - t) * 1e3)
            if st != 200:
                raise RuntimeError("lease %d -> %d %s" % (i, st, body[:200]))
            running.append(json.loads(body)["trial"])
        r.update(leases=len(times), lease_p50_ms=pct(times, 50), lease_p99_ms=pct(times, 99),
                 lease_max_ms=max(times), live_during_leases=len(eids))
        say("%s: %d leases (complete the oldest, lease; %d running), %.1f s: "
            "p50 %.3f ms, p99 %.3f ms, max %.2f ms"
            % (label, len(times), len(running), time.time() - t0, r["lease_p50_ms"],
               r["lease_p99_ms"], r["lease_max_ms"]))
        m = mem_mb(s.p.pid)
        r["end_rss_mb"], r["rss_peak_mb"] = m.get("VmRSS"), m.get("VmHWM")
        r["rss_after_mb"]["leases"] = m.get("VmRSS")
        say("%s: at the end: RSS %.0f MB, peak %.0f MB (RSS after %s)"
            % (label, m.get("VmRSS", 0), m.get("VmHWM", 0),
               ", ".join("%s %.0f" % (k, v or 0) for k, v in r["rss_after_mb"].items())))
    finally:
        s.stop()
    return r


def team(a, builds, workdir):
    dbs = {}
    out = {"mode": "team", "durability": a.durability, "builds": {}}
    for label, bin_dir, scale in builds:
        n_exp = bulk_load.shape(scale)["experiments"]
        # work left for every lease: each experiment gets about (its first
        # + the timed leases) / experiments new trials
        margin = max(bulk_load.MARGIN, 2 * (a.leases + n_exp) // n_exp + 10)
        plan = bulk_load.shape(scale, margin=margin)
        counts = plan["counts"]
        shape = {"scale": scale, "experiments": n_exp, "trials": plan["trials"],
                 "results": plan["results"], "heavy_trials": counts[0]}
        if scale not in dbs:
            if a.db and scale == a.scale:
                dbs[scale] = a.db
                say("using the bulk-loaded database %s" % a.db)
            else:
                path = os.path.join(workdir, "pristine-%g.db" % scale)
                # the oldest build makes the schema: a newer one migrates it
                # at its first start, as an upgrade does
                creator = builds[-1][1] if any(b[2] == scale for b in builds[1:]) else bin_dir
                t = time.time()
                make_db(creator, path, scale, a.with_summaries, workdir, margin)
                out.setdefault("bulk_s", {})[str(scale)] = time.time() - t
                dbs[scale] = path
        say("== %s (%s) at scale %g: %d experiments, %d trials (heaviest %d), %d results"
            % (label, bin_dir, scale, n_exp, shape["trials"], counts[0], shape["results"]))
        out["builds"][label] = run_team_build(label, bin_dir, dbs[scale], shape, a, workdir)
    return out


def fmt(v, unit):
    if v is None:
        return "-"
    if unit == "MB":
        return "%.0f MB" % v
    if unit == "s":
        return "%.2f s" % v
    if unit == "ms":
        return "%.3f ms" % v if v < 10 else "%.0f ms" % v
    return str(v)


def print_team(out):
    labels = list(out["builds"])
    rows = [("scale", "scale", ""), ("experiments", "experiments (all live)", ""),
            ("trials", "trials", ""), ("results", "results", ""),
            ("first_ready_s", "first start to first GET", "s"),
            ("first_hwm_mb", "RSS peak at first start", "MB"),
            ("restart_listen_s", "restart to listening", "s"),
            ("restart_ready_s", "restart to first GET", "s"),
            ("rss_mb", "RSS after restart", "MB"),
            ("rss_peak_mb", "RSS peak, restarted server", "MB"),
            ("best_p50_ms", "best p50", "ms"), ("best_p99_ms", "best p99", "ms"),
            ("best_heavy_p50_ms", "best p50, heaviest exp.", "ms"),
            ("list_ms", "dashboard list (median)", "ms"),
            ("heavy_page_ms", "dashboard heaviest page", "ms"),
            ("first_lease_p99_ms", "first lease/exp. p99", "ms"),
            ("lease_p50_ms", "lease p50, all live", "ms"),
            ("lease_p99_ms", "lease p99, all live", "ms")]
    limits = {k: (lim, unit) for k, _, lim, unit in TARGETS}
    print()
    print("%-28s" % "" + "".join("%16s" % x for x in labels) + "%14s" % "target")
    for key, name, unit in rows:
        vals = [out["builds"][x].get(key) for x in labels]
        tgt = "< " + fmt(limits[key][0], unit) if key in limits else ""
        print("%-28s" % name + "".join("%16s" % fmt(v, unit) for v in vals) + "%14s" % tgt)
    print("(server --durability %s, loopback HTTP, client-side times)" % out["durability"])


def check_targets(r):
    fails = []
    for key, name, limit, unit in TARGETS:
        v = r.get(key)
        if v is None:
            if key in ("list_ms", "heavy_page_ms") and "browser_error" not in r:
                continue  # --no-browser
            fails.append("%s: not measured" % name)
        elif not v < limit:
            fails.append("%s: %s (target < %s)" % (name, fmt(v, unit), fmt(limit, unit)))
    return fails


# -------------------------------------------------------------- single mode

TOKENS = {}


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


def scall(c, method, path, body=None, headers=None):
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
        st, b = scall(c, "GET", "/api/v1/experiments/1/best" + query)
        times.append((time.perf_counter() - t0) * 1000)
        assert st == 200, b
    times.sort()
    return times[len(times) // 2], times[-1], json.loads(b)


def run_single(bin_dir, trials, results, clients, workdir):
    """Today's check: one experiment of TRIALS x RESULTS made through the API."""
    import threading as th_mod
    tmp = tempfile.mkdtemp(prefix="single-", dir=workdir)
    log = open(os.path.join(tmp, "server.log"), "w")
    db = os.path.join(tmp, "scale.db")
    srv = Srv(bin_dir, db, log)
    TOKENS.clear()
    TOKENS.update(read_tokens(db))
    out = {"bin_dir": bin_dir, "trials": trials, "results": trials * results}
    try:
        c = srv.conn()
        cfg = {"name": "scale", "metric": "loss", "mode": "min", "num_samples": trials, "seed": 3,
               "param_space": {"lr": {"type": "loguniform", "lower": 1e-4, "upper": 0.1},
                               "batch_size": {"type": "choice", "values": [16, 32, 64]}},
               "scheduler": {"type": "fifo"}, "trainable": {"type": "command", "argv": ["true"]}}
        t0 = time.time()
        st, b = scall(c, "POST", "/api/v1/experiments", cfg)
        assert st == 201, b
        # A worker declares at most 4,096 cpus: as many workers as needed
        workers = []
        for k in range((trials + 4095) // 4096):
            wid, secret = register(lambda m, p, b, h: scall(c, m, p, b, h), TOKENS,
                                   "scale%d" % k, {"cpu": 4096})
            workers.append((wid, bearer(secret)))
        fence = {}  # trial id -> (its worker's auth header, X-Ctune-Lease)
        for i in range(trials):
            wid, as_worker = workers[i // 4096]
            st, r = scall(c, "POST", "/api/v1/workers/%d/lease" % wid, {}, as_worker)
            assert st == 200, r
            tr = json.loads(r)["trial"]
            fence[tr["id"]] = dict(as_worker, **{"X-Ctune-Lease": "%d:%d" % (wid, tr["attempt"])})
        out["lease_all_s"] = time.time() - t0
        say("single %s: created and leased %d trials: %.2f s" % (bin_dir, trials, out["lease_all_s"]))

        def poster(k):
            cc = srv.conn()
            for t in range(1, results + 1):
                for tid in range(1 + k, trials + 1, clients):
                    body = {"training_iteration": t, "loss": 1.0 / t + (tid % 97) * 1e-3,
                            "accuracy": 0.5 + t * 0.01, "time_total_s": t * 1.5}
                    st, r = scall(cc, "POST", "/api/v1/trials/%d/results" % tid, body, fence[tid])
                    assert st == 200, r

        t0 = time.time()
        th = [th_mod.Thread(target=poster, args=(k,)) for k in range(clients)]
        for x in th:
            x.start()
        for x in th:
            x.join()
        out["post_s"] = time.time() - t0
        say("single %s: posted %d results in %.2f s" % (bin_dir, trials * results, out["post_s"]))
        for phase in ("running", "restarted"):
            mem = mem_mb(srv.p.pid)
            last = time_best(srv, "")
            alls = time_best(srv, "?scope=all")
            other = time_best(srv, "?metric=accuracy&mode=max", n=5)
            cl = srv.conn()
            t0 = time.perf_counter()
            st, body = scall(cl, "GET", "/api/v1/experiments/1/trials?limit=10000")
            list_ms = (time.perf_counter() - t0) * 1000
            out[phase] = {"rss_mb": mem["VmRSS"], "hwm_mb": mem["VmHWM"],
                          "best_p50_ms": last[0], "best_max_ms": last[1],
                          "best_all_p50_ms": alls[0], "best_other_p50_ms": other[0],
                          "list_10k_ms": list_ms}
            say("single %s [%s]: %s" % (bin_dir, phase, json.dumps(out[phase])))
            if phase == "running":
                srv.stop()
                srv = Srv(bin_dir, db, log)
                out["restart_s"] = srv.start_s
                say("single %s: restart: listening after %.2f s" % (bin_dir, srv.start_s))
        return out
    finally:
        if srv.p.poll() is None:
            srv.p.kill()
            srv.p.wait()
        log.close()


def print_single(out):
    labels = list(out["builds"])
    rows = [("restart_s", None, "restart to listening", "s"),
            ("rss_mb", "restarted", "RSS after restart", "MB"),
            ("hwm_mb", "running", "RSS peak while filling", "MB"),
            ("best_p50_ms", "restarted", "best p50 (last)", "ms"),
            ("best_all_p50_ms", "restarted", "best p50 (scope all)", "ms"),
            ("best_other_p50_ms", "restarted", "best p50 (other metric)", "ms"),
            ("list_10k_ms", "restarted", "GET the trials (one page)", "ms")]
    print()
    print("%-28s" % "" + "".join("%16s" % x for x in labels))
    for key, phase, name, unit in rows:
        vals = [(out["builds"][x].get(phase) or {}).get(key) if phase else out["builds"][x].get(key)
                for x in labels]
        print("%-28s" % name + "".join("%16s" % fmt(v, unit) for v in vals))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("usage:", 1)[1])
    ap.add_argument("bin_dir", help="the build to measure (its ctune-server)")
    ap.add_argument("--baseline", help="an older build's bin dir, measured side by side")
    ap.add_argument("--mode", choices=("team", "single"), default="team")
    ap.add_argument("--label", default="new", help="the first build's name in the table (default new)")
    ap.add_argument("--scale", type=float, default=1.0, help="team: shrinks every count (default 1.0)")
    ap.add_argument("--baseline-scale", type=float,
                    help="team: the baseline's scale when it differs (an old build at full "
                         "scale can take too long)")
    ap.add_argument("--db", help="team: an already bulk-loaded database at --scale (copied, not changed)")
    ap.add_argument("--with-summaries", action="store_true", help="team: bulk_load.py --with-summaries")
    ap.add_argument("--leases", type=int, default=2000)
    ap.add_argument("--best-calls", type=int, default=2000)
    ap.add_argument("--browser-loads", type=int, default=3)
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--web-dir", help="team: the dashboard the servers serve (default: their own web/)")
    ap.add_argument("--durability", choices=("normal", "full"), default="normal")
    ap.add_argument("--trials", type=int, default=10000, help="single: trials (default 10000)")
    ap.add_argument("--results", type=int, default=10, help="single: results a trial (default 10)")
    ap.add_argument("--clients", type=int, default=4, help="single: posting threads")
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--workdir", help="where databases and logs go (default: a new temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the work dir")
    a = ap.parse_args()
    global WEB_DIR
    WEB_DIR = os.path.abspath(a.web_dir) if a.web_dir else None
    workdir = a.workdir or tempfile.mkdtemp(prefix="ctune-scale-")
    os.makedirs(workdir, exist_ok=True)
    say("work dir %s; load %s" % (workdir, " ".join("%.2f" % x for x in os.getloadavg())))
    rc = 0
    try:
        if a.mode == "single":
            out = {"mode": "single", "builds": {}}
            for label, b in [(a.label, a.bin_dir)] + ([("baseline", a.baseline)] if a.baseline else []):
                out["builds"][label] = run_single(b, a.trials, a.results, a.clients, workdir)
            print_single(out)
            # the single-experiment targets: RSS < 200 MB, best < 50 ms
            r = out["builds"][a.label]
            ok = all(r[ph]["hwm_mb"] < 200 and r[ph]["best_p50_ms"] < 50 and
                     r[ph]["best_all_p50_ms"] < 50 for ph in ("running", "restarted"))
            print("check: RSS < 200 MB and best < 50 ms: %s" % ("yes" if ok else "NO"))
            rc = 0 if ok else 1
        else:
            builds = [(a.label, a.bin_dir, a.scale)]
            if a.baseline:
                builds.append(("baseline", a.baseline, a.baseline_scale or a.scale))
            out = team(a, builds, workdir)
            print_team(out)
            fails = check_targets(out["builds"][a.label])
            out["target_failures"] = fails
            for f in fails:
                print("TARGET MISSED: " + f)
            print("targets for %s at scale %g: %s"
                  % (a.bin_dir, a.scale, "met" if not fails else "%d missed" % len(fails)))
            rc = 1 if fails else 0
        out["load_avg_end"] = os.getloadavg()
        out["seconds"] = time.time() - T0
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)
        say("done in %.0f s; load %s" % (time.time() - T0,
                                          " ".join("%.2f" % x for x in os.getloadavg())))
        return rc
    finally:
        if not a.keep and not a.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
