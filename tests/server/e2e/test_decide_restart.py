#!/usr/bin/env python3
"""Decisions due at a lease's end, and resumes from an older checkpoint
(docs/scheduling.md#decisions-and-reasons).

A scripted fake worker speaks REST.
- Resume from a checkpoint behind the pause (promotion ASHA, HyperBand): the
  worker uploads each checkpoint one iteration late, so a promoted trial
  resumes one iteration before the result where it paused and sends that
  time value again. It is a new result of the trial's next generation,
  answered by the scheduler (continue), not a replay of the stored stop (the
  pause), which would stop the trial again.
- kill -9 right after a pause decision's reply (before the lease's
  complete): after the restart the complete makes the trial PAUSED, and the
  whole run (every decision, event, status) equals an uninterrupted one.
- kill -9 right after a stop of ASHA with two objectives (MOASHA: each rung
  ranked by non-dominated sorting, the order replayed from sched_records),
  and after a pause of its promotion variant: the whole run equals an
  uninterrupted one (HyperBand's vectors replay as the promotion
  variant's: core_hyperband restarts from them).
- kill -9 right after a PBT exploit's reply (test hook CTUNE_TEST_DECIDE):
  the old lease's checkpoint is still refused, its complete makes the trial
  PENDING with the new config, and the next lease resumes at the donor's
  checkpoint: start_iteration is its iteration and start_time_total_s the
  donor's time_total_s there (also after another restart).
"""
import json
import os
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ctune_e2e import Runner, Server, experiment, lease, register, report  # noqa: E402


def cfg(sched, n, objectives=False):
    metric = {"metric": ["loss", "size"], "mode": ["min", "max"]} if objectives else \
        {"metric": "loss", "mode": "min"}
    return {"name": "lag", **metric, "num_samples": n, "seed": 11,
            "param_space": {"lr": {"type": "loguniform", "lower": 1e-4, "upper": 1e-1}},
            "scheduler": sched, "resources_per_trial": {"cpu": 1},
            "trainable": {"type": "command", "argv": ["true"]}}


def put_ckpt(s, tid, it, data=None):
    data = data if data is not None else json.dumps({"trial": tid, "iteration": it}).encode()
    h = {"X-Ctune-Iteration": str(it), "X-Ctune-Crc32": "%08x" % zlib.crc32(data),
         "Content-Type": "application/octet-stream"}
    st, b, _ = s.request("PUT", "/api/v1/trials/%d/checkpoint" % tid, data, headers=h)
    return st, b


def loss_of(idx, it):
    return round(((idx * 5) % 11 + 1) / (1.0 + it) + 0.001 * idx, 9)


def size_of(idx, it):
    return round((idx * 7) % 5 + 0.1 * it, 9)


def drive(sched, n, slots, kill_after_stop=None, objectives=False):
    """Runs the experiment to its end; the checkpoint after result `it` is
    iteration it-1. kill_after_stop=k: kill -9 and restart right after the
    k-th "stop" reply, before that lease's complete."""
    s = Server()
    eid = s.ok("POST", "/api/v1/experiments", cfg(sched, n, objectives), status=201)["id"]
    w = register(s, cpu=slots)
    live, log, resumed, stops, seen = {}, [], [], 0, set()

    def fill():
        while len(live) < slots:
            t = lease(s, w)
            if t is None:
                return
            idx = int(t["name"].rsplit("_", 1)[1])
            # As the real worker: from the checkpoint, else from scratch.
            ck = t["checkpoint_iteration"] if t["has_checkpoint"] else 0
            if t["has_checkpoint"]:
                assert t["start_iteration"] == ck, t
            if t["id"] in seen:
                resumed.append((t["id"], ck, len(log)))
            seen.add(t["id"])
            live[t["id"]] = {"idx": idx, "it": int(ck)}
            log.append(("lease", t["id"], ck))

    for _ in range(1000):
        fill()
        if not live:
            break
        tid = min(live)
        st = live[tid]
        st["it"] += 1
        more = {"size": size_of(st["idx"], st["it"])} if objectives else {}
        d = report(s, tid, training_iteration=st["it"], loss=loss_of(st["idx"], st["it"]), **more)
        log.append(("result", tid, st["it"], d))
        if st["it"] > 1:
            code, body = put_ckpt(s, tid, st["it"] - 1)
            assert code == 200, (code, body)
        if d == "stop":
            stops += 1
            code, body, _ = s.post("/api/v1/trials/%d/complete" % tid, {}) \
                if stops != kill_after_stop else (None, None, None)
            if stops == kill_after_stop:
                s.restart()  # kill -9: the decision was replied, the lease not ended
                code, body, _ = s.post("/api/v1/trials/%d/complete" % tid, {})
                # A trial the stop ended takes no final writes after a
                # restart (the fence's lease_final is in memory): the worker
                # reads 409 not_leased as "done". A pause is still due.
                if code == 409 and body["error"]["code"] == "not_leased":
                    code = 200
            assert code == 200, (code, body)
            del live[tid]
    else:
        raise AssertionError("did not finish: %r" % log[-20:])
    ex = s.ok("GET", "/api/v1/experiments/%d" % eid)
    trials = s.ok("GET", "/api/v1/experiments/%d/trials" % eid)["trials"]
    detail = [s.ok("GET", "/api/v1/trials/%d" % t["id"]) for t in trials]
    gens = {t["id"]: s.ok("GET", "/api/v1/trials/%d/results" % t["id"])["generation"]
            for t in trials}
    out = {"log": log, "resumed": resumed, "status": ex["status"], "gens": gens,
           "trials": [(t["id"], t["status"], t["reason"], t["stopped_early"]) for t in detail],
           "events": [[(x["kind"], x["reason"]) for x in t["events"]] for t in detail]}
    s.stop()
    return out


def check_resumes(a, max_t):
    assert a["status"] == "TERMINATED", a["status"]
    assert all(t[1] == "TERMINATED" for t in a["trials"]), a["trials"]
    assert a["resumed"], a["log"]
    for tid, ck, i in a["resumed"]:
        assert a["log"][i] == ("lease", tid, ck), (i, a["log"])
        nxt = next(x for x in a["log"][i + 1:] if x[0] == "result" and x[1] == tid)
        # The time value it paused at (or one before it), sent again from
        # the older checkpoint: answered by the scheduler, not the stored stop.
        assert nxt[2] == ck + 1 and ck + 1 < max_t, (tid, ck, nxt)
        assert any(x[0] == "result" and x[1] == tid and x[2] == ck + 1
                   for x in a["log"][:i]), (tid, ck, a["log"])
        assert nxt[3] == "continue", (tid, ck, nxt, a["log"])
        assert a["gens"][tid] >= 1, (tid, a["gens"])


PROMO = {"type": "asha", "promotion": True, "max_t": 4, "grace_period": 1,
         "reduction_factor": 2}
HB = {"type": "hyperband", "max_t": 4, "reduction_factor": 2}


def test_promotion_resumes_from_older_checkpoint_and_pause_survives_kill9():
    a = drive(PROMO, 6, 2)
    check_resumes(a, 4)
    # Some promoted trial reached max_t after its resume.
    assert any(x[0] == "result" and x[2] == 4 for x in a["log"]), a["log"]
    for k in (1, 3):
        b = drive(PROMO, 6, 2, kill_after_stop=k)
        assert b["log"] == a["log"], (k, a["log"], b["log"])
        assert b["events"] == a["events"], (k, a["events"], b["events"])
        assert b["trials"] == a["trials"], (k, a["trials"], b["trials"])
        assert b["gens"] == a["gens"], (k, a["gens"], b["gens"])


def test_hyperband_resumes_from_older_checkpoint():
    a = drive(HB, 6, 2)
    check_resumes(a, 4)
    b = drive(HB, 6, 2, kill_after_stop=2)
    assert (b["log"], b["events"], b["trials"]) == (a["log"], a["events"], a["trials"]), (a, b)


MOASHA = {"type": "asha", "max_t": 4, "grace_period": 1, "reduction_factor": 2}


def test_moasha_kill9_gives_identical_decisions():
    a = drive(MOASHA, 7, 3, objectives=True)
    assert a["status"] == "TERMINATED", a["status"]
    ranked = [t for t in a["trials"] if t[3] and "non-dominated order" in t[2]]
    assert ranked, a["trials"]
    b = drive(MOASHA, 7, 3, kill_after_stop=3, objectives=True)
    assert (b["log"], b["events"], b["trials"]) == (a["log"], a["events"], a["trials"]), (a, b)
    a = drive(PROMO, 6, 2, objectives=True)
    check_resumes(a, 4)
    assert any("non-dominated order" in r for ev in a["events"] for _, r in ev if r), a["events"]
    b = drive(PROMO, 6, 2, kill_after_stop=3, objectives=True)
    assert (b["log"], b["events"], b["trials"], b["gens"]) == \
        (a["log"], a["events"], a["trials"], a["gens"]), (a, b)


def exploit_run(kill):
    s = Server()
    s.ok("POST", "/api/v1/experiments", experiment(n=2), status=201)
    w = register(s, cpu=2)
    a, b = lease(s, w), lease(s, w)
    assert (a["id"], b["id"]) == (1, 2), (a, b)
    snap = []
    for it in (1, 2):  # the donor: time_total_s 10 per iteration
        snap.append(report(s, 1, training_iteration=it, time_total_s=10.0 * it, loss=0.5 - it / 10))
    assert put_ckpt(s, 1, 2, b"donor@2")[0] == 200
    for it in (1, 2, 3, 4):  # trial 2: 1 per iteration, ahead of the donor
        snap.append(report(s, 2, training_iteration=it, time_total_s=1.0 * it, loss=1.0 + it))
        assert put_ckpt(s, 2, it, b"own@%d" % it)[0] == 200
    snap.append(report(s, 2, training_iteration=5, time_total_s=5.0, loss=6.0))  # exploited
    assert snap[-1] == "stop", snap
    if kill:
        s.restart()  # right after the exploit's reply
    # The old lease's own checkpoint must not replace the donor's copy.
    st, body = put_ckpt(s, 2, 5, b"own@5")
    assert st == 409 and body["error"]["code"] == "not_leased", (st, body)
    assert "exploit_pending" in body["error"]["message"], body
    tr = s.ok("POST", "/api/v1/trials/2/complete", {})
    assert tr["status"] == "PENDING", tr
    assert tr["config"]["lr"] == 0.012, tr
    if kill:
        s.restart()  # the donor's checkpoint time is persisted too
    t = lease(s, w)
    assert t is not None and t["id"] == 2, t
    assert t["has_checkpoint"] and t["checkpoint_iteration"] == 2, t
    assert t["start_iteration"] == 2, t
    assert t["start_time_total_s"] == 20.0, t
    st, data, _ = s.get("/api/v1/trials/2/checkpoint", raw=True)
    assert st == 200 and data == b"donor@2", (st, data)
    snap.append(report(s, 2, training_iteration=3, time_total_s=21.0, loss=0.3))
    snap.append(report(s, 2, training_iteration=4, time_total_s=22.0, loss=0.2))
    # Its own checkpoint from now on: its own results give the time.
    assert put_ckpt(s, 2, 4, b"gen1@4")[0] == 200
    tr = s.ok("GET", "/api/v1/trials/2")
    out = {"decisions": snap, "status": tr["status"], "config": tr["config"],
           "events": [(x["kind"], x["reason"], x["data"]) for x in tr["events"]],
           "lease": {k: t[k] for k in ("start_iteration", "checkpoint_iteration",
                                       "start_time_total_s", "config")}}
    s.stop()
    return out


def test_exploit_survives_kill9_and_lease_resumes_at_donor():
    os.environ["CTUNE_TEST_DECIDE"] = "exploit_at=5,donor=1,set=lr:0.012"
    try:
        a = exploit_run(False)
        b = exploit_run(True)
    finally:
        del os.environ["CTUNE_TEST_DECIDE"]
    assert a == b, (a, b)
    assert a["decisions"] == ["continue"] * 6 + ["stop", "continue", "continue"], a
    assert [e[0] for e in a["events"]] == ["exploited"], a["events"]


if __name__ == "__main__":
    r = Runner()
    r.run(test_promotion_resumes_from_older_checkpoint_and_pause_survives_kill9)
    r.run(test_hyperband_resumes_from_older_checkpoint)
    r.run(test_exploit_survives_kill9_and_lease_resumes_at_donor)
    r.run(test_moasha_kill9_gives_identical_decisions)
    r.done()
