"""Shared parts of the chaos tests: a cluster of real processes (one
ctune-server on a fixed port so it can be restarted where the workers look
for it, and ctune-workers on their own work dirs), the REST calls (retried
while the server is down), and the checks of the stored results against the
deterministic trainable (trainable.py) and against a replay of ASHA.

Python 3 standard library only. Every process is started here and stopped
here by its pid; the temp dir is removed unless the run failed (then its
path is printed: server/worker logs, the database, the trainables' ledger)."""
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import trainable  # noqa: E402  (value_of / score_of: the values to expect)
import ctune_harness  # noqa: E402
from ctune_harness import read_tokens, wait_for  # noqa: E402,F401

TRAINABLE = os.path.join(HERE, "trainable.py")
PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
SKIP = 77
ENDED = ("TERMINATED", "ERROR")


def log(msg):
    sys.stdout.write("[%7.2f] %s\n" % (time.monotonic() - T0, msg))
    sys.stdout.flush()


T0 = time.monotonic()


def free_port():
    """A port that was free a moment ago: the server is restarted on it, so
    the workers (started with its URL) find it again. Picked below the
    kernel's ephemeral range, so that while our server is down another test's
    `--port 0` server (or any outgoing connection) cannot be handed it."""
    lo = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    rng = __import__("random").Random(os.getpid() ^ int(time.time() * 1e6))
    for _ in range(200):
        port = rng.randrange(max(1024, lo - 12000), lo)
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            s.close()
        return port
    raise AssertionError("no free port below %d" % lo)


class Cluster:
    def __init__(self, name, lease_timeout=3.0, heartbeat=0.5):
        self.bin = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CTUNE_BIN_DIR", "")
        for prog in ("ctune-server", "ctune-worker"):
            if not os.access(os.path.join(self.bin, prog), os.X_OK):
                print("SKIP: %s not built in %r" % (prog, self.bin))
                sys.exit(SKIP)
        self.tmp = tempfile.mkdtemp(prefix="ctune-%s-" % name)
        self.ledger = os.path.join(self.tmp, "ledger")
        os.mkdir(self.ledger)
        self.db = os.path.join(self.tmp, "ctune.db")
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.lease_timeout = lease_timeout
        self.heartbeat = heartbeat
        self.server = None
        self.servers = []          # every incarnation, for the logs
        self.workers = {}          # name -> current ctune_harness.Process
        self.all_procs = []
        self.nstart = 0
        self.metrics_seen = []     # per server incarnation: last counters read

    # -- processes -----------------------------------------------------
    def start_server(self, timeout=20):
        deadline = time.monotonic() + timeout
        while True:
            self.nstart += 1
            out_path = os.path.join(self.tmp, "server-%02d.out" % self.nstart)
            log_path = os.path.join(self.tmp, "server-%02d.log" % self.nstart)
            proc = ctune_harness.spawn(
                [os.path.join(self.bin, "ctune-server"), "--db", self.db, "--bind",
                 "127.0.0.1", "--port", str(self.port), "--lease-timeout",
                 str(self.lease_timeout), "--heartbeat-interval", str(self.heartbeat)],
                log_path, "server#%d" % self.nstart, output=out_path, new_session=True,
                cls=ctune_harness.Server)
            self.all_procs.append(proc)
            try:
                proc.await_listening(max(0.0, deadline - time.monotonic()))
            except ctune_harness.StartError as e:
                if e.exited is None or "cannot listen" not in proc.log():
                    raise AssertionError("ctune-server did not start on port %d: %s"
                                         % (self.port, e))
                # The port is still held (a restart): wait until it is free
                # again, then start it anew.
                wait_for("port %d to be free for ctune-server" % self.port,
                         lambda: ctune_harness.port_free(self.port),
                         max(0.0, deadline - time.monotonic()), step=0.1)
                continue
            self.server = proc
            self.servers.append(proc)
            self.metrics_seen.append({})
            return proc

    def start_worker(self, name, cpus=2, env_extra=None):
        self.nstart += 1
        env = dict(os.environ)
        env.update(env_extra or {})
        proc = ctune_harness.start_worker(
            self.bin, self.url,
            ["--name", name, "--work-dir", self.work_dir(name), "--cpus", str(cpus),
             "--memory-mb", "2000", "--poll-ms", "200", "--stop-grace-s", "2",
             # SIGTERM is a preemption notice (test_chaos.py's preempt faults)
             "--preemption-grace-s", "3",
             "--token-file", self.db + ".tokens"]  # the server made it (tokens by default)
            # trials get a clean environment: name what they may see
            + (["--pass-env", ",".join(sorted(env_extra))] if env_extra else []),
            log_path=os.path.join(self.tmp, "worker-%s-%02d.log" % (name, self.nstart)),
            env=env, new_session=True, name="worker-%s#%d" % (name, self.nstart))
        proc.env_extra = env_extra
        self.workers[name] = proc
        self.all_procs.append(proc)
        return proc

    def work_dir(self, name):
        return os.path.join(self.tmp, "work-" + name)

    def trial_processes(self, worker=None, supervisors=False):
        """{pid: trial id} of live trainables started for this cluster (found by
        the CTUNE_CHECKPOINT_DIR the worker puts in their environment). With
        supervisors, also the worker's per-trial processes that run them (a
        host freeze stops those too; a trial kill -9 hits the trainable)."""
        prefix = (self.work_dir(worker) if worker else self.tmp).encode()
        found = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open("/proc/%s/environ" % d, "rb") as f:
                    env = f.read().split(b"\0")
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    cmd = f.read()
                with open("/proc/%s/stat" % d) as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            argv = cmd.split(b"\0")
            if state == "Z" or b"trainable.py" not in cmd:
                continue
            if not supervisors and not (len(argv) > 1 and argv[1].endswith(b"trainable.py")):
                continue
            ck = [e for e in env if e.startswith(b"CTUNE_CHECKPOINT_DIR=")]
            tid = [e for e in env if e.startswith(b"CTUNE_TRIAL_ID=")]
            if ck and ck[0][len(b"CTUNE_CHECKPOINT_DIR="):].startswith(prefix):
                found[int(d)] = int(tid[0].split(b"=", 1)[1]) if tid else 0
        return found

    def close(self, keep=False):
        for proc in self.all_procs:
            proc.signal(signal.SIGCONT)
            proc.signal(signal.SIGKILL)
            try:
                proc.p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        for _ in range(3):  # a trial being started may appear a moment later
            for pid in self.trial_processes(supervisors=True):
                try:
                    os.kill(pid, signal.SIGCONT)
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.1)
        if keep:
            print("logs, database and ledger kept in %s" % self.tmp)
        else:
            for _ in range(3):
                shutil.rmtree(self.tmp, ignore_errors=True)
                if not os.path.exists(self.tmp):
                    break
                time.sleep(0.2)

    # -- REST ------------------------------------------------------------
    def request(self, method, path, body=None, timeout=5, raw=False):
        """(status, parsed body or bytes, headers by lower-case name); raises
        OSError when the server cannot be reached."""
        if not getattr(self, "admin_token", None) and os.path.exists(self.db + ".tokens"):
            self.admin_token = read_tokens(self.db + ".tokens")["admin"]  # tokens by default
        client = ctune_harness.JsonClient("127.0.0.1", self.port, token=getattr(self, "admin_token", None),
                                          timeout=timeout, keep_alive=False)
        status, text, hdrs = client.request(method, path, body,
                                            headers={"Content-Type": "application/json"})
        if raw:
            return status, text, hdrs
        return status, (json.loads(text) if text else None), hdrs

    def api(self, method, path, body=None, ok=(200, 201, 204), wait=60):
        """The call, retried while the server is down or restarting."""
        try:
            status, obj, _ = wait_for("%s %s to be answered" % (method, path),
                                      lambda: self.request(method, path, body), wait, step=0.1,
                                      ignore=(OSError, ValueError))
        except ctune_harness.WaitTimeout as e:
            raise AssertionError("%s %s: server unreachable for %d s (%s)"
                                 % (method, path, wait, e))
        if ok and status not in ok:
            raise AssertionError("%s %s -> %d %s" % (method, path, status, obj))
        return obj

    def scrape_metrics(self):
        """Remembers the server's counters (they restart at 0 with each server
        process, so the sum over incarnations of the last read is a lower
        bound of what was acknowledged)."""
        try:
            status, text, _ = self.request("GET", "/metrics", timeout=2, raw=True)
        except OSError:
            return
        if status != 200:
            return
        seen = self.metrics_seen[-1]
        for line in text.decode(errors="replace").splitlines():
            if line.startswith("ctune_results_"):
                k, v = line.split()
                seen[k] = max(seen.get(k, 0), int(float(v)))

    def metric_total(self, name):
        return sum(m.get(name, 0) for m in self.metrics_seen)

    def experiment(self, eid):
        return self.api("GET", "/api/v1/experiments/%d" % eid)

    def trials(self, eid):
        return self.api("GET", "/api/v1/experiments/%d/trials" % eid)["trials"]

    def trial(self, tid):
        return self.api("GET", "/api/v1/trials/%d" % tid)

    def trial_results(self, tid):
        return self.api("GET", "/api/v1/trials/%d/results" % tid)["results"]

    def experiment_results(self, eid):
        """Every stored result of the experiment in the server's order (seq)."""
        out, since = [], 0
        while True:
            r = self.api("GET", "/api/v1/experiments/%d/results?since=%d&limit=10000"
                         % (eid, since))
            out.extend(r["results"])
            last = int(r["last_seq"])
            if not r["results"] or last <= since:
                return out
            since = last

    def checkpoint(self, tid):
        """(header iteration, content dict) of the stored checkpoint, or None."""
        status, body, hdrs = self.request("GET", "/api/v1/trials/%d/checkpoint" % tid, raw=True)
        if status == 404:
            return None
        if status != 200:
            raise AssertionError("GET checkpoint of trial %d -> %d" % (tid, status))
        it = hdrs.get("x-ctune-iteration")
        crc = hdrs.get("x-ctune-crc32")
        try:
            content = json.loads(body)
        except ValueError:
            content = {"unparsable": body[:80].decode(errors="replace")}
        if crc is not None and int(crc, 16) != zlib.crc32(body) & 0xffffffff:
            content["crc_mismatch"] = crc
        return (int(it) if it is not None else None), content


def read_ledger(cluster, tid):
    """[(pid, event, args)] of the trainable processes of one trial."""
    path = os.path.join(cluster.ledger, "%d.log" % tid)
    out = []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[0].isdigit():
                    out.append((int(parts[0]), parts[1], parts[2:]))
    except OSError:
        pass
    return out


# -- ASHA replay (docs/scheduling.md; server/core/asha.c) --------------------

def asha_milestones(max_t, grace, rf, s=0):
    n = int(math.log(max_t / grace) / math.log(rf) - s + 1)
    return [grace * math.pow(rf, k + s) for k in range(max(n, 0))]


def nanpercentile_linear(sorted_vals, rf):
    """numpy.nanpercentile(vals, (1 - 1/rf) * 100), linear, with the same
    float steps as asha.c's rung_cutoff (bit-identical)."""
    n = len(sorted_vals)
    q = ((1.0 - 1.0 / rf) * 100.0) / 100.0
    pos = (n - 1) * q
    lo = int(math.floor(pos))
    if lo >= n - 1:
        return sorted_vals[n - 1]
    t = pos - lo
    lo_v, hi_v = sorted_vals[lo], sorted_vals[lo + 1]
    d = hi_v - lo_v
    return hi_v - d * (1.0 - t) if t >= 0.5 else lo_v + d * t


class AshaReplay:
    """One bracket (the tests use brackets 1). on_result returns
    (decision, reason, milestone, cutoff)."""

    def __init__(self, max_t, grace, rf, mode):
        self.max_t, self.rf = max_t, rf
        self.sign = 1.0 if mode == "max" else -1.0
        self.ms = asha_milestones(max_t, grace, rf)
        self.rungs = [[] for _ in self.ms]
        self.nan = [0 for _ in self.ms]
        self.recorded = {}
        self.stopped = 0

    def _walk(self, tid, t, value):
        rec = self.recorded.setdefault(tid, set())
        v = self.sign * value if value is not None else float("nan")
        for k in range(len(self.ms) - 1, -1, -1):
            if t < self.ms[k] or k in rec:
                continue
            cutoff = nanpercentile_linear(self.rungs[k], self.rf) if self.rungs[k] else None
            decision, reason = "continue", None
            if not math.isfinite(v):
                decision, reason = "stop", "NONFINITE"
                self.nan[k] += 1
            else:
                if cutoff is not None and v < cutoff:
                    decision, reason = "stop", "CUTOFF"
                self.rungs[k].append(v)
                self.rungs[k].sort()
            rec.add(k)
            return decision, reason, self.ms[k], cutoff
        return "continue", None, None, None

    def on_result(self, tid, t, value):
        if t >= self.max_t:
            return "stop", "MAX_T", None, None
        d = self._walk(tid, t, value)
        if d[0] == "stop":
            self.stopped += 1
        return d

    def on_end(self, tid, t, value):
        self._walk(tid, t, value)

    def cutoffs(self):
        """In the metric's own sign, as the API shows them."""
        return [self.sign * nanpercentile_linear(r, self.rf) if r else None
                for r in self.rungs]


def ulps(a, b):
    """How many doubles apart a and b are (None when not both finite)."""
    import struct
    if not (isinstance(a, float) or isinstance(a, int)) or \
       not (isinstance(b, float) or isinstance(b, int)):
        return None
    if not (math.isfinite(a) and math.isfinite(b)):
        return None

    def key(x):
        i = struct.unpack("<q", struct.pack("<d", float(x)))[0]
        return i if i >= 0 else -(i & 0x7fffffffffffffff)
    return abs(key(a) - key(b))


def same_float(a, b):
    if a is None or b is None:
        return a is b
    return a == b or (math.isnan(a) and math.isnan(b))


# -- the end-of-run checks -------------------------------------------------------

class Report:
    """Violations (each one line with its evidence) and figures."""

    def __init__(self):
        self.violations = []
        self.fig = {"trials": 0, "results_stored": 0, "results_duplicated": 0,
                    "results_lost": 0, "wrong_values": 0, "ended_early_without_stop": 0,
                    "spliced_histories": 0, "stuck_trials": 0, "error_trials": 0,
                    "asha_mismatches": 0, "checkpoint_mismatches": 0, "values_off_by_ulps": 0,
                    "results_after_stop": 0, "attempts": 0, "resumes": 0}

    def bad(self, kind, msg):
        self.violations.append("%s: %s" % (kind, msg))

    def print_violations(self, per_kind=8):
        """At most per_kind lines of each kind, then how many more."""
        shown = {}
        for v in self.violations:
            kind = v.split(":", 1)[0]
            shown[kind] = shown.get(kind, 0) + 1
            if shown[kind] <= per_kind:
                print("VIOLATION " + v)
        for kind, n in sorted(shown.items()):
            if n > per_kind:
                print("VIOLATION %s: ... and %d more of this kind" % (kind, n - per_kind))


def check_experiment(c, eid, rep, max_iter):
    """Checks one ended experiment: status, every trial's stored history
    against the trainable and its own ledger, ASHA/FIFO decisions replayed in
    the server's result order, and the stored checkpoints."""
    e = c.experiment(eid)
    if e["status"] != "TERMINATED":
        rep.bad("experiment", "experiment %d is %s, not TERMINATED (counts %s)"
                % (eid, e["status"], e.get("counts")))
    sched = e["scheduler"]
    max_t = sched.get("max_t")
    replay = None
    if sched["type"] == "asha":
        replay = AshaReplay(float(max_t), float(sched["grace_period"]),
                            float(sched["reduction_factor"]), e["mode"])
    trials = {t["id"]: t for t in c.trials(eid)}
    ordered = c.experiment_results(eid)
    decisions = {}
    for row in ordered:
        tid, r = row["trial_id"], row["result"]
        t = r.get("training_iteration")
        if replay:
            d = replay.on_result(tid, t, r.get("loss"))
        else:
            d = ("stop", "MAX_T", None, None) if max_t and t >= max_t else \
                ("continue", None, None, None)
        decisions.setdefault(tid, []).append((t, d))
    for tid in sorted(trials):
        tr = trials[tid]
        rep.fig["trials"] += 1
        where = "trial %d (exp %d, %s, attempt %s, worker %s)" % (
            tid, eid, tr["status"], tr.get("attempt"), tr.get("worker_id"))
        if tr["status"] not in ENDED:
            rep.fig["stuck_trials"] += 1
            rep.bad("stuck", "%s is still %s (pending_reason %r)"
                    % (where, tr["status"], tr.get("pending_reason")))
        elif tr["status"] == "ERROR":
            rep.fig["error_trials"] += 1
            rep.bad("error", "%s ended ERROR: exit %s, %r" % (where, tr.get("exit_code"),
                                                             (tr.get("error") or "")[-200:]))
        rows = c.trial_results(tid)
        rep.fig["results_stored"] += len(rows)
        ts = [r.get("training_iteration") for r in rows]
        n = max(ts) if ts else 0
        dups = sorted({t for t in ts if ts.count(t) > 1})
        gaps = sorted(set(range(1, int(n) + 1)) - set(ts))
        ledger = read_ledger(c, tid)
        starts = [int(args[0]) for pid, ev, args in ledger if ev == "start"]
        rep.fig["attempts"] += len(starts)
        rep.fig["resumes"] += sum(1 for s0 in starts if s0 > 1)
        if dups:
            rep.fig["results_duplicated"] += len(ts) - len(set(ts))
            rep.bad("duplicate", "%s stored time values %s more than once" % (where, dups))
        if gaps:
            rep.fig["results_lost"] += len(gaps)
            printed = {}
            for pid, ev, args in ledger:
                if ev == "result" and int(args[0]) in gaps:
                    printed.setdefault(int(args[0]), []).append(pid)
            starts = [(pid, args[0]) for pid, ev, args in ledger if ev == "start"]
            rep.bad("lost", "%s has gaps %s in 1..%d (printed by pids %s; attempts "
                    "pid:start %s)" % (where, gaps, n, printed, starts))
        if not dups and not gaps and ts != sorted(ts):
            rep.bad("order", "%s stored out of order: %s" % (where, ts))
        for r in rows:
            t = r.get("training_iteration")
            for key, fn in (("loss", trainable.value_of), ("score", trainable.score_of)):
                want = fn(tr["config"], t) if isinstance(t, int) and t >= 1 else None
                got = r.get(key)
                if not same_float(got, want):
                    u = ulps(got, want)
                    rep.fig["wrong_values"] += 1
                    if u is not None and u <= 2:
                        rep.fig["values_off_by_ulps"] += 1
                    rep.bad("value", "%s t=%s %s stored %r, the trainable computes %r (%s)"
                            % (where, t, key, got, want,
                               "%d ulp: not printed exactly" % u if u is not None and u <= 2
                               else "a different value"))
        # Which process produced each stored row: a pid coming back after
        # another one, or an attempt's rows after those of an attempt that
        # started later (the ledger's order of starts), means a stale
        # attempt's writes were accepted.
        segs = []
        for r in sorted(rows, key=lambda r: r.get("training_iteration", 0)):
            pid = r.get("pid")
            if not segs or segs[-1][0] != pid:
                segs.append([pid, r["training_iteration"], r["training_iteration"]])
            else:
                segs[-1][2] = r["training_iteration"]
        pids = [s[0] for s in segs]
        started = {}
        for pid, ev, args in ledger:
            if ev == "start":
                started.setdefault(pid, len(started))
        order = [started.get(pid, -1) for pid in pids]
        if len(set(pids)) != len(pids) or order != sorted(order):
            owner = {pid: os.path.basename(os.path.dirname(os.path.dirname(args[1])))
                     for pid, ev, args in ledger if ev == "start" and len(args) > 1}
            rep.fig["spliced_histories"] += 1
            rep.bad("stale", "%s history spliced from several processes (pid@workdir:t..t) %s; "
                    "attempts in the ledger (pid:first t) %s"
                    % (where, ["%s@%s:%d..%d" % (s[0], owner.get(s[0], "?"), s[1], s[2])
                               for s in segs],
                       [(pid, args[0]) for pid, ev, args in ledger if ev == "start"]))
        # Scheduler decisions, replayed in the server's order.
        ds = decisions.get(tid, [])
        stops = [i for i, (_, d) in enumerate(ds) if d[0] == "stop"]
        if stops and stops[0] != len(ds) - 1:
            rep.fig["results_after_stop"] += 1
            rep.bad("asha", "%s: the replay stops it at t=%s, yet results up to t=%s are "
                    "stored" % (where, ds[stops[0]][0], ds[-1][0]))
        if tr["status"] == "TERMINATED" and ds:
            last = ds[-1][1]
            early = last[0] == "stop" and last[1] in ("CUTOFF", "NONFINITE")
            if bool(tr.get("stopped_early")) != early:
                rep.fig["asha_mismatches"] += 1
                rep.bad("asha", "%s stopped_early=%s but the replay of its last result t=%s "
                        "gives %s %s (milestone %s, cutoff %r, value %r)"
                        % (where, tr.get("stopped_early"), ds[-1][0], last[0], last[1],
                           last[2], last[3], rows[-1].get("loss") if rows else None))
            if last[0] != "stop" and n < (max_t or max_iter):
                rep.fig["ended_early_without_stop"] += 1
                rep.bad("premature", "%s ended TERMINATED at t=%s of %s with no stop "
                        "decision behind it" % (where, n, max_t or max_iter))
        elif tr["status"] == "TERMINATED" and not ds:
            rep.fig["ended_early_without_stop"] += 1
            rep.bad("premature", "%s ended TERMINATED with no result stored" % where)
        # The stored checkpoint: its label is its content, and the next attempt
        # never resumes past a stored result.
        ck = c.checkpoint(tid)
        if ck:
            hdr, content = ck
            it = content.get("iteration")
            if "crc_mismatch" in content or it is None or hdr != it or it > n:
                rep.fig["checkpoint_mismatches"] += 1
                rep.bad("checkpoint", "%s stored checkpoint labelled %s holds %s (last stored "
                        "result t=%s)" % (where, hdr, content, n))
    if replay:
        b = (sched.get("brackets") or [{}])[0]
        ms = b.get("milestones") or []
        cut = replay.cutoffs()
        for k, m in enumerate(ms):
            if k >= len(replay.ms):
                break
            rec = len(replay.rungs[k]) + replay.nan[k]
            if m.get("recorded") != rec or not same_float(m.get("cutoff"), cut[k]):
                rep.fig["asha_mismatches"] += 1
                rep.bad("asha", "experiment %d milestone t=%s: server recorded %s cutoff %r, "
                        "replay of the stored results %d cutoff %r (%s ulp apart)"
                        % (eid, m.get("t"), m.get("recorded"), m.get("cutoff"), rec, cut[k],
                           ulps(m.get("cutoff"), cut[k])))
        if "stopped" in b and b["stopped"] != replay.stopped:
            rep.fig["asha_mismatches"] += 1
            rep.bad("asha", "experiment %d: server says %s trials stopped early, the replay %d"
                    % (eid, b["stopped"], replay.stopped))
    return e
