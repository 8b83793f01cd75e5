"""Trainable for the test_habits_* tests, written the way a Ray Tune user
writes one: it prints bare metric dicts and leaves the numbering and the
clock to the worker.

usage: habits_trial.py MODE OUTDIR ITERS PAUSE [KEY]
  MODE auto:   prints {"loss": L} (no training_iteration), checkpoints the
               count of results after each one, resumes from it.
  MODE plain:  prints {"training_iteration": i, "loss": L} with
               sys.stdout.write and never flushes (C stdio's habit).
  MODE metric: prints {"KEY": 0.5} lines (KEY default "acc").
Every attempt first writes what the worker put in its environment to
OUTDIR/env-<trial id>-<n>.json; it writes OUTDIR/printed-<trial id> (the
number of results printed) on SIGTERM or at the end."""
import json
import os
import signal
import sys
import time

mode, outdir, iters, pause = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
key = sys.argv[5] if len(sys.argv) > 5 else "acc"
tid = int(os.environ["CTUNE_TRIAL_ID"])
names = ("CTUNE_TRIAL_ID", "CTUNE_TRIAL_NAME", "CTUNE_EXPERIMENT_ID", "CTUNE_TIME_ATTR",
         "CTUNE_METRIC", "CTUNE_MODE", "CTUNE_START_ITERATION", "CTUNE_START_TIME_TOTAL_S",
         "CTUNE_RESUME", "PYTHONUNBUFFERED", "RUN_DIR")
n = 0
while os.path.exists(os.path.join(outdir, "env-%d-%d.json" % (tid, n))):
    n += 1
info = {k: os.environ.get(k) for k in names}
info["stdout_isatty"] = os.isatty(1)
with open(os.path.join(outdir, "env-%d-%d.json.tmp" % (tid, n)), "w") as f:
    json.dump(info, f)
os.rename(os.path.join(outdir, "env-%d-%d.json.tmp" % (tid, n)),
          os.path.join(outdir, "env-%d-%d.json" % (tid, n)))

printed = 0


def done(*_):
    try:
        sys.stdout.flush()
    except (OSError, RuntimeError):
        # RuntimeError: SIGTERM landed inside a write to stdout, which
        # cannot be re-entered; what it held is lost with the process.
        pass
    path = os.path.join(outdir, "printed-%d" % tid)
    with open(path + ".tmp", "w") as f:  # whole or absent: the test waits for it
        f.write(str(printed))
    os.replace(path + ".tmp", path)
    os._exit(0)


signal.signal(signal.SIGTERM, done)

ckpt = os.path.join(os.environ["CTUNE_CHECKPOINT_DIR"], "checkpoint.bin")
i = 0
if os.environ.get("CTUNE_RESUME") == "1" and os.path.exists(ckpt):
    with open(ckpt) as f:
        i = int(f.read())
while i < iters:
    time.sleep(pause)
    i += 1
    if mode == "auto":
        print(json.dumps({"loss": 1.0 / i}))
        with open(ckpt + ".tmp", "w") as f:
            f.write(str(i))
        os.rename(ckpt + ".tmp", ckpt)
    elif mode == "plain":
        sys.stdout.write(json.dumps({"training_iteration": i, "loss": 0.1 * tid + 1.0 / i}) + "\n")
    else:
        print(json.dumps({key: 0.5}))
    printed += 1
done()
