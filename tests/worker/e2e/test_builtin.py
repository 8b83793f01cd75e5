#!/usr/bin/env python3
"""ctune-worker with the real ctune-train on a slice of Fashion-MNIST:
concurrent trials pinned to distinct CPUs with --threads 1; then kill -9 of
the worker (its trials die with it, as when a machine dies): the server's lease
expires, a second worker leases the trials, downloads their checkpoints and
resumes them with --resume; every epoch is reported exactly once."""
import json
import os
import re
import sys

from harness import SKIP, cpus_allowed, main, result_values, wait_for

DATA = "/usr/share/datasets/fashion-mnist"
MAX_T = 6


def worker_pids(proc):
    return {int(t): int(p) for t, p in re.findall(r"trial (\d+) running: pid (\d+)", proc.log())}


def first_iteration(path):
    with open(path) as f:
        for line in f:
            if line.startswith("{"):
                return json.loads(line)["training_iteration"]
    return None


def body(env):
    if not os.access(os.path.join(env.bin, "ctune-train"), os.X_OK) or not os.path.isdir(DATA):
        print("SKIP: needs ctune-train and %s" % DATA)
        sys.exit(SKIP)
    env.start_server("--lease-timeout", "2")
    w1 = env.start_worker("w1", "--cpus", "2")
    exp = env.submit({
        "name": "fmnist-resume", "metric": "loss", "mode": "min", "num_samples": 2,
        "max_concurrent_trials": 2, "seed": 3,
        "param_space": {"lr": {"type": "choice", "values": [0.05, 0.1]}, "batch_size": 64,
                        "l1": 256, "l2": 128},
        "scheduler": {"type": "fifo", "time_attr": "training_iteration", "max_t": MAX_T},
        "resources_per_trial": {"cpu": 1},
        "trainable": {"type": "builtin", "model": "mlp", "dataset": "fashion-mnist",
                      "data_dir": DATA, "train_limit": 10000}})

    pids = wait_for(lambda: (lambda p: len(p) == 2 and p)(worker_pids(w1)), 20,
                    "two ctune-train processes")
    allowed = {}
    for tid, pid in pids.items():
        def cmdline():
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")[:-1]
            return argv[0].endswith(b"ctune-train") and argv  # past the exec wrapper
        argv = wait_for(cmdline, 5, "pid %d to exec ctune-train" % pid)
        assert argv[argv.index(b"--threads") + 1] == b"1", argv
        assert argv[argv.index(b"--epochs") + 1] == str(MAX_T).encode(), argv
        assert argv[-2] == b"--config", argv  # the sampled config wins
        allowed[tid] = cpus_allowed(pid)
    print("ctune-train affinity:", allowed)
    assert sorted(allowed.values()) == ["0", "1"], allowed

    # Kill the machine once a trial has a checkpoint of epoch >= 2 on the
    # server. (Not "both": on a busy machine one CPU can be so much slower
    # that the other trial finishes first.)
    def checkpointed():
        ts = env.trials(exp)
        return any(t["status"] == "RUNNING" and t.get("has_checkpoint") and
                   (t["iteration"] or 0) >= 2 for t in ts) and ts
    ts = wait_for(checkpointed, 120, "a trial to checkpoint epoch >= 2", step=0.02)
    w1.kill9()
    # The trials die with their worker (PR_SET_PDEATHSIG): nothing is left
    # running unsupervised while the server hands them to another worker.
    wait_for(lambda: not env.trial_processes(), 3, "ctune-train to die with its worker")
    resumable = {t["id"]: t["iteration"] for t in ts
                 if t["status"] == "RUNNING" and t.get("has_checkpoint")}
    print("killed worker 1; trials with a checkpoint on the server, at epochs", resumable)
    assert resumable and all(i < MAX_T for i in resumable.values()), ts

    w2 = env.start_worker("w2", "--cpus", "2")
    env.wait_experiment(exp, 180)
    for t in env.trials(exp):
        assert t["status"] == "TERMINATED", t
        its = result_values(env.results(t["id"]))
        assert its == list(range(1, MAX_T + 1)), "trial %d results %r" % (t["id"], its)
        if t["id"] not in resumable:
            continue
        d = env.trial_dir("w2", t["id"])
        with open(os.path.join(d, "stderr.log")) as f:
            err = f.read()
        assert "resumed from" in err, err
        first = first_iteration(os.path.join(d, "stdout.log"))
        print("trial %d: killed at epoch %d, resumed on worker 2 at epoch %d"
              % (t["id"], resumable[t["id"]], first))
        assert first is not None and first > 1, "trial %d restarted from scratch" % t["id"]
    assert w2.alive()


main("builtin", body)
