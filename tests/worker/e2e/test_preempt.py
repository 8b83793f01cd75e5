#!/usr/bin/env python3
"""A preemption notice (docs/worker.md#preemption): a worker started with
--preemption-grace-s 5 is SIGTERMed while it runs three trials: the builtin
ctune-train (it does not catch SIGUSR1: stopped at once, it checkpoints
mid-epoch on SIGTERM) and a Python command trainable using the ctune
helpers twice: one with ctune.on_checkpoint_request (SIGUSR1: it saves at
its next report, then the worker stops it), one that saved a checkpoint at
iteration 7 only and dies on SIGTERM. Within the 5 s every trial's checkpoint is
uploaded and its lease released with reason "preempted": each is PENDING
with 0 failures counted, its "preempted" attempt event says how much work
was lost (0 for the two that checkpointed at the notice, the iterations
past its last periodic checkpoint for the third), and the experiments count
the preemptions (the API and `ctune status`). A second worker resumes each from that checkpoint and
finishes it, while its --preemption-notice command answers FALSE. Then
that command says TRUE, and a third worker's notice file appears: each
releases the trial it runs as preempted. The old drain (SIGTERM without the
flag) is worker_e2e_drain_release."""
import os
import signal
import subprocess
import sys
import time

from harness import SKIP, command_config, main, result_values, wait_for

DATA = "/usr/share/datasets/fashion-mnist"
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
GRACE_S = 5
PY_ITERS = 80
# Enough epochs that the builtin trial is still running once the Python
# ones have passed iteration 9 (a release ctune-train does 3 of 200 samples
# in about 0.8 s, start included: sooner than Python reaches 9; 30 of
# 1,000 last about 2 s).
BUILTIN_ITERS = 30

TRAINABLE = r"""
import time
import ctune

cfg = ctune.get_config({"how": "request"})
state = ctune.load_checkpoint() or {"i": 0}
if cfg["how"] == "request":
    ctune.on_checkpoint_request(lambda: dict(state))
pause = 0.005 if ctune.is_resumed() else 0.05  # a resumed attempt just finishes
while state["i"] < %d:
    time.sleep(pause)
    state["i"] += 1
    periodic = cfg["how"] == "periodic" and state["i"] == 7
    ctune.report({"loss": 1.0 / state["i"], "training_iteration": state["i"]},
                 checkpoint=dict(state) if periodic else None)
""" % PY_ITERS


def attempts(env, tid, kind):
    return [a for a in env.trial(tid)["attempts"] if a["kind"] == kind]


def body(env):
    if not os.access(os.path.join(env.bin, "ctune-train"), os.X_OK) or not os.path.isdir(DATA):
        print("SKIP: needs ctune-train and %s" % DATA)
        sys.exit(SKIP)
    env.start_server()
    script = os.path.join(env.tmp, "trainable.py")
    with open(script, "w") as f:
        f.write(TRAINABLE)
    w1 = env.start_worker("w1", "--cpus", "2", "--preemption-grace-s", str(GRACE_S))
    builtin = env.submit({
        "name": "builtin", "metric": "loss", "mode": "min", "num_samples": 1, "seed": 3,
        "param_space": {"lr": 0.05, "batch_size": 64, "l1": 32, "l2": 16},
        "scheduler": {"type": "fifo", "time_attr": "training_iteration",
                      "max_t": BUILTIN_ITERS},
        "resources_per_trial": {"cpu": 0.5},
        "trainable": {"type": "builtin", "model": "mlp", "dataset": "fashion-mnist",
                      "data_dir": DATA, "train_limit": 1000}})
    cfg = command_config("python", ["/usr/bin/python3", script],
                         param_space={"how": {"grid_search": ["request", "periodic"]}})
    cfg["resources_per_trial"] = {"cpu": 0.5}  # three on two CPUs
    cfg["trainable"]["env"] = {"PYTHONPATH": os.path.join(REPO, "python")}
    py = env.submit(cfg)

    def ready():
        ts = env.trials(builtin) + env.trials(py)
        return (len(ts) == 3 and all(t["status"] == "RUNNING" for t in ts) and
                all((t["iteration"] or 0) >= (1 if t["experiment_id"] == builtin else 9)
                    for t in ts) and ts)
    ts = wait_for(ready, 60, "three trials running with results", step=0.02)
    how = {t["id"]: ("builtin" if t["experiment_id"] == builtin else t["config"]["how"])
           for t in ts}
    t0 = time.time()
    os.kill(w1.pid, signal.SIGTERM)
    wait_for(lambda: all(env.trial(t)["status"] == "PENDING" for t in how), GRACE_S,
             "every trial released within the %d s grace" % GRACE_S, step=0.02)
    released = time.time() - t0
    rc = w1.p.wait(GRACE_S + 1 - (time.time() - t0))
    exited = time.time() - t0
    print("released all three in %.2f s, worker exited %d after %.2f s" % (released, rc, exited))
    assert rc == 0, w1.log()[-3000:]
    log = w1.log()
    assert "preemption notice (SIGTERM)" in log and "1 trial(s) asked to checkpoint" in log, \
        log[-3000:]
    assert "undelivered" not in log, log[-3000:]

    lost = {}
    for tid in how:
        t = env.trial(tid)
        assert t["num_failures"] == 0 and t["has_checkpoint"], t
        ev = attempts(env, tid, "preempted")
        # A lease granted during the drain is given back as a plain release.
        assert len(ev) == 1 and ev[0]["data"]["attempt"] == 1, t["attempts"]
        d = ev[0]["data"]
        assert t0 - 1 <= d["notice_at"] <= t0 + 1, (d, t0)
        lost[tid] = (result_values(env.results(tid))[-1], d)
    for e in (builtin, py):
        x = env.experiment(e)
        mine = [tid for tid in how if (how[tid] == "builtin") == (e == builtin)]
        assert x["preemptions"]["count"] == len(mine), x["preemptions"]
        assert x["preemptions"]["lost_iterations"] == sum(
            lost[tid][1]["lost_iterations"] for tid in mine), x["preemptions"]

    # ctune status says it under each experiment's line.
    out = subprocess.run([os.path.join(env.bin, "ctune"), "status", "--server", env.url],
                         env=dict(os.environ, CTUNE_TOKEN=env.admin_token), capture_output=True,
                         text=True, timeout=30).stdout
    print(out)
    assert out.count("preempted: ") == 2 and "preempted: 2 times, %g iterations" % (
        env.experiment(py)["preemptions"]["lost_iterations"]) in out, out

    # Each resumes on a second worker from the checkpoint taken at the notice.
    # Its --preemption-notice command says FALSE meanwhile: no notice.
    flag = os.path.join(env.tmp, "notice")
    with open(flag, "w") as f:
        f.write("FALSE\n")
    w2 = env.start_worker("w2", "--cpus", "2", "--preemption-notice", "cat " + flag,
                          "--preemption-poll-ms", "100", "--preemption-grace-s", str(GRACE_S))
    for e in (builtin, py):
        x = env.wait_experiment(e, 60)
        assert x["status"] == "TERMINATED" and x["counts"]["TERMINATED"] == x["num_created"], x
    for tid, (last, d) in lost.items():
        t = env.trial(tid)
        assert t["status"] == "TERMINATED" and t["num_failures"] == 0, t
        leased = [a for a in attempts(env, tid, "leased") if a["data"]["worker_id"] == 2]
        # w2's FALSE was no notice: it ended every trial it leased.
        assert [a["kind"] for a in t["attempts"] if a["data"]["worker_id"] == 2] == ["leased"], \
            t["attempts"]
        ck = leased[0]["data"]["iteration"]
        print("%s (trial %d): last result %s at the notice, resumed from %s, lost %s" %
              (how[tid], tid, last, ck, d))
        assert len(leased) == 1 and "resuming from its checkpoint" in leased[0]["reason"], leased
        assert d["lost_iterations"] == last - ck, (d, last, ck)
        if how[tid] == "periodic":
            assert ck == 7 and d["lost_iterations"] > 0 and d["lost_seconds"] > 0, (ck, d)
        else:
            # Checkpointed at the notice: at most the one report that may
            # pass between its checkpoint's line and the SIGTERM is lost.
            assert d["lost_iterations"] <= 1 and ck >= last - 1, (how[tid], d, ck, last)
        its = result_values(env.results(tid))
        assert its[-1] == (BUILTIN_ITERS if how[tid] == "builtin" else PY_ITERS), (tid, its)

    # The polled notices: w2's command says TRUE, then a third worker's
    # file:PATH appears; each releases the running trial as preempted.
    cfg["param_space"] = {"how": "request"}
    exp = env.submit(dict(cfg, name="polled"))
    for n, (w, notice) in enumerate(((w2, lambda: open(flag, "w").write("TRUE\n")), (None, None))):
        if w is None:
            path = os.path.join(env.tmp, "notice-file")
            w = env.start_worker("w3", "--cpus", "2", "--preemption-notice", "file:" + path,
                                 "--preemption-poll-ms", "100", "--preemption-grace-s",
                                 str(GRACE_S))
            notice = (lambda p=path: open(p, "w").close())
        t = wait_for(lambda: (lambda x: x[0]["status"] == "RUNNING" and
                              len(env.results(x[0]["id"])) >= 3 * (n + 1) and x[0])(
            env.trials(exp)), 30, "the polled trial running (%d)" % n, step=0.02)
        t0 = time.time()
        notice()
        assert w.p.wait(GRACE_S + 1) == 0, w.log()[-3000:]
        print("notice %d: worker exited %.2f s after it" % (n, time.time() - t0))
        ev = attempts(env, t["id"], "preempted")
        assert len(ev) == n + 1 and env.trial(t["id"])["num_failures"] == 0, ev
        assert env.trial(t["id"])["status"] == "PENDING"
        assert "--preemption-notice" in w.log() or "notice file" in w.log(), w.log()[-2000:]


if __name__ == "__main__":
    main("preempt", body)
