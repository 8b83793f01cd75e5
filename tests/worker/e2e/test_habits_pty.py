#!/usr/bin/env python3
"""Results arrive as they are printed, from a program that never flushes
(docs/protocol.md#builtin-and-command): the trial's stdout is a pseudo-terminal, so C stdio (here
Python's, with PYTHONUNBUFFERED turned off by the trainable) line-buffers
it. The first result is stored while the trial still sleeps before its
second; ASHA stops the worse trials early (their processes print fewer than
max_t results). A trainable that says "stdout": "pipe" keeps a pipe: there
the same program's results all arrive at its exit. The pty case's trial
sleeps most of its 3 s: the pipe and ASHA cases run beside it on the
worker's second CPU."""
import concurrent.futures
import json
import os
import pwd
import signal
import sys
import time

from harness import command_config, main, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
TRIAL = os.path.join(HERE, "habits_trial.py")
PY = "/usr/bin/python3"
NOFLUSH = {"PYTHONUNBUFFERED": ""}  # an empty value: Python buffers again


def env_of(outdir, tid):
    with open(os.path.join(outdir, "env-%d-0.json" % tid)) as f:
        return json.load(f)


def pty(env, outdir):
    # 1. Prompt delivery: result 1 stored while the trial sleeps 1 s
    # before printing result 2.
    pause = 1.0
    exp = env.submit(command_config(
        "pty", [PY, TRIAL, "plain", outdir, "3", str(pause)],
        trainable={"type": "command", "argv": [PY, TRIAL, "plain", outdir, "3", str(pause)],
                   "env": NOFLUSH}))
    # trials are made at lease time: wait for the first
    tid = wait_for(lambda: env.trials(exp)[0]["id"], 10, "the lease", step=0.02)
    wait_for(lambda: env.results(tid), 10, "the first result", step=0.02)
    seen = time.time()
    res = env.results(tid)
    tr = env.trial(tid)
    # Seen while the trial still runs (its last result comes at 3 s).
    assert len(res) < 3 and tr["status"] == "RUNNING", (res, tr)
    e = env_of(outdir, tid)
    assert e["stdout_isatty"] is True and e["PYTHONUNBUFFERED"] == "", e
    delay = seen - tr["started_at"]
    print("first result stored %.2f s after the start (printed at ~%.1f s)" % (delay, pause))
    env.wait_experiment(exp, 20)
    # When the worker read each line (its time_total_s stamp): one by one,
    # as printed, not all at exit as through a block-buffered pipe.
    totals = [r.get("result", r)["time_total_s"] for r in env.results(tid)]
    print("with a pty: results read at %s s" % ", ".join("%.2f" % t for t in totals))
    assert len(totals) == 3, totals
    assert totals[0] < 2.5 * pause and totals[2] - totals[0] > 1.5 * pause, totals


def pipe(env, outdir):
    # 2. "stdout": "pipe": a pipe, block-buffered: everything at exit.
    pipe_pause = 0.25
    argv = [PY, TRIAL, "plain", outdir, "3", str(pipe_pause)]
    exp = env.submit(command_config(
        "pipe", argv, trainable={"type": "command", "argv": argv, "env": NOFLUSH,
                                 "stdout": "pipe"}))
    tid = wait_for(lambda: env.trials(exp)[0]["id"], 10, "the lease", step=0.02)
    env.wait_experiment(exp, 20)
    assert env_of(outdir, tid)["stdout_isatty"] is False
    # The worker stamps time_total_s when it reads a line. Through a pipe
    # all three lines come in one read at exit (printed at 0.25, 0.5 and
    # 0.75 s); through a pty they would be read 0.25 s apart. (Counting the
    # results at the first sight raced: the worker may send the first
    # line alone and the other two in the next batch.)
    totals = [r.get("result", r)["time_total_s"] for r in env.results(tid)]
    print("with a pipe: results read at %s s" % ", ".join("%.2f" % t for t in totals))
    assert len(totals) == 3, totals
    assert min(totals) >= 3 * pipe_pause - 0.05, totals
    assert max(totals) - min(totals) < 0.3, totals


def asha(env, outdir):
    # 3. ASHA stops the worse trials early: their processes are stopped.
    iters = 8
    argv = [PY, TRIAL, "plain", outdir, str(iters), "0.1"]
    exp = env.submit(command_config(
        "asha", argv, num_samples=3, max_concurrent_trials=1,
        trainable={"type": "command", "argv": argv, "env": NOFLUSH},
        scheduler={"type": "asha", "time_attr": "training_iteration", "max_t": iters,
                   "grace_period": 1, "reduction_factor": 2, "brackets": 1}))
    env.wait_experiment(exp, 40)
    stopped = 0
    for t in sorted(env.trials(exp), key=lambda t: t["id"]):
        # A trial that ASHA stopped at its result ends (and may end the
        # experiment) on the server at once; its process writes this file
        # as it exits, a moment later.
        path = os.path.join(outdir, "printed-%d" % t["id"])
        wait_for(lambda: os.path.exists(path), 10, "trial %d's process to exit" % t["id"])
        with open(path) as f:
            printed = int(f.read())
        print("trial %d: %s stopped_early=%s iteration %s, printed %d"
              % (t["id"], t["status"], t["stopped_early"], t["iteration"], printed))
        assert t["status"] == "TERMINATED", t
        if t["stopped_early"]:
            stopped += 1
            assert printed < iters, (t, printed)
            assert t["iteration"] < iters, t
    assert stopped >= 1, env.trials(exp)


def run_as(env, wa):
    # 4. Under --run-as the terminal is the trial's user's: a script that
    # writes to /dev/stdout (it reopens /dev/pts/N) works. Root only.
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        nobody = None
    if os.geteuid() == 0 and nobody:
        os.kill(wa.pid, signal.SIGTERM)  # the trial must go to the --run-as worker
        assert wa.p.wait(20) == 0
        os.chmod(env.tmp, 0o711)
        env.start_worker("nobody", "--cpus", "1", "--run-as", "nobody")
        script = 'echo "{\\"loss\\": 0.5}" > /dev/stdout'
        exp = env.submit(command_config("devstdout", ["sh", "-c", script]))
        env.wait_experiment(exp, 20)
        t = env.trials(exp)[0]
        assert t["status"] == "TERMINATED", t
        assert [r.get("result", r)["loss"] for r in env.results(t["id"])] == [0.5], t
        print("under --run-as nobody: /dev/stdout writable, 1 result")
    else:
        print("not root (or no user nobody): the --run-as case is skipped")


def body(env):
    if not os.access(PY, os.X_OK):
        print("SKIP: no %s" % PY)
        sys.exit(77)
    outdir = os.path.join(env.tmp, "out")
    os.mkdir(outdir)
    env.start_server()
    # Two CPUs, one per trial: the pty case's trial, which sleeps most of
    # its 3 s, runs beside the pipe and ASHA cases' trials (one at a time).
    wa = env.start_worker("a", "--cpus", "2")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        others = pool.submit(lambda: (pipe(env, outdir), asha(env, outdir)))
        try:
            pty(env, outdir)
        finally:
            others.result()  # re-raises their failure
    run_as(env, wa)


if __name__ == "__main__":
    main("habits_pty", body)
