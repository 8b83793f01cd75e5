#!/usr/bin/env python3
"""ASHA with promotion and HyperBand with real ctune-worker processes (issue
13): a trial paused on worker A is resumed from its checkpoint on worker B.

Worker A runs alone until the trial that will be promoted (the best by
construction: its loss depends on its creation index) is PAUSED, then drains
(SIGTERM); worker B runs the rest. The promoted trial's first result after
the resume comes from B's work dir and its iteration continues from the
checkpoint it read (not 1). Every trial ends TERMINATED.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ctune_e2e import BIN_DIR, Runner, Server, harness, tmpdir  # noqa: E402

TRAINABLE = r"""
import json, os, sys, time
idx = int(os.environ["CTUNE_TRIAL_NAME"].rsplit("_", 1)[1])
best = int(sys.argv[1])
ckdir = os.environ["CTUNE_CHECKPOINT_DIR"]
where = ckdir + " " + os.getcwd()
tag = 1 if "/wA/" in where else 2 if "/wB/" in where else 0  # results keep numbers
ck = os.path.join(ckdir, "checkpoint.bin")
state = {"iteration": 0}
came_from = None
if os.environ.get("CTUNE_RESUME") == "1":
    with open(ck) as f:
        state = json.load(f)
    came_from = state["iteration"]
for it in range(state["iteration"] + 1, 10):
    time.sleep(0.03)
    r = {"training_iteration": it, "loss": (abs(idx - best) + 1.0) / it, "w": tag}
    if came_from is not None:
        r["resumed_from_iteration"] = came_from
        came_from = None
    with open(ck + ".tmp", "w") as f:
        json.dump({"iteration": it}, f)
    os.rename(ck + ".tmp", ck)
    print(json.dumps(r), flush=True)
"""


def start_worker(s, d, name):
    return harness.start_worker(
        BIN_DIR, "http://%s:%d" % (s.host, s.port),
        ["--cpus", "1", "--memory-mb", "1024", "--token-file", s.db + ".tokens", "--name", name,
         "--work-dir", os.path.join(d, name), "--poll-ms", "50", "--no-cgroup"],
        log_path=os.path.join(d, name + ".log"), output="null")


def stop_worker(w):
    w.stop(timeout=20)


def run(sched, n, best):
    # A drained worker's release of a trial that reported nothing may not
    # arrive before it exits: a short lease timeout requeues it quickly.
    s = Server(args=["--lease-timeout", "3", "--heartbeat-interval", "0.5"])
    d = tmpdir()
    script = os.path.join(d, "trainable.py")
    with open(script, "w") as f:
        f.write(TRAINABLE)
    cfg = {"name": "pw", "metric": "loss", "mode": "min", "num_samples": n, "seed": 3,
           "param_space": {"lr": {"type": "loguniform", "lower": 1e-4, "upper": 1e-1}},
           "scheduler": sched, "resources_per_trial": {"cpu": 1},
           "trainable": {"type": "command", "argv": ["/usr/bin/python3", script, str(best)]}}
    eid = s.ok("POST", "/api/v1/experiments", cfg, status=201)["id"]
    name = "pw_%05d" % best

    def trials():
        return s.ok("GET", "/api/v1/experiments/%d/trials" % eid)["trials"]

    def the_best_paused():
        return [t for t in trials() if t["name"] == name and t["status"] == "PAUSED"]

    wa = start_worker(s, d, "wA")
    wb = None
    try:
        tid = harness.wait_for(name + " PAUSED on wA", the_best_paused, 40, step=0.05)[0]["id"]
        stop_worker(wa)
        wb = start_worker(s, d, "wB")
        harness.wait_for("the experiment to end", lambda: s.ok(
            "GET", "/api/v1/experiments/%d" % eid)["status"] != "RUNNING", 60, step=0.05)
        ex = s.ok("GET", "/api/v1/experiments/%d" % eid)
        ts = trials()
        assert ex["status"] == "TERMINATED", ex
        assert all(t["status"] == "TERMINATED" for t in ts), ts
        res = s.ok("GET", "/api/v1/trials/%d/results" % tid)["results"]
        before = [r for r in res if r.get("w") == 1]
        resumed = [r for r in res if "resumed_from_iteration" in r and r.get("w") == 2]
        assert before and all(r.get("w") in (1, 2) for r in res), res
        assert resumed, res  # promoted from its checkpoint on the other worker
        r = resumed[0]
        assert r["training_iteration"] == r["resumed_from_iteration"] + 1 > 1, r
        assert r["resumed_from_iteration"] >= before[-1]["training_iteration"], (r, before)
        ev = s.ok("GET", "/api/v1/trials/%d" % tid)["events"]
        assert "promoted" in [x["kind"] for x in ev] or "resumed" in [x["kind"] for x in ev], ev
        return ts, [s.ok("GET", "/api/v1/trials/%d" % t["id"]) for t in ts]
    finally:
        stop_worker(wa)
        if wb:
            stop_worker(wb)
        s.stop()


def test_asha_promotion_two_workers():
    ts, detail = run({"type": "asha", "promotion": True, "max_t": 9, "grace_period": 1,
                      "reduction_factor": 3}, 6, 0)
    kinds = [x["kind"] for t in detail for x in t["events"]]
    assert kinds.count("promoted") >= 2, kinds
    assert any("never promoted" in (t["reason"] or "") for t in detail), detail


def test_hyperband_two_workers():
    ts, detail = run({"type": "hyperband", "max_t": 9, "reduction_factor": 3}, 8, 3)
    # Bracket 1's 5 trials are ranked at t=3 and the bottom 3 stopped. A
    # trial that ran on while the rung filled is stopped at its next result
    # (CI saw "stopped at t=4: rank 3 of 5 in bracket 1 at t=3"), so the
    # ranking's rung is checked, not the time value of the stop.
    halved = [t for t in detail if re.match(r"stopped at t=\d+: rank [345] of 5 in bracket 1 "
                                            r"at t=3, only the top 2 continue$",
                                            t["reason"] or "")]
    assert len(halved) == 3, [(t["name"], t["reason"]) for t in detail]


if __name__ == "__main__":
    r = Runner()
    r.run(test_asha_promotion_two_workers)
    r.run(test_hyperband_two_workers)
    r.done()
