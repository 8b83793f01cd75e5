#!/usr/bin/env python3
"""K ctune-train trials started at once on one data set, without and with
--data-cache (data loaded once per host): each trial's time from its start
to its first training step, and the sum of the trials' PSS at that moment
(from /proc/PID/smaps_rollup: a page shared by the K trials counts 1/K in
each, so the sum is what they really cost together).

Three modes, each --repeat times:
  none  - no cache: every trial gunzips and decodes the data set itself;
  cold  - --data-cache with an empty directory: one trial builds the cache
          file, the others wait for it, then all map it;
  warm  - --data-cache with the file already there: all map it at once.

"First training step" is the trainer's "<model> on DIR: ... backend" log
line, printed right before the training loop (after the data, the split and
the backend). The trials are stopped with SIGTERM once all have reached it
and their PSS is read. The source files are in the page cache in every mode
(this script never drops caches: the machine is shared).

Usage: bench_datacache.py [--build build] [--trials 4] [--repeat 3]
                          [--data-dir /usr/share/datasets/fashion-mnist]
"""
import argparse
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def pss_kb(pid):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    raise RuntimeError(f"no Pss for {pid}")


def conditions():
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    mem = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            mem[k] = int(v.split()[0])
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return (f"{os.cpu_count()} CPUs ({model}), load average {load}, "
            f"MemAvailable {mem.get('MemAvailable', 0) // 1024} MiB, "
            f"kernel {platform.release()}")


def one_round(train, data_dir, k, cache, model):
    """Starts k trials at once; returns ([seconds to first step], PSS MiB)."""
    args = [train, "--data-dir", data_dir, "--model", model, "--epochs", "1",
            "--threads", "1"]
    if cache:
        args += ["--data-cache", cache]
    reached = [None] * k
    built = [False] * k
    procs = []
    t0 = time.monotonic()
    for i in range(k):
        p = subprocess.Popen(args + ["--seed", str(i + 1)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
        procs.append((p, time.monotonic()))
    ev = threading.Event()

    def watch(i, p, start):
        for line in p.stderr:
            if "data cache: built" in line:
                built[i] = True
            if " backend" in line and " train, " in line and reached[i] is None:
                reached[i] = time.monotonic() - start
                if all(r is not None for r in reached):
                    ev.set()
            if '"error"' in line:
                sys.stderr.write(line)

    threads = [threading.Thread(target=watch, args=(i, p, s), daemon=True)
               for i, (p, s) in enumerate(procs)]
    for t in threads:
        t.start()
    ok = ev.wait(300)
    pss = 0
    if ok:
        pss = sum(pss_kb(p.pid) for p, _ in procs) / 1024.0
    for p, _ in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p, _ in procs:
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    for t in threads:
        t.join(5)
    if not ok:
        raise RuntimeError("not every trial reached its first step")
    return reached, pss, sum(built), time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    train = os.path.join(a.build, "bin", "ctune-train")
    if not os.access(train, os.X_OK):
        sys.exit(f"no {train}: build first")
    print("conditions before:", conditions())
    tmp = tempfile.mkdtemp(prefix="ctune-bench-datacache-")
    rows = {"none": [], "cold": [], "warm": []}
    try:
        for r in range(a.repeat):
            for mode in ("none", "cold", "warm"):
                cache = None
                if mode != "none":
                    cache = os.path.join(tmp, f"cache{r}")
                    if mode == "cold":
                        shutil.rmtree(cache, ignore_errors=True)
                ttfs, pss, nbuilt, wall = one_round(train, a.data_dir,
                                                    a.trials, cache, a.model)
                rows[mode].append((ttfs, pss))
                print(f"run {r + 1} {mode:4}: first step after "
                      + " ".join(f"{t:.2f}" for t in ttfs)
                      + f" s (mean {statistics.mean(ttfs):.2f}, max "
                      f"{max(ttfs):.2f}); sum of PSS {pss:.1f} MiB"
                      + (f"; {nbuilt} built the cache" if mode == "cold" else ""),
                      flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("conditions after:", conditions())
    print(f"\n{a.trials} trials at once, {a.model}, {a.repeat} runs; median "
          "of the runs:")
    print("| mode | mean time to first step (s) | slowest trial (s) | sum of PSS (MiB) |")
    print("|---|---|---|---|")
    for mode, rs in rows.items():
        print(f"| {mode} | {statistics.median(statistics.mean(t) for t, _ in rs):.2f} "
              f"| {statistics.median(max(t) for t, _ in rs):.2f} "
              f"| {statistics.median(p for _, p in rs):.1f} |")


if __name__ == "__main__":
    main()
