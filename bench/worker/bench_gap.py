#!/usr/bin/env python3
"""Where `ctune run`'s bookkeeping overhead goes: the gap on a trial slot
between one trial's end and the next trial's first instruction, step by step.

It runs `ctune run` (a private ctune-server and ctune-worker) on an
experiment of --trials command trials that each sleep --sleep seconds and
report once, --concurrent at a time (max_concurrent_trials; each trial
asks for CPUS/CONCURRENT of a CPU, CPUS being the CPUs this process may use,
so that they all fit the worker `ctune run` starts), CTUNE_LOG_LEVEL=debug.
Nothing in the daemons is changed; the timestamps come from:

- the trial itself (bash, $EPOCHREALTIME: no fork): its first instruction,
  the moment just before it prints its one result, and its last instruction
  after that (it exits right after), written to a file per trial;
- the worker's debug log (ms): the trial's exit seen (RUNNING -> EXITED),
  its output closed and last uploads done (-> FLUSHING -> DONE; the final
  log tail goes in the `complete`), the next trial's lease (a lease reply
  or the `complete`'s reply) handled ("leased") and its process spawned
  ("running ... dispatch");
- the server's log (ms): the trial's `complete` recorded ("completed"), the
  lease granted ("leased to worker"), and the run's phases (experiment
  created and ended, server stopped; with the worker's registration and
  SIGTERM: the fixed costs at the start and the end of `ctune run`);
- with --strace: `strace -f -tt -e trace=process,network` on the worker
  (it slows the worker and its children, so its run's totals are not the
  plain run's): each request's send and its reply on the socket (result
  POST, log upload, complete, lease) and the trial process's exec;
- with --strace-worker-only: `strace -T` on the worker alone (children
  untraced): inside each spawn, the pty, uv_spawn's wait for the exec and
  the wait for the supervisor's report of the trial's pid.

A slot is a place among the --concurrent running trials: once the first
CONCURRENT trials have started, each later trial can start only because an
earlier one ended, so the k-th trial to end is paired with trial number
CONCURRENT + k to start (both in time order). For each pair it prints the
median, p90 and max of each step; and overall the wall time of the run
against the ideal (trials / concurrent * sleep), the phases (among them
the time until every slot's first trial has started: the first CONCURRENT
trials start one lease after another, and the slot that starts last
carries that to the end),
the time from
each lease reply to its supervisor's pid report, the worker's event loop's
own time on each start (its debug lines: trial dir, proc_spawn, lease
handled -> spawn asked), the CPU
seconds per trial of ctune-server, ctune-worker, its trial processes (their
supervisors, bash and sleep: the worker's cutime+cstime) and the `ctune` CLI
(utime+stime in /proc/<pid>/stat, sampled until each exits), the same
trial command's CPU when run directly, the trial processes' minor page
faults per trial against the command's own (a count that load does not
move: the supervisor's exec and loading), and the load average.

With --floor it also runs the machine's floor for the same shape: the same
trial command, --trials of them in --concurrent plain bash chains (each chain
starts its next trial the moment the last one exits; no server, worker,
supervisor or results), timed the same way: what this machine costs the
shape before any bookkeeping, so that ctune's own share is the difference.

With --baseline OLD_BIN it runs itself --runs times on each build,
alternating (OLD first in odd rounds, BIN first in even ones), and prints each run's
figures and their medians side by side: the one command for a before and
after under the same load.

e.g.   bench/worker/bench_gap.py build-test/bin          # the target's shape, ~40 s
       bench/worker/bench_gap.py build-test/bin --baseline ../main/build-test/bin --runs 3
       bench/worker/bench_gap.py build-test/bin --trials 192 --strace
       bench/worker/bench_gap.py build-test/bin --trials 192 --strace-worker-only
Figures and what they say: bench/RESULTS.md.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone

TRIAL = ('f=$EPOCHREALTIME; sleep %s; r=$EPOCHREALTIME; '
         'echo "{\\"training_iteration\\": 1, \\"loss\\": $RANDOM}"; e=$EPOCHREALTIME; '
         'echo "$f $r $e" > "%s/$CTUNE_TRIAL_ID"')

LOG_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z \S+ \S+ (.*)$")


def log_time(stamp):
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f").replace(
        tzinfo=timezone.utc).timestamp()


def read_log(path):
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            m = LOG_RE.match(line.rstrip("\n"))
            if m:
                out.append((log_time(m.group(1)), m.group(2)))
    return out


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def proc_stat(pid):
    """(utime+stime, cutime+cstime) of pid in seconds and its reaped
    children's minor page faults (cminflt), None once it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    tck = os.sysconf("SC_CLK_TCK")
    return ((int(fields[11]) + int(fields[12])) / tck, (int(fields[13]) + int(fields[14])) / tck,
            int(fields[8]))


def children(pid):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                s = f.read()
            with open("/proc/%s/cmdline" % d, "rb") as f:
                cmd = f.read().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if int(s.rsplit(")", 1)[1].split()[1]) == pid:
            out.append((int(d), os.path.basename(cmd)))
    return out


class Sampler(threading.Thread):
    """CPU of ctune and its server and worker (the last value read before
    each exits), and the load average, every 0.2 s."""

    def __init__(self, cli_pid):
        super().__init__(daemon=True)
        self.cli_pid = cli_pid
        self.pids = {}  # name -> pid
        self.last = {}  # name -> (self cpu, children cpu, children minor faults)
        self.load = []
        self.stop = threading.Event()

    def run(self):
        n = 0
        while not self.stop.is_set():
            if len(self.pids) < 2 or "ctune-spawner" not in self.pids:
                for pid, name in children(self.cli_pid):
                    if name in ("ctune-server", "ctune-worker", "strace"):
                        self.pids.setdefault(name, pid)
                # strace -f runs the worker as its child
                if "strace" in self.pids and "ctune-worker" not in self.pids:
                    for pid, name in children(self.pids["strace"]):
                        if name == "ctune-worker":
                            self.pids["ctune-worker"] = pid
            if "ctune-worker" in self.pids and "ctune-spawner" not in self.pids:
                # the worker's spawner (a fork of it that starts every
                # supervisor): its CPU is in no cutime until it is reaped
                for pid, name in children(self.pids["ctune-worker"]):
                    try:
                        with open("/proc/%d/comm" % pid) as f:
                            if f.read().strip() == "ctune-spawner":
                                self.pids["ctune-spawner"] = pid
                    except OSError:
                        pass
            for name, pid in list(self.pids.items()) + [("ctune", self.cli_pid)]:
                v = proc_stat(pid)
                if v:
                    self.last[name] = v
            if n % 25 == 0:
                with open("/proc/loadavg") as f:
                    self.load.append(float(f.read().split()[0]))
            n += 1
            self.stop.wait(0.2)


def parse_strace(path):
    """Per request sent by the worker (pid of the worker only): its kind,
    trial id, send time and reply time; forks and execs by pid."""
    line_re = re.compile(r"^(\d+)\s+(\d\d):(\d\d):(\d\d\.\d+) (\w+)\((\d+)?(.*)$")
    resumed_re = re.compile(r"^(\d+)\s+(\d\d):(\d\d):(\d\d\.\d+) <\.\.\. (\w+) resumed>(.*)$")
    day = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
    reqs, pending, execs, forks = [], {}, {}, []
    with open(path, errors="replace") as f:
        for line in f:
            m = line_re.match(line)
            if not m:
                continue
            pid, hh, mm, ss, call, fd, rest = m.groups()
            t = day + int(hh) * 3600 + int(mm) * 60 + float(ss)
            if call in ("sendto", "send", "writev", "sendmsg") and fd:
                rq = re.search(r'"(POST|GET|PUT|DELETE) (/api/v1/[^ ]*) HTTP', rest)
                if rq:
                    pending[(pid, fd)] = {"path": rq.group(2), "sent": t}
            elif call in ("recvfrom", "recv", "read", "recvmsg") and fd:
                if '"HTTP/1.1 ' in rest and (pid, fd) in pending:
                    r = pending.pop((pid, fd))
                    r["reply"] = t
                    st = re.search(r'"HTTP/1.1 (\d+)', rest)
                    r["status"] = int(st.group(1)) if st else 0
                    tid = re.search(r'\\"id\\":\s*(\d+)', rest)
                    r["lease_id"] = int(tid.group(1)) if tid else None
                    reqs.append(r)
            elif call in ("clone", "clone3", "fork", "vfork"):
                forks.append((t, pid))
            elif call == "execve":
                execs.setdefault(int(pid), []).append((t, rest[:200]))
    return reqs, forks, execs


def spawn_waits(path):
    """Worker-only strace -T: per clone() (a trial's supervisor), the time
    from opening the pty to the clone, uv_spawn's blocking read until the
    child has exec'd, and the blocking poll for the supervisor's report of
    the trial's pid; the slowest other calls of the worker in all."""
    lines = []
    with open(path, errors="replace") as f:
        for line in f:
            m = re.match(r"^(\d\d):(\d\d):(\d\d\.\d+) (\w+)\((.*)<(\d+\.\d+)>$", line.rstrip())
            if m:
                t = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
                lines.append((t, m.group(4), m.group(5), float(m.group(6)) * 1e3))
    pty, execw, report = [], [], []
    for i, (t, call, args, dur) in enumerate(lines):
        if call != "clone" and call != "clone3":
            continue
        # the pty is opened just before: the last openat of /dev/ptmx
        for j in range(i - 1, max(0, i - 60), -1):
            if lines[j][1] == "openat" and "/dev/ptmx" in lines[j][2]:
                pty.append((t - lines[j][0]) * 1e3)
                break
        k = i + 1
        while k < len(lines) and lines[k][1] not in ("read",):
            k += 1
        if k < len(lines):
            execw.append(lines[k][3])
        while k < len(lines) and lines[k][1] not in ("poll", "ppoll"):
            k += 1
        if k < len(lines):
            report.append(lines[k][3])
    print("inside the worker, per spawn (worker-only strace -T; the worker is slowed by it):")
    for name, v in (("pty opened -> supervisor cloned (pty setup, pipes)", pty),
                    ("uv_spawn's wait for the supervisor's exec (read)", execw),
                    ("wait for the supervisor's pid report (poll)", report)):
        if v:
            print("  %-52s n=%-4d median %7.2f ms  p90 %7.2f ms  sum %6.2f s"
                  % (name, len(v), statistics.median(v), pct(v, 0.9), sum(v) / 1e3))


def summarise(rows):
    out = []
    for name, vals in rows:
        vals = [v for v in vals if v is not None]
        if not vals:
            out.append((name, 0, None, None, None))
            continue
        out.append((name, len(vals), statistics.median(vals), pct(vals, 0.9), max(vals)))
    return out


def run_floor(a):
    """The machine's floor for this shape (--floor): the trial command in
    --concurrent plain bash chains that share out --trials, each starting its
    next trial when the last exits. Its wall in seconds."""
    tmp = tempfile.mkdtemp(prefix="ctune-bench-gap-floor-")
    trial = TRIAL % (a.sleep, tmp)
    chains = []
    for c in range(a.concurrent):
        n = a.trials // a.concurrent + (1 if c < a.trials % a.concurrent else 0)
        chains.append("(for i in $(seq %d); do CTUNE_TRIAL_ID=%d-$i bash -c %s >/dev/null; done) &"
                      % (n, c, shlex.quote(trial)))
    t0 = time.time()
    subprocess.run(["bash", "-c", "\n".join(chains) + "\nwait"], check=True)
    wall = time.time() - t0
    shutil.rmtree(tmp, ignore_errors=True)
    return wall


def compare(a):
    """Alternating runs of the baseline build and this one (each a run of
    this script with --json), then the medians of their figures."""
    fwd = ["--trials", str(a.trials), "--concurrent", str(a.concurrent), "--sleep", a.sleep]
    tmp = tempfile.mkdtemp(prefix="ctune-bench-gap-cmp-")
    runs = {"baseline": [], "this": []}
    floors = []
    for r in range(a.runs):
        if a.floor:
            floors.append(run_floor(a))
            ideal = a.trials / a.concurrent * float(a.sleep)
            print("round %d floor    wall %6.2f s (+%.1f%%): the trial command in plain bash "
                  "chains" % (r + 1, floors[-1], (floors[-1] / ideal - 1) * 100), flush=True)
        # ABBA: the run that goes second finds the disk with more files
        # freshly deleted (ext4 without a journal then scans past them at
        # each create), and the load may be rising: neither build always
        # goes first.
        order = (("baseline", a.baseline), ("this", a.bin))
        for name, bindir in (order if r % 2 == 0 else order[::-1]):
            out = os.path.join(tmp, "%s-%d.json" % (name, r))
            p = subprocess.run([sys.executable, os.path.abspath(__file__), bindir, "--json", out]
                               + fwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            if p.returncode != 0:
                print(p.stdout.decode(errors="replace")[-3000:])
                sys.exit("bench_gap: the %s run %d failed" % (name, r + 1))
            with open(out) as f:
                j = json.load(f)
            runs[name].append(j)
            ph = dict(j["phases_s"])
            steps = {x["step"]: x for x in j["steps"]}
            tot = steps.get("TOTAL: A exits -> B's first instruction", {})
            load = j["load"][2]
            print("round %d %-8s wall %6.2f s (+%.1f%%)  span %6.2f s  start->first trial %.3f s  "
                  "last exit->exited %.3f s  gap median %.1f p90 %.1f ms  load %.1f-%.1f"
                  % (r + 1, name, j["wall_s"], (j["wall_s"] / j["ideal_s"] - 1) * 100, j["span_s"],
                     ph.get("first trial's first instruction", 0),
                     ph.get("ctune exited", 0) - ph.get("last trial's exit", 0),
                     tot.get("median_ms") or 0, tot.get("p90_ms") or 0,
                     min(load) if load else 0, max(load) if load else 0), flush=True)
    shutil.rmtree(tmp, ignore_errors=True)

    def med(name, f):
        vals = [f(j) for j in runs[name]]
        vals = [v for v in vals if v is not None]
        return statistics.median(vals) if vals else float("nan")

    def step(k):
        return lambda j: {x["step"]: x for x in j["steps"]}.get(k, {}).get("median_ms")

    def phase(k1, k2):
        return lambda j: dict(j["phases_s"]).get(k2, 0) - dict(j["phases_s"]).get(k1, 0)

    def cpu(k):
        return lambda j: j["cpu_s"].get(k, float("nan")) / j["trials"] * 1e3

    rows = [("ctune run wall (s)", lambda j: j["wall_s"]),
            ("over the ideal (%)", lambda j: (j["wall_s"] / j["ideal_s"] - 1) * 100),
            ("first instruction -> last exit (s)", lambda j: j["span_s"]),
            ("ctune started -> first trial (s)", phase("ctune started",
                                                       "first trial's first instruction")),
            ("first trial -> every slot's first trial started (s)",
             phase("first trial's first instruction", "every slot's first trial started")),
            ("last exit -> ctune exited (s)", phase("last trial's exit", "ctune exited")),
            ("a trial's own time beyond its sleep, median (ms)", lambda j: j.get("own_ms"))]
    rows += [("step median (ms): " + x["step"], step(x["step"])) for x in runs["this"][0]["steps"]]
    rows += [("CPU per trial (ms): " + k, cpu(k)) for k in runs["this"][0]["cpu_s"]]
    rows += [("minor page faults per trial: " + k,
              lambda j, k=k: j.get("minflt", {}).get(k, float("nan")))
             for k in runs["this"][0].get("minflt", {})]
    rows += [("worker's loop per start (ms): " + what,
              lambda j, k=k: j.get("worker_loop_s", {}).get(k, float("nan")) / j["trials"] * 1e3)
             for k, what in (("loop_dir", "the trial dir"),
                             ("loop_lease", "lease handled -> spawn requested"))]
    print("medians of %d runs each (baseline %s, this %s):" % (a.runs, a.baseline, a.bin))
    if floors:
        fl = statistics.median(floors)
        ideal = a.trials / a.concurrent * float(a.sleep)
        print("  the machine's floor (--floor), median: %.2f s (+%.1f%% over the ideal %.2f s); "
              "over the floor: baseline +%.2f s, this +%.2f s"
              % (fl, (fl / ideal - 1) * 100, ideal, med("baseline", lambda j: j["wall_s"]) - fl,
                 med("this", lambda j: j["wall_s"]) - fl))
    print("  %-78s %10s %10s" % ("", "baseline", "this"))
    for name, f in rows:
        print("  %-78s %10.3f %10.3f" % (name[:78], med("baseline", f), med("this", f)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("bin", help="dir with ctune, ctune-server, ctune-worker (build-test/bin)")
    ap.add_argument("--trials", type=int, default=960, help="trials (default 960)")
    ap.add_argument("--concurrent", type=int, default=32,
                    help="max_concurrent_trials (default 32)")
    ap.add_argument("--sleep", default="1", help="seconds each trial sleeps (default 1)")
    ap.add_argument("--strace", action="store_true",
                    help="strace -f -tt -e trace=process,network the worker (slows it)")
    ap.add_argument("--strace-trace", default="process,network",
                    help="strace's -e trace= set (e.g. all, to see what the worker does "
                    "between a lease and the spawn; default process,network)")
    ap.add_argument("--strace-worker-only", action="store_true",
                    help="strace -T -e trace=all the worker alone (no -f: its supervisors and "
                    "trials run untraced) and time what each spawn waits for inside the "
                    "worker: the pty, uv_spawn's wait for the exec, the supervisor's pid report")
    ap.add_argument("--keep", help="run in this dir and keep it (logs, stamps, strace)")
    ap.add_argument("--json", help="write the per-step figures here")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless every step and phase was found in the logs (the "
                    "smoke test's use: a changed log line must not silently give n=0)")
    ap.add_argument("--baseline", help="another build's bin dir: run both, alternating, "
                    "--runs times each, and compare (medians)")
    ap.add_argument("--runs", type=int, default=3, help="rounds with --baseline (default 3)")
    ap.add_argument("--floor", action="store_true",
                    help="also time the machine's floor for the shape: the trial command in "
                    "--concurrent plain bash chains, no ctune (once per round with --baseline)")
    a = ap.parse_args()
    if a.baseline:
        compare(a)
        return

    bindir = os.path.abspath(a.bin)
    tmp = os.path.abspath(a.keep) if a.keep else tempfile.mkdtemp(prefix="ctune-bench-gap-")
    os.makedirs(tmp, exist_ok=True)
    stamps = os.path.join(tmp, "stamps")
    os.makedirs(stamps, exist_ok=True)
    ctune = os.path.join(bindir, "ctune")
    trace = os.path.join(tmp, "worker.strace")
    if a.strace_worker_only:
        a.strace = False
    if a.strace or a.strace_worker_only:
        # `ctune run` finds ctune-worker next to itself (/proc/self/exe):
        # a copy of ctune beside a wrapper that runs the worker under strace.
        wb = os.path.join(tmp, "bin")
        os.makedirs(wb, exist_ok=True)
        shutil.copy2(ctune, os.path.join(wb, "ctune"))
        os.symlink(os.path.join(bindir, "ctune-server"), os.path.join(wb, "ctune-server"))
        with open(os.path.join(wb, "ctune-worker"), "w") as f:
            opts = ("-T -e trace=all" if a.strace_worker_only
                    else "-f -e trace=%s" % a.strace_trace)
            f.write("#!/bin/sh\nexec strace -D -tt -s 2000 %s -o %s %s \"$@\"\n"
                    % (opts, trace, os.path.join(bindir, "ctune-worker")))
        os.chmod(os.path.join(wb, "ctune-worker"), 0o755)
        ctune = os.path.join(wb, "ctune")
    ncpu = len(os.sched_getaffinity(0))
    cfg = {"name": "gap", "metric": "loss", "mode": "min", "num_samples": a.trials,
           "max_concurrent_trials": a.concurrent, "seed": 1,
           "param_space": {"x": {"type": "uniform", "lower": 0, "upper": 1}},
           "scheduler": {"type": "fifo", "time_attr": "training_iteration"},
           # --concurrent trials share this machine's CPUs (as many as it
           # has: the worker refuses a --cpus above its affinity mask)
           "resources_per_trial": {"cpu": ncpu / a.concurrent},
           "trainable": {"type": "command",
                         "argv": ["bash", "-c", TRIAL % (a.sleep, stamps)]}}
    with open(os.path.join(tmp, "gap.json"), "w") as f:
        json.dump(cfg, f)
    env = dict(os.environ, CTUNE_LOG_LEVEL="debug")
    with open("/proc/loadavg") as f:
        load0 = f.read().split()[:3]
    t0 = time.time()
    p = subprocess.Popen([ctune, "run", "gap.json"], cwd=tmp,
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    s = Sampler(p.pid)
    s.start()
    try:
        out, _ = p.communicate(timeout=600 + 10 * a.trials)
    except BaseException:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait()
        raise
    wall = time.time() - t0
    s.stop.set()
    s.join()
    with open("/proc/loadavg") as f:
        load1 = f.read().split()[:3]
    if p.returncode != 0:
        print(out.decode(errors="replace")[-3000:])
        sys.exit("ctune run exited %d (run dir %s)" % (p.returncode, tmp))

    wlog = read_log(os.path.join(tmp, "ctune-results", "gap.worker.log"))
    slog = read_log(os.path.join(tmp, "ctune-results", "gap.server.log"))
    ev = {}  # trial id -> {event: time}

    def put(tid, k, t):
        ev.setdefault(int(tid), {}).setdefault(k, t)

    for t, msg in wlog:
        m = re.match(r"trial (\d+) attempt \d+: (\w+) -> (\w+)", msg)
        if m:
            put(m.group(1), "w_" + m.group(3), t)
            continue
        m = re.match(r"trial (\d+): leased", msg)
        if m:
            put(m.group(1), "w_leased", t)
            continue
        m = re.match(r"trial (\d+): dir made, ([0-9.]+) ms on the loop", msg)
        if m:
            ev.setdefault(int(m.group(1)), {})["loop_dir"] = float(m.group(2)) / 1e3
            continue
        m = re.match(r"trial (\d+): supervisor started, ([0-9.]+) ms on the loop \(([0-9.]+) ms",
                     msg)
        if m:
            e = ev.setdefault(int(m.group(1)), {})
            e["loop_spawn"] = float(m.group(2)) / 1e3
            e["loop_lease"] = float(m.group(3)) / 1e3
            continue
        m = re.match(r"trial (\d+) running: pid (\d+).*dispatch ([0-9.]+) ms", msg)
        if m:
            put(m.group(1), "w_spawned", t)
            ev[int(m.group(1))]["pid"] = int(m.group(2))
    phase = {"ctune started": t0, "ctune exited": t0 + wall}
    for t, msg in slog:
        m = re.match(r"trial (\d+) leased to worker", msg)
        if m:
            put(m.group(1), "s_leased", t)
            phase.setdefault("first lease granted", t)
        m = re.match(r"trial (\d+) completed", msg)
        if m:
            put(m.group(1), "s_completed", t)
        phase.setdefault("server's first log line", t)
        if re.match(r"experiment \d+ '.*' created", msg):
            phase.setdefault("experiment submitted (created)", t)
        if re.match(r"experiment \d+ ended", msg):
            phase.setdefault("experiment ended (server)", t)
        if msg == "stopped":
            phase.setdefault("server stopped", t)
    for t, msg in wlog:
        if msg.startswith("registered with"):
            phase.setdefault("worker registered", t)
        if msg.startswith("got SIGTERM"):
            phase.setdefault("worker told to stop (SIGTERM)", t)
        if msg.startswith("drained: exiting"):
            phase.setdefault("worker exits", t)
    for name in os.listdir(stamps):
        with open(os.path.join(stamps, name)) as f:
            v = f.read().split()
        if len(v) == 3:
            e = ev.setdefault(int(name), {})
            e["first"], e["result"], e["exit"] = map(float, v)
    reqs, forks, execs = parse_strace(trace) if a.strace else ([], [], {})
    if a.strace:
        by = {}
        for r in reqs:
            m = re.match(r"/api/v1/trials/(\d+)/(\w+)", r["path"])
            if m:
                by.setdefault((int(m.group(1)), m.group(2)), r)
            elif r["path"].endswith("/lease") and r.get("lease_id"):
                by.setdefault((r["lease_id"], "lease"), r)
        for tid, e in ev.items():
            for kind in ("results", "logs", "complete", "lease"):
                r = by.get((tid, kind))
                if r:
                    e["sent_" + kind], e["ack_" + kind] = r["sent"], r["reply"]
            # the pid the worker logs is the trial's (its supervisor forked it
            # and reported it): its execve is the trial's command
            pid = e.get("pid")
            if pid and pid in execs:
                e["exec_trial"] = execs[pid][-1][0]
        # a lease reply that carries no trial (204) while trials wait
        e204 = [r for r in reqs if r["path"].endswith("/lease") and r["status"] == 204]
    done = [(e["exit"], tid) for tid, e in ev.items() if "exit" in e]
    started = [(e["first"], tid) for tid, e in ev.items() if "first" in e]
    done.sort()
    started.sort()
    pairs = list(zip([tid for _, tid in done], [tid for _, tid in started[a.concurrent:]]))

    def d(e, k1, k2):
        return (e[k2] - e[k1]) * 1e3 if k1 in e and k2 in e else None

    steps = [
        ("A: last result printed -> A exits (its last instruction)", "A", "result", "A", "exit"),
        ("A exits -> worker sees it (RUNNING->EXITED)", "A", "exit", "A", "w_EXITED"),
    ]
    if a.strace:
        steps[1:1] = [("A: result printed -> result POST sent", "A", "result", "A", "sent_results"),
                      ("A: result POST sent -> acknowledged", "A", "sent_results", "A",
                       "ack_results")]
        steps += [("worker sees exit -> log upload sent", "A", "w_EXITED", "A", "sent_logs"),
                  ("log upload sent -> acknowledged", "A", "sent_logs", "A", "ack_logs"),
                  ("worker sees exit -> complete sent", "A", "w_EXITED", "A", "sent_complete"),
                  ("complete sent -> acknowledged", "A", "sent_complete", "A", "ack_complete"),
                  ("A complete acknowledged -> B's lease request sent", "A", "ack_complete", "B",
                   "sent_lease"),
                  ("B: lease request sent -> reply received", "B", "sent_lease", "B",
                   "ack_lease"),
                  ("B: lease reply -> worker handled it (leased)", "B", "ack_lease", "B",
                   "w_leased")]
    else:
        steps += [("worker sees exit -> A DONE (output closed, uploads done; complete goes)", "A",
                   "w_EXITED", "A", "w_DONE"),
                  ("A DONE -> server logs A completed", "A", "w_DONE", "A", "s_completed"),
                  ("server: A completed -> B's lease granted", "A", "s_completed", "B",
                   "s_leased"),
                  ("server grants B -> worker handled the reply (leased)", "B", "s_leased", "B",
                   "w_leased")]
    steps += [("B: leased -> supervisor forked (spawned)", "B", "w_leased", "B", "w_spawned")]
    if a.strace:
        steps += [("B: spawned -> B's process execs (its private view made)", "B",
                   "w_spawned", "B", "exec_trial"),
                  ("B: trial exec -> its first instruction", "B", "exec_trial", "B", "first")]
    else:
        steps += [("B: spawned -> its first instruction", "B", "w_spawned", "B", "first")]
    steps += [("TOTAL: A's last result -> B's first instruction", "A", "result", "B", "first"),
              ("TOTAL: A exits -> B's first instruction", "A", "exit", "B", "first")]
    rows = []
    for name, w1, k1, w2, k2 in steps:
        vals = []
        for ta, tb in pairs:
            e1 = ev[ta] if w1 == "A" else ev[tb]
            e2 = ev[ta] if w2 == "A" else ev[tb]
            if k1 in e1 and k2 in e2:
                vals.append((e2[k2] - e1[k1]) * 1e3)
        rows.append((name, vals))
    ideal = a.trials / a.concurrent * float(a.sleep)
    firsts = [t for t, _ in started]
    exits = [t for t, _ in done]
    span = max(exits) - min(firsts) if firsts and exits else 0
    cpu = {k: v for k, v in s.last.items()}
    print("ctune run: %d trials x %s s, %d at a time%s; run dir %s" %
          (a.trials, a.sleep, a.concurrent, ", worker under strace" if a.strace else "", tmp))
    print("wall: ctune run %.2f s; first trial's first instruction -> last trial's exit %.2f s; "
          "ideal %.2f s: +%.1f%% (run) / +%.1f%% (trials)"
          % (wall, span, ideal, (wall / ideal - 1) * 100, (span / ideal - 1) * 100))
    print("load average: %s at start, %s at end, samples during %s"
          % ("/".join(load0), "/".join(load1), " ".join("%.2f" % x for x in s.load)))
    if firsts:
        phase["first trial's first instruction"] = min(firsts)
        # The first CONCURRENT trials start one lease after another: the
        # slot that starts last carries its delay to the end of the run.
        phase["every slot's first trial started"] = sorted(firsts)[:a.concurrent][-1]
        phase["last trial's exit"] = max(exits)
    order = ["ctune started", "server's first log line", "worker registered",
             "experiment submitted (created)", "first lease granted",
             "first trial's first instruction", "every slot's first trial started",
             "last trial's exit",
             "experiment ended (server)", "worker told to stop (SIGTERM)", "worker exits",
             "server stopped", "ctune exited"]
    print("phases of the run (s after ctune started; step):")
    prev = t0
    phases = []
    for k in order:
        if k in phase:
            print("  %-40s %7.3f  +%.3f" % (k, phase[k] - t0, phase[k] - prev))
            phases.append((k, phase[k] - t0))
            prev = phase[k]
    # A trial's own time beyond its sleep: bash's fork and exec of sleep,
    # its echo: the trial's, not the bookkeeping's (compare the baseline
    # line of the CPU table: the same command run directly).
    own = sorted((e["exit"] - e["first"] - float(a.sleep)) * 1e3 for e in ev.values()
                 if "exit" in e and "first" in e)
    if own:
        print("a trial's own time beyond its sleep: median %.2f ms, mean %.2f ms, p90 %.2f ms"
              % (statistics.median(own), statistics.mean(own), pct(own, 0.9)))
    print("per-slot gap, %d pairs (trial A ends -> the trial B that takes its place):"
          % len(pairs))
    summ = summarise(rows)
    for name, n, med, p90, mx in summ:
        if med is None:
            print("  %-58s n=0" % name)
        else:
            print("  %-58s n=%-4d median %8.2f ms  p90 %8.2f ms  max %8.2f ms"
                  % (name, n, med, p90, mx))
    # From the lease reply to the supervisor's report of the trial's pid:
    # the loop's callback (trial dir, pty, the spawn request) and then the
    # wait for the report, during which the loop is free (its own time is
    # the "event loop, ..." lines below).
    blocked = sum(e["w_spawned"] - e["w_leased"] for e in ev.values()
                  if "w_spawned" in e and "w_leased" in e)
    print("lease reply -> supervisor's pid report (the loop free meanwhile): %.2f s in all, "
          "%.1f%% of the trials' span" % (blocked, blocked / span * 100 if span else 0))
    # The loop's own time on each start, timed inside the worker (debug
    # lines): the trial dir, and the lease's handling up to the spawn
    # request (logs, watch, pty, the fork or the spawner's answer).
    loop_s = {}
    for key, what in (("loop_dir", "trial dir creation"),
                      ("loop_spawn", "proc_spawn (pty, pipes, fork or spawner request)"),
                      ("loop_lease", "lease handled -> spawn requested, in all")):
        vals = sorted(e[key] for e in ev.values() if key in e)
        loop_s[key] = sum(vals)
        if vals:
            print("worker's event loop, %-50s %6.2f s in all (%.1f%% of the span), "
                  "median %.2f ms, p90 %.2f ms, n=%d"
                  % (what + ":", sum(vals), sum(vals) / span * 100 if span else 0,
                     vals[len(vals) // 2] * 1e3, vals[int(len(vals) * 0.9)] * 1e3, len(vals)))
    cpu_rows = []
    for name in ("ctune-server", "ctune-worker", "ctune-spawner", "ctune"):
        if name in cpu:
            cpu_rows.append((name, cpu[name][0]))
    if "ctune-worker" in cpu:
        cpu_rows.append(("trial processes (worker's children)", cpu["ctune-worker"][1]))
    # The same trial command run directly (sleep 0), to read the trial
    # processes' CPU against: what bash and sleep cost by themselves.
    import resource
    base_dir = tempfile.mkdtemp(prefix="ctune-bench-gap-base-")
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    nb = 50
    for i in range(nb):
        subprocess.run(["bash", "-c", TRIAL % ("0", base_dir)], stdout=subprocess.DEVNULL,
                       env=dict(os.environ, CTUNE_TRIAL_ID=str(i)), check=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(base_dir, ignore_errors=True)
    base = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / nb
    cpu_rows.append(("baseline: the trial command run directly", base * a.trials))
    print("CPU seconds (utime+stime), total and per trial:")
    for name, v in cpu_rows:
        print("  %-40s %7.2f s  %6.2f ms/trial" % (name, v, v / a.trials * 1e3))
    # Minor page faults a trial: a count that load does not move (the
    # supervisor's exec and loading, against the command's own).
    faults = {}
    if "ctune-worker" in cpu:
        faults["trial processes (worker's children)"] = cpu["ctune-worker"][2] / a.trials
    faults["baseline: the trial command run directly"] = (r1.ru_minflt - r0.ru_minflt) / nb
    print("minor page faults per trial:")
    for name, v in faults.items():
        print("  %-40s %7.1f" % (name, v))
    if a.strace:
        print("lease requests answered 204 (nothing to lease): %d of %d"
              % (len(e204), sum(1 for r in reqs if r["path"].endswith("/lease"))))
    if a.strace_worker_only:
        spawn_waits(trace)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"trials": a.trials, "concurrent": a.concurrent, "sleep": a.sleep,
                       "strace": a.strace, "wall_s": wall, "span_s": span, "ideal_s": ideal,
                       "own_ms": statistics.median(own) if own else None,
                       "load": [load0, load1, s.load],
                       "steps": [{"step": n, "n": c, "median_ms": m, "p90_ms": q, "max_ms": x}
                                 for n, c, m, q, x in summ],
                       "cpu_s": dict(cpu_rows), "minflt": faults, "phases_s": phases,
                       "worker_in_spawn_s": blocked, "worker_loop_s": loop_s}, f, indent=1)
    if not a.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    if a.floor:
        fl = run_floor(a)
        print("the machine's floor: the same trial command in %d plain bash chains, no ctune: "
              "%.2f s, +%.1f%% over the ideal; ctune run's wall is %.2f s over it"
              % (a.concurrent, fl, (fl / ideal - 1) * 100, wall - fl))
    if a.check:
        missing = [n for n, c, *_ in summ if c == 0] + [k for k in order if k not in phase]
        if not pairs or missing:
            sys.exit("bench_gap: not found in the logs: %s" % (", ".join(missing) or "any pair"))


if __name__ == "__main__":
    main()
