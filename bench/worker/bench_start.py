#!/usr/bin/env python3
"""The start of `ctune run`, phase by phase: from `ctune`'s exec to the
server's first log line (its token file written), the database loaded, the
worker's first line, the worker registered, the experiment created, the
first trial running and the --trials-th running (every slot's first trial),
read from the server's and worker's log stamps (CTUNE_LOG_LEVEL=debug).

Each run is `ctune run` of --trials command trials that print one result and
exit at once, --trials at a time, on a new database in a fresh directory.
With --baseline OLD_BIN the two builds alternate (OLD first in odd rounds)
and each phase's median is printed side by side.

e.g.   bench/worker/bench_start.py build/bin --baseline ../main/build/bin --rounds 10
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

LOG_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z \S+ \S+ (.*)$")

# (phase, log, pattern, which match)
PHASES = [("server's first line", "server", r".", 1),
          ("database loaded", "server", r"^loaded ", 1),
          ("worker's first line", "worker", r".", 1),
          ("worker registered", "worker", r"^registered with ", 1),
          ("experiment created", "server", r"^experiment \d+ .* created", 1),
          ("first trial running", "worker", r"^trial \d+ running", 1),
          ("every slot's first trial running", "worker", r"^trial \d+ running", None)]


def stamp(path, pattern, nth):
    n = 0
    with open(path) as f:
        for line in f:
            m = LOG_RE.match(line)
            if m and re.search(pattern, m.group(2)):
                n += 1
                if n == nth:
                    return datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f").replace(
                        tzinfo=timezone.utc).timestamp()
    return None


def one_run(bindir, trials):
    d = tempfile.mkdtemp(prefix="ctune-bench-start-")
    try:
        cfg = {"name": "s", "metric": "loss", "mode": "min", "num_samples": trials,
               "max_concurrent_trials": trials, "seed": 1,
               "param_space": {"x": {"type": "uniform", "lower": 0, "upper": 1}},
               "scheduler": {"type": "fifo", "time_attr": "training_iteration"},
               "resources_per_trial": {"cpu": len(os.sched_getaffinity(0)) / trials},
               "trainable": {"type": "command", "argv": [
                   "bash", "-c", "echo '{\"training_iteration\": 1, \"loss\": 1}'"]}}
        with open(os.path.join(d, "s.json"), "w") as f:
            json.dump(cfg, f)
        t0 = time.time()
        subprocess.run([os.path.join(bindir, "ctune"), "run", "s.json"], cwd=d, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=dict(os.environ, CTUNE_LOG_LEVEL="debug"), timeout=120)
        out = {"wall": time.time() - t0}
        logs = {k: os.path.join(d, "ctune-results", "s.%s.log" % k) for k in ("server", "worker")}
        for name, log, pat, nth in PHASES:
            t = stamp(logs[log], pat, nth or trials)
            if t is None:
                sys.exit("%s: no '%s' in the %s log (run dir %s)" % (bindir, pat, log, d))
            out[name] = t - t0
        return out
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bin", help="dir with ctune, ctune-server, ctune-worker")
    ap.add_argument("--baseline", help="another build's bin dir, run alternately")
    ap.add_argument("--rounds", type=int, default=10, help="runs of each build (default 10)")
    ap.add_argument("--trials", type=int, default=32, help="trials, all at once (default 32)")
    a = ap.parse_args()
    builds = [os.path.abspath(a.bin)] + ([os.path.abspath(a.baseline)] if a.baseline else [])
    res = {b: [] for b in builds}
    with open("/proc/loadavg") as f:
        load0 = f.read().split()[0]
    for i in range(a.rounds):
        for b in (builds if i % 2 else builds[::-1]):
            res[b].append(one_run(b, a.trials))
    with open("/proc/loadavg") as f:
        load1 = f.read().split()[0]
    print("`ctune run` of %d trials that exit at once, %d round(s), load %s-%s; ms from "
          "`ctune`'s exec, medians" % (a.trials, a.rounds, load0, load1))
    print("%-36s" % "" + "".join("%14s" % ("baseline" if b != builds[0] else "this")
                                 for b in builds[::-1]))
    for k in ["wall"] + [p[0] for p in PHASES]:
        print("%-36s" % k + "".join("%14.1f" % (1e3 * statistics.median(r[k] for r in res[b]))
                                    for b in builds[::-1]))


if __name__ == "__main__":
    main()
