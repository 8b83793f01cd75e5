#!/usr/bin/env python3
"""ASHA with promotion and HyperBand on the real daemon
(docs/scheduling.md#asha-with-promotion and docs/scheduling.md#hyperband).

A scripted fake worker drives a deterministic result sequence through the
REST API (results, checkpoints, complete, lease), twice: one server is
killed with -9 between two results and restarted. Every decision, every
trial's events, reasons and statuses are the same; paused trials resume from
their checkpoint (start at its iteration); the experiment ends TERMINATED with
every trial TERMINATED (paused trials never promoted end with it; HyperBand's
halving ends the paused trials that did not make the cut at once).
"""
import json
import os
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ctune_e2e import Runner, Server, lease, register, report  # noqa: E402


def cfg(sched, n):
    return {"name": "promo", "metric": "loss", "mode": "min", "num_samples": n, "seed": 11,
            "param_space": {"lr": {"type": "loguniform", "lower": 1e-4, "upper": 1e-1}},
            "scheduler": sched, "resources_per_trial": {"cpu": 1},
            "trainable": {"type": "command", "argv": ["true"]}}


def put_ckpt(s, tid, it):
    data = json.dumps({"trial": tid, "iteration": it}).encode()
    h = {"X-Ctune-Iteration": str(it), "X-Ctune-Crc32": "%08x" % zlib.crc32(data),
         "Content-Type": "application/octet-stream"}
    st, _, _ = s.request("PUT", "/api/v1/trials/%d/checkpoint" % tid, data, headers=h)
    assert st in (200, 201, 204), st


def loss_of(idx, it):
    # distinct per trial, ties impossible; better with more iterations
    return round(((idx * 5) % 11 + 1) / (1.0 + it) + 0.001 * idx, 9)


def drive(sched, n, slots, kill_at=None):
    s = Server()
    eid = s.ok("POST", "/api/v1/experiments", cfg(sched, n), status=201)["id"]
    w = register(s, cpu=slots)
    live, log, step, resumed = {}, [], 0, []

    def fill():
        while len(live) < slots:
            t = lease(s, w)
            if t is None:
                return
            idx = int(t["name"].rsplit("_", 1)[1])
            if t["has_checkpoint"]:
                # A promoted trial: it starts at its checkpoint's iteration.
                assert t["start_iteration"] == t["checkpoint_iteration"], t
                resumed.append((t["id"], t["checkpoint_iteration"]))
            live[t["id"]] = {"idx": idx, "it": int(t["start_iteration"])}
            log.append(("lease", t["id"], t["start_iteration"]))

    for _ in range(1000):
        fill()
        if not live:
            break
        tid = min(live)  # one result per round, lowest id first
        step += 1
        if step == kill_at:
            s.kill()
            s.start()
        st = live[tid]
        st["it"] += 1
        d = report(s, tid, training_iteration=st["it"], loss=loss_of(st["idx"], st["it"]))
        log.append(("result", tid, st["it"], d))
        put_ckpt(s, tid, st["it"])
        if d == "stop":
            s.ok("POST", "/api/v1/trials/%d/complete" % tid, {})
            del live[tid]
    else:
        raise AssertionError("did not finish: %r" % log[-20:])
    ex = s.ok("GET", "/api/v1/experiments/%d" % eid)
    trials = s.ok("GET", "/api/v1/experiments/%d/trials" % eid)["trials"]
    detail = [s.ok("GET", "/api/v1/trials/%d" % t["id"]) for t in trials]
    out = {"log": log, "resumed": resumed, "status": ex["status"],
           "trials": [(t["id"], t["status"], t["reason"], t["stopped_early"]) for t in detail],
           "events": [[(x["kind"], x["reason"]) for x in t["events"]] for t in detail],
           "scheduler": ex["scheduler"]}
    s.stop()
    return out


PROMO = {"type": "asha", "promotion": True, "max_t": 9, "grace_period": 1,
         "reduction_factor": 3}
HB = {"type": "hyperband", "max_t": 9, "reduction_factor": 3}


def check_common(a):
    assert a["status"] == "TERMINATED", a["status"]
    assert all(t[1] == "TERMINATED" for t in a["trials"]), a["trials"]
    assert a["resumed"], a["log"]
    # a resumed trial's next result continues from its checkpoint, not 1
    for tid, ck in a["resumed"]:
        i = a["log"].index(("lease", tid, ck))
        nxt = next(x for x in a["log"][i + 1:] if x[0] == "result" and x[1] == tid)
        assert nxt[2] == ck + 1, (tid, ck, nxt)


def test_asha_promotion_kill9_same_decisions():
    a = drive(PROMO, 9, 3)
    check_common(a)
    kinds = [k for evs in a["events"] for (k, _) in evs]
    assert "promoted" in kinds and "paused" in kinds, a["events"]
    promoted = [r for evs in a["events"] for (k, r) in evs if k == "promoted"]
    assert any(r.startswith("promoted from rung 0 (top ") for r in promoted), promoted
    # trials never promoted end with the experiment, with the reason
    assert any(t[2] and "never promoted" in t[2] for t in a["trials"]), a["trials"]
    rung0 = a["scheduler"]["brackets"][0]["rungs"][0]
    assert rung0["recorded"] == 9 and rung0["promoted"] == 3, a["scheduler"]
    for kill_at in (7, 23):
        b = drive(PROMO, 9, 3, kill_at=kill_at)
        assert b["log"] == a["log"], (kill_at, a["log"], b["log"])
        assert b["events"] == a["events"], (kill_at, a["events"], b["events"])
        assert b["trials"] == a["trials"], (kill_at, a["trials"], b["trials"])


def test_hyperband_halving_ends_paused_kill9_same():
    a = drive(HB, 8, 3)
    check_common(a)
    # bracket 1 (trials 3-7): rung at t=3, top 2 continue, 3 stopped; the
    # paused ones stopped by the halving are TERMINATED with their reason
    halved = [t for t in a["trials"] if t[2] and t[2].startswith("stopped at t=3")]
    assert len(halved) == 3, a["trials"]
    assert all(t[3] is True for t in halved), halved
    b = drive(HB, 8, 3, kill_at=11)
    assert b["log"] == a["log"], (a["log"], b["log"])
    assert b["events"] == a["events"], (a["events"], b["events"])
    assert b["trials"] == a["trials"], (a["trials"], b["trials"])


if __name__ == "__main__":
    r = Runner()
    r.run(test_asha_promotion_kill9_same_decisions)
    r.run(test_hyperband_halving_ends_paused_kill9_same)
    r.done()
