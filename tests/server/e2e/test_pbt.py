"""PBT and median stopping on the real daemon (docs/scheduling.md#pbt
and docs/scheduling.md#median-stopping); test_pbt_workers.py runs PBT with a real
ctune-worker.

- test_pbt_kill9_same_decisions: a scripted fake worker drives the same
  result sequence through the REST API twice; one server is killed with -9
  in the middle and restarted. Every decision, config and event is the same.
- test_median_stopping: stop with Ray's rule and its reason; the state is
  rebuilt from the records after a kill -9 (the next bad trial is still
  judged against the others' results); hard_stop false pauses and resumes.
"""
import json
import math
import os
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ctune_e2e import Runner, Server, lease, register, report  # noqa: E402

def pbt_cfg(script, n=4):
    return {"name": "pbt", "metric": "acc", "mode": "max", "num_samples": 1, "seed": 5,
            "param_space": {"lr": {"grid_search": [0.0001, 0.001, 0.01, 0.5][:n]}},
            "scheduler": {"type": "pbt", "perturbation_interval": 2,
                          "hyperparam_mutations": {
                              "lr": {"type": "loguniform", "lower": 1e-5, "upper": 1}}},
            "resources_per_trial": {"cpu": 0.5},
            "trainable": {"type": "command", "argv": ["/usr/bin/python3", script]}}


def put_ckpt(s, tid, it, data):
    h = {"X-Ctune-Iteration": str(it), "X-Ctune-Crc32": "%08x" % zlib.crc32(data),
         "Content-Type": "application/octet-stream"}
    st, b, _ = s.request("PUT", "/api/v1/trials/%d/checkpoint" % tid, data, headers=h)
    return st


def acc_of(lr, it):
    return round(-abs(math.log10(lr) + 2.0) + 0.01 * it, 9)


def drive_pbt(kill_at=None):
    """A scripted worker: 4 trials leased at once, one result each in id
    order per round, a checkpoint after each result; a trial answered stop
    (exploited) completes and is leased again, resuming from the iteration of
    the checkpoint it got. Returns everything the server decided."""
    s = Server()
    eid = s.ok("POST", "/api/v1/experiments", pbt_cfg("/bin/true"), status=201)["id"]
    w = register(s, cpu=8)
    live = {}
    for _ in range(4):
        t = lease(s, w)
        live[t["id"]] = {"it": 0, "lr": t["config"]["lr"]}
    decisions, step = [], 0
    while live:
        # Each round the best trials report (and checkpoint) first, so a
        # donor's stored checkpoint is not behind the trial that clones it
        # (the server answers a time value a trial already reported with the
        # stored decision: see the report).
        order = sorted(live, key=lambda i: (-acc_of(live[i]["lr"], live[i]["it"] + 1), i))
        for tid in order:
            step += 1
            if step == kill_at:
                s.kill()
                s.start()
            st = live[tid]
            st["it"] += 1
            d = report(s, tid, training_iteration=st["it"], acc=acc_of(st["lr"], st["it"]))
            decisions.append((tid, st["it"], d))
            if d == "continue":
                assert put_ckpt(s, tid, st["it"], json.dumps(
                    {"trial": tid, "iteration": st["it"]}).encode()) in (200, 201, 204)
            if st["it"] >= 8 and d == "continue":
                s.ok("POST", "/api/v1/trials/%d/complete" % tid, {})
                del live[tid]
            elif d == "stop":
                s.ok("POST", "/api/v1/trials/%d/complete" % tid, {})
                t = lease(s, w)
                assert t is not None and t["id"] == tid, t
                assert t["has_checkpoint"], t
                _, data, _ = s.get("/api/v1/trials/%d/checkpoint" % tid, raw=True)
                got = json.loads(data)
                assert got["trial"] != tid and got["iteration"] == t["checkpoint_iteration"], (got, t)
                live[tid] = {"it": int(t["checkpoint_iteration"]), "lr": t["config"]["lr"]}
    trials = s.ok("GET", "/api/v1/experiments/%d/trials" % eid)["trials"]
    detail = [s.ok("GET", "/api/v1/trials/%d" % t["id"]) for t in trials]
    out = {"decisions": decisions,
           "configs": [t["config"] for t in trials],
           "events": [[(x["kind"], x["reason"], x.get("data")) for x in t["events"]]
                      for t in detail],
           "status": s.ok("GET", "/api/v1/experiments/%d" % eid)["status"]}
    s.stop()
    return out


def test_pbt_kill9_same_decisions():
    a = drive_pbt()
    assert a["status"] == "TERMINATED", a["status"]
    n_exploits = sum(1 for evs in a["events"] for e in evs if e[0] == "exploited")
    assert n_exploits >= 2, a["events"]
    b = drive_pbt(kill_at=14)
    assert b["decisions"] == a["decisions"], (a["decisions"], b["decisions"])
    assert b["configs"] == a["configs"]
    assert b["events"] == a["events"]


def median_cfg(hard_stop=True, n=4, min_samples=3):
    return {"name": "med", "metric": "loss", "mode": "min", "num_samples": n, "seed": 3,
            "param_space": {"lr": {"type": "loguniform", "lower": 1e-4, "upper": 1e-1}},
            "scheduler": {"type": "median_stopping", "grace_period": 1,
                          "min_samples_required": min_samples, "hard_stop": hard_stop},
            "trainable": {"type": "command", "argv": ["true"]}}


def test_median_stopping():
    s = Server()
    eid = s.ok("POST", "/api/v1/experiments", median_cfg(), status=201)["id"]
    w = register(s, cpu=8)
    ts = [lease(s, w)["id"] for _ in range(4)]
    # three trials report k+1 at t=1 and (k+1)/2 at t=2: running averages
    # 0.75, 1.5, 2.25 at t=2 (each has only 2 others: fewer than
    # min_samples_required 3, so none is judged)
    for it in (1, 2):
        for k, tid in enumerate(ts[:3]):
            assert report(s, tid, training_iteration=it, loss=(k + 1.0) / it) == "continue"
    s.kill()  # the others' results must survive as scheduler records
    s.start()
    # the fourth: 1.9 at t=1 is not worse than the median 2 then; its best
    # 1.8 at t=2 is worse than the median 1.5 of 3 trials' running averages
    assert report(s, ts[3], training_iteration=1, loss=1.9) == "continue"
    assert report(s, ts[3], training_iteration=2, loss=1.8) == "stop"
    tr = s.ok("GET", "/api/v1/trials/%d" % ts[3])
    assert tr["status"] == "TERMINATED" and tr["stopped_early"] is True, tr
    assert tr["reason"] == ("stopped at t=2: best 1.8 worse than median 1.5 of 3 trials' "
                            "running averages"), tr
    assert [x["kind"] for x in tr["events"]] == ["stopped"], tr
    st = s.ok("GET", "/api/v1/experiments/%d" % eid)["scheduler"]
    assert st["type"] == "median_stopping" and st["stopped"] == 1, st
    s.stop()

    # hard_stop false: Ray pauses instead; the paused trial resumes once no
    # new trial can be made, and is not judged again.
    s = Server()
    eid = s.ok("POST", "/api/v1/experiments", median_cfg(hard_stop=False, n=3, min_samples=2), status=201)["id"]
    w = register(s, cpu=8)
    ts = [lease(s, w)["id"] for _ in range(3)]
    for k, tid in enumerate(ts[:2]):
        assert report(s, tid, training_iteration=1, loss=float(k + 1)) == "continue"
    assert report(s, ts[2], training_iteration=1, loss=9.0) == "stop"
    s.ok("POST", "/api/v1/trials/%d/complete" % ts[2], {})
    tr = s.ok("GET", "/api/v1/trials/%d" % ts[2])
    assert tr["status"] == "PAUSED" and tr["reason"].startswith("paused at t=1: best 9"), tr
    t = lease(s, w)
    assert t is not None and t["id"] == ts[2], t
    assert report(s, ts[2], training_iteration=2, loss=50.0) == "continue"
    tr = s.ok("GET", "/api/v1/trials/%d" % ts[2])
    assert [x["kind"] for x in tr["events"]] == ["paused", "resumed"], tr["events"]
    s.stop()


if __name__ == "__main__":
    r = Runner()
    for fn in (test_median_stopping, test_pbt_kill9_same_decisions):
        r.run(fn)
    r.done()
