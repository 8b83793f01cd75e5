#!/usr/bin/env python3
"""ctune-worker's two performance figures, measured against the real
ctune-server on loopback:

1. lease-to-running dispatch: for N short command trials run one after the
   other, (a) the worker's own figure (lease answer received -> trial process
   spawned, from its "dispatch X ms" log line) and (b) from outside: the
   server's started_at (lease granted) -> the first instruction of the trial
   (`date +%s.%N` as its first command, so this includes sh and date start-up);
2. worker overhead: the worker's own CPU time (utime+stime in /proc/<pid>/stat,
   not its children's) while it runs 2 trials that report once a second, over
   --seconds, as a percentage of one core.

usage: bench_worker.py BIN_DIR [--trials N] [--seconds S]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "tests", "worker", "e2e"))
import harness  # noqa: E402

QUICK = ("date +%s.%N > \"$CTUNE_CHECKPOINT_DIR/started\"; "
         "echo '{\"training_iteration\": 1, \"loss\": 1}'")
ONCE_A_SECOND = ("i=0; while [ $i -lt 100000 ]; do sleep 1; i=$((i+1)); "
                 "echo \"{\\\"training_iteration\\\": $i, \\\"loss\\\": 0.5}\"; done")


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench(env, args):
    env.start_server()
    w = env.start_worker("bench", "--cpus", "2", "--poll-ms", "1000")
    cfg = harness.command_config("dispatch", ["sh", "-c", QUICK], num_samples=args.trials,
                                 max_concurrent_trials=1)
    exp = env.submit(cfg)
    env.wait_experiment(exp, 60 + args.trials)
    inside = [float(x) for x in re.findall(r"dispatch ([0-9.]+) ms", w.log())]
    outside = []
    for t in env.trials(exp):
        with open(os.path.join(env.trial_dir("bench", t["id"]), "started")) as f:
            outside.append((float(f.read()) - t["started_at"]) * 1e3)
    # What starting `sh -c 'date'` costs by itself here, to read (b) against.
    base = []
    for _ in range(20):
        t0 = time.time()
        out = subprocess.run(["sh", "-c", "date +%s.%N"], capture_output=True, text=True).stdout
        base.append((float(out) - t0) * 1e3)
    for name, v in (("worker: lease answer -> spawned", inside),
                    ("server lease -> trial's first instruction", outside),
                    ("baseline: fork+exec sh -> date runs", base)):
        print("dispatch %-44s n=%d median %.2f ms  p95 %.2f ms  max %.2f ms"
              % (name, len(v), statistics.median(v), pct(v, 0.95), max(v)))

    cfg = harness.command_config("overhead", ["sh", "-c", ONCE_A_SECOND], num_samples=2,
                                 max_concurrent_trials=2)
    exp = env.submit(cfg)
    harness.wait_for(lambda: sum(t["status"] == "RUNNING" for t in env.trials(exp)) == 2, 20,
                     "two running trials")
    time.sleep(2)
    c0, t0 = cpu_seconds(w.pid), time.time()
    n0 = sum(len(env.results(t["id"])) for t in env.trials(exp))
    time.sleep(args.seconds)
    c1, t1 = cpu_seconds(w.pid), time.time()
    n1 = sum(len(env.results(t["id"])) for t in env.trials(exp))
    print("overhead: worker used %.3f s CPU in %.1f s wall = %.3f%% of one core "
          "(2 trials, %d results forwarded, plus heartbeats, lease polls and log uploads)"
          % (c1 - c0, t1 - t0, 100 * (c1 - c0) / (t1 - t0), n1 - n0))
    env.api("POST", "/api/v1/experiments/%d/cancel" % exp, {})


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir")
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=60)
    a = ap.parse_args()
    sys.argv = [sys.argv[0], a.bin_dir]
    harness.main("bench", lambda env: bench(env, a))
