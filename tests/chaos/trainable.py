#!/usr/bin/python3
"""Deterministic command trainable for the chaos tests.

For iteration i its result is a pure function of (config, i) (value_of below,
which the tests import to recompute every stored value bit for bit). Every
iteration it prints one result line, then replaces its checkpoint (temporary
file + rename, as docs/protocol.md#builtin-and-command asks). With CTUNE_RESUME=1 it resumes
after the checkpoint's iteration. SIGTERM: exit 0 (the checkpoint is already
on disk). When CHAOS_LEDGER names a folder it appends one line per event to
<folder>/<trial id>.log, so a test can tell which process produced what.

usage: trainable.py MAX_ITER
environment: CHAOS_SLEEP (seconds per iteration, default 0.2), and the
worker's CTUNE_CONFIG, CTUNE_TRIAL_ID, CTUNE_CHECKPOINT_DIR, CTUNE_RESUME.
"""
import json
import math
import os
import signal
import sys
import time


def value_of(config, i):
    """The loss of a trial with this config at iteration i (i >= 1)."""
    x = float(config.get("x", 0.5))
    y = float(config.get("y", 0.5))
    return (x - 0.3) ** 2 + (1.0 + y) / i + 0.01 * math.sin(7.0 * i + 13.0 * x)


def score_of(config, i):
    """A second metric, so more than one number per result is checked."""
    return 1.0 / (1.0 + value_of(config, i))


def ledger(line):
    d = os.environ.get("CHAOS_LEDGER")
    # A gang trial's other members (RANK >= 1) produce nothing of the trial's.
    if not d or os.environ.get("RANK", "0") != "0":
        return
    path = os.path.join(d, "%s.log" % os.environ.get("CTUNE_TRIAL_ID", "0"))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def on_term(signum, frame):
    ledger("%d term" % os.getpid())
    os._exit(0)


def main():
    max_iter = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    pause = float(os.environ.get("CHAOS_SLEEP", "0.2"))
    config = json.loads(os.environ.get("CTUNE_CONFIG", "{}"))
    ckdir = os.environ.get("CTUNE_CHECKPOINT_DIR", ".")
    ckpt = os.path.join(ckdir, "checkpoint.bin")
    pid = os.getpid()
    signal.signal(signal.SIGTERM, on_term)
    start = 1
    if os.environ.get("CTUNE_RESUME") == "1":
        try:
            with open(ckpt) as f:
                start = int(json.load(f)["iteration"]) + 1
        except (OSError, ValueError, KeyError, TypeError) as e:
            ledger("%d bad_checkpoint %s" % (pid, e))
            sys.stderr.write("CTUNE_RESUME=1 but no readable checkpoint: %s\n" % e)
            sys.exit(4)
    ledger("%d start %d %s" % (pid, start, ckdir))
    for i in range(start, max_iter + 1):
        time.sleep(pause)
        r = {"training_iteration": i, "loss": value_of(config, i),
             "score": score_of(config, i), "pid": pid}
        # repr-exact: json prints floats with Python's shortest round-trip repr.
        sys.stdout.write(json.dumps(r) + "\n")
        sys.stdout.flush()
        ledger("%d result %d" % (pid, i))
        tmp = ckpt + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"iteration": i, "pid": pid, "dir": ckdir}, f)
        os.rename(tmp, ckpt)
    ledger("%d done" % pid)


if __name__ == "__main__":
    main()
