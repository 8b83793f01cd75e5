#!/usr/bin/env python3
"""What a trial's supervisor costs by itself: `ctune-supervise` started as
the worker starts it (the trial's CPU, --cpus, --parent, --report-fd, and
the private view of a `ctune run` worker: the work dir and six files
hidden, the trial's dir and the cache shown; a mount namespace as root, a
user namespace otherwise), around a trial that is /bin/true, against
/bin/true run directly; per start, the CPU seconds (utime+stime of the
reaped processes), the minor page faults (a count that load does not
move) and the time from the spawn to the supervisor's pid report and to
its exit.

With --baseline OLD_BIN_DIR the two builds' supervisors alternate start
by start, in one run, so that both see the same load.

e.g.   bench/worker/bench_supervise.py build/bin --baseline ../main/build/bin
Figures and what they say: bench/RESULTS.md.
"""
import argparse
import os
import resource
import shutil
import statistics
import tempfile
import time


def view_args(work):
    """The hide and show options of a `ctune run` worker's trials."""
    os.makedirs(os.path.join(work, "gap.work", "trials", "1"))
    os.makedirs(os.path.join(work, "gap.work", "cache"))
    files = ["gap.db.tokens", "gap.db", "gap.db-wal", "gap.db-shm", "gap.db.login-url",
             "gap.server.log"]
    for f in files:
        open(os.path.join(work, f), "w").close()
    args = ["--ns", "mount" if os.geteuid() == 0 else "user",
            "--hide", os.path.join(work, "gap.work")]
    for f in files:
        args += ["--hide", os.path.join(work, f)]
    for d in ("trials/1", "cache"):
        args += ["--show", os.path.join(work, "gap.work", d)]
    return args, os.path.join(work, "gap.work", "trials", "1")


class Sample:
    def __init__(self):
        self.cpu, self.faults, self.report, self.exit = [], [], [], []


def start(argv, devnull):
    """One start: (cpu s, minor faults, spawn -> pid report s, spawn -> reaped s)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    rp, wp = os.pipe()
    t0 = time.monotonic()
    pid = os.posix_spawn(argv[0], argv, {"PATH": "/usr/bin:/bin"}, setsid=True,
                         file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1),
                                       (os.POSIX_SPAWN_DUP2, wp, 3)])
    os.close(wp)
    os.read(rp, 64)
    t1 = time.monotonic()
    os.close(rp)
    _, st = os.waitpid(pid, 0)
    t2 = time.monotonic()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if st != 0:
        raise SystemExit("bench_supervise: %s exited with status %d" % (argv[0], st))
    return (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime,
            r1.ru_minflt - r0.ru_minflt, t1 - t0, t2 - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("bin", help="dir with ctune-supervise (build/bin)")
    ap.add_argument("--baseline", help="another build's bin dir, alternated start by start")
    ap.add_argument("--starts", type=int, default=400, help="starts of each (default 400)")
    a = ap.parse_args()
    a.bin = os.path.abspath(a.bin)
    if a.baseline:
        a.baseline = os.path.abspath(a.baseline)
    work = tempfile.mkdtemp(prefix="ctune-bench-supervise-")
    try:
        view, trial_dir = view_args(work)
        os.chdir(trial_dir)
        builds = [("this", a.bin)] + ([("baseline", a.baseline)] if a.baseline else [])
        devnull = os.open(os.devnull, os.O_WRONLY)
        argvs = {"true run directly": ["/bin/true"]}
        for name, d in builds:
            exe = os.path.join(d, "ctune-supervise")
            argvs[name] = ([exe, "--cpus", str(min(os.sched_getaffinity(0))), "--parent",
                            str(os.getpid()), "--report-fd", "3"] + view + ["--", "/bin/true"])
        samples = {k: Sample() for k in argvs}
        for k, argv in argvs.items():  # warm the page cache
            start(argv, devnull)
        with open("/proc/loadavg") as f:
            load0 = f.read().split()[0]
        for i in range(a.starts):
            keys = list(argvs)
            for k in (keys if i % 2 == 0 else keys[::-1]):
                cpu, faults, report, ex = start(argvs[k], devnull)
                s = samples[k]
                s.cpu.append(cpu)
                s.faults.append(faults)
                s.report.append(report)
                s.exit.append(ex)
        with open("/proc/loadavg") as f:
            load1 = f.read().split()[0]
        print("%d starts each, alternating; load average %s -> %s; trial view: %s namespace, "
              "%d paths hidden, 2 shown" % (a.starts, load0, load1, view[1], view.count("--hide")))
        print("  %-20s %14s %14s %20s %20s" % ("", "CPU ms/start", "minor faults",
                                              "spawn->report ms", "spawn->reaped ms"))
        for k, s in samples.items():
            rep = ("%6.2f (p90 %5.2f)" % (statistics.median(s.report) * 1e3,
                                          sorted(s.report)[int(len(s.report) * 0.9)] * 1e3))
            print("  %-20s %14.3f %14.1f %20s %9.2f (p90 %5.2f)"
                  % (k, statistics.mean(s.cpu) * 1e3, statistics.mean(s.faults), rep,
                     statistics.median(s.exit) * 1e3,
                     sorted(s.exit)[int(len(s.exit) * 0.9)] * 1e3))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
