#!/usr/bin/env python3
"""Ray's reporting habits (docs/protocol.md#results-the-worker-fills-in): a script that prints bare {"loss": L}
lines gets every result stored, numbered 1..N by the worker, with
time_this_iter_s, time_total_s and timestamp filled in; the trial sees its
identity and where it starts in its environment (CTUNE_TRIAL_NAME, ...,
PYTHONUNBUFFERED=1), and {trial_name}-style placeholders in its env. After a resume (the worker is killed -9, a new one
leases the trial again and restores its checkpoint) the numbering continues
from the checkpoint (CTUNE_START_ITERATION) and time_total_s from the stored
result's (the lease's start_time_total_s, CTUNE_START_TIME_TOTAL_S): it
never goes backwards."""
import glob
import json
import os
import sys
import time

from harness import command_config, main, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
TRIAL = os.path.join(HERE, "habits_trial.py")
PY = "/usr/bin/python3"
# Killed at result 3 or later, the trial must still have results to print:
# 10 at 0.1 s leave it 0.7 s.
ITERS = 10
PAUSE = 0.1


def envs(outdir):
    out = []
    for p in sorted(glob.glob(os.path.join(outdir, "env-1-*.json"))):
        with open(p) as f:
            out.append(json.load(f))
    return out


def body(env):
    if not os.access(PY, os.X_OK):
        print("SKIP: no %s" % PY)
        sys.exit(77)
    outdir = os.path.join(env.tmp, "out")
    os.mkdir(outdir)
    env.start_server("--lease-timeout", "2")
    w = env.start_worker("a", "--cpus", "1")
    argv = [PY, TRIAL, "auto", outdir, str(ITERS), str(PAUSE)]
    exp = env.submit(command_config(
        "habits", argv,
        trainable={"type": "command", "argv": argv,
                   # the worker's own placeholders, in env too
                   "env": {"RUN_DIR": "{experiment_id}/{trial_name}/{trial_id}"}},
        scheduler={"type": "fifo", "time_attr": "training_iteration", "max_t": ITERS}))
    # Kill the worker once a few results and a checkpoint past them are stored.
    # trials are made at lease time: trial 1 exists once leased
    wait_for(lambda: env.trials(exp) and len(env.results(1)) >= 3 and ckpt_iteration(env) >= 2, 20,
             "results and a checkpoint")
    first = envs(outdir)
    assert len(first) == 1, first
    e0 = first[0]
    name = env.trial(1)["name"]
    assert e0 == {"CTUNE_TRIAL_ID": "1", "CTUNE_TRIAL_NAME": name, "CTUNE_EXPERIMENT_ID": str(exp),
                  "CTUNE_TIME_ATTR": "training_iteration", "CTUNE_METRIC": "loss",
                  "CTUNE_MODE": "min", "CTUNE_START_ITERATION": "0",
                  "CTUNE_START_TIME_TOTAL_S": "0", "CTUNE_RESUME": "0",
                  "PYTHONUNBUFFERED": "1", "stdout_isatty": True,
                  "RUN_DIR": "%d/%s/1" % (exp, name)}, e0
    w.kill9()
    wait_for(lambda: not env.trial_processes(), 3, "the trial to die with its worker")
    ck = ckpt_iteration(env)
    print("worker killed; checkpoint at iteration %d, %d result(s) stored"
          % (ck, len(env.results(1))))
    env.start_worker("b", "--cpus", "1")
    t = env.wait_experiment(exp, 40)
    tr = env.trials(exp)[0]
    assert tr["status"] == "TERMINATED", tr
    res = [r.get("result", r) for r in env.results(1)]
    its = [r["training_iteration"] for r in res]
    assert its == list(range(1, ITERS + 1)), res
    for r in res:
        assert r["loss"] == 1.0 / r["training_iteration"], r
        assert r["time_this_iter_s"] > 0, r
        assert isinstance(r["timestamp"], int) and abs(r["timestamp"] - time.time()) < 120, r
    totals = [r["time_total_s"] for r in res]
    assert all(b >= a for a, b in zip(totals, totals[1:])), totals
    assert totals[-1] >= (ITERS - 1) * PAUSE, totals
    second = envs(outdir)
    assert len(second) == 2, second
    e1 = second[1]
    assert e1["CTUNE_RESUME"] == "1" and e1["CTUNE_START_ITERATION"] == str(ck), (e1, ck)
    at_ck = [r for r in res if r["training_iteration"] == ck][0]
    # The lease's start_time_total_s is the stored result's, exactly.
    assert float(e1["CTUNE_START_TIME_TOTAL_S"]) == at_ck["time_total_s"], (e1, at_ck)
    print("results 1..%d, time_total_s %s; resumed at %d from %.3f s"
          % (ITERS, ["%.2f" % x for x in totals], ck, at_ck["time_total_s"]))
    del t


def ckpt_iteration(env):
    import urllib.request
    req = urllib.request.Request(env.url + "/api/v1/trials/1/checkpoint", method="GET",
                                 headers={"Authorization": "Bearer " + env.admin_token})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return int(r.headers.get("X-Ctune-Iteration") or 0)
    except Exception:
        return 0


if __name__ == "__main__":
    main("habits_results", body)
