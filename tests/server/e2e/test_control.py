#!/usr/bin/env python3
"""Experiment control (docs/protocol.md#experiment-control): pause
and resume, extend (num_samples, scheduler.max_t), PATCH of
max_concurrent_trials / priority / notes / tags, one trial's stop, delete,
search by q/tag, and kill -9 of the server in the middle of a pause, an
extend and a delete (right after the reply, and just before the COMMIT with
the store's fault hook CTUNE_TEST_FAULT=kill_before_exp_commit=1): after the
restart each change is there whole or not at all.

A scripted fake worker speaks REST (lease, results, checkpoint, complete).
"""
import json
import os
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ctune_e2e import Runner, Server, heartbeat, lease, register, report  # noqa: E402

E = "/api/v1/experiments"


def cfg(n=2, sched=None, name="ctl", **extra):
    c = {"name": name, "metric": "loss", "mode": "min", "num_samples": n, "seed": 3,
         "param_space": {"lr": {"type": "loguniform", "lower": 1e-4, "upper": 1e-1}},
         "resources_per_trial": {"cpu": 1},
         "trainable": {"type": "command", "argv": ["true"]}}
    if sched:
        c["scheduler"] = sched
    c.update(extra)
    return c


def put_ckpt(s, tid, it):
    data = json.dumps({"trial": tid, "iteration": it}).encode()
    h = {"X-Ctune-Iteration": str(it), "X-Ctune-Crc32": "%08x" % zlib.crc32(data),
         "Content-Type": "application/octet-stream"}
    st, b, _ = s.request("PUT", "/api/v1/trials/%d/checkpoint" % tid, data, headers=h)
    assert st in (200, 201, 204), (st, b)


def complete(s, tid):
    st, b, _ = s.post("/api/v1/trials/%d/complete" % tid, {})
    assert st in (200, 204), (st, b)


def patch(s, eid, body, status=200):
    st, b, _ = s.request("PATCH", "%s/%d" % (E, eid), body,
                         headers={"Content-Type": "application/json"})
    assert st == status, (st, b)
    return b


def exp(s, eid):
    return s.ok("GET", "%s/%d" % (E, eid))


def trial(s, tid):
    return s.ok("GET", "/api/v1/trials/%d" % tid)


def r(it):
    return {"training_iteration": it, "loss": 1.0 / it}


def test_pause_resume():
    s = Server()
    eid = s.ok("POST", E, cfg(2), status=201)["id"]
    w = register(s, cpu=2)
    a, b = lease(s, w), lease(s, w)
    for t in (a, b):
        assert report(s, t["id"], **r(1)) == "continue"
        put_ckpt(s, t["id"], 1)
    e = s.ok("POST", "%s/%d/pause" % (E, eid))
    assert e["status"] == "PAUSED", e
    st, body, _ = s.post("%s/%d/pause" % (E, eid))
    assert st == 409 and body["error"]["code"] == "not_running", (st, body)
    # Running trials are answered stop at their next result and end PAUSED
    # when their lease ends; nothing new is leased meanwhile.
    for t in (a, b):
        assert report(s, t["id"], **r(2)) == "stop"
        complete(s, t["id"])
        tj = trial(s, t["id"])
        assert tj["status"] == "PAUSED", tj
    assert lease(s, w) is None
    e = exp(s, eid)
    assert e["status"] == "PAUSED" and e["counts"]["PAUSED"] == 2, e
    # A restart keeps the pause.
    s.restart()
    assert exp(s, eid)["status"] == "PAUSED"
    e = s.ok("POST", "%s/%d/resume" % (E, eid))
    assert e["status"] == "RUNNING" and e["counts"]["PENDING"] == 2, e
    st, body, _ = s.post("%s/%d/resume" % (E, eid))
    assert st == 409 and body["error"]["code"] == "not_paused", (st, body)
    # Resumed on another worker, from the checkpoints.
    w2 = register(s, cpu=2, name="w2")
    for _ in range(2):
        t = lease(s, w2)
        assert t["start_iteration"] == 1 and t["has_checkpoint"], t
        assert report(s, t["id"], **r(2)) == "continue"
        complete(s, t["id"])
    e = exp(s, eid)
    assert e["status"] == "TERMINATED" and e["counts"]["TERMINATED"] == 2, e


def test_pause_resume_before_lease_end():
    """Resumed before a paused trial's lease ended: the trial goes back to
    PENDING at its lease's end, not PAUSED forever."""
    s = Server()
    eid = s.ok("POST", E, cfg(1), status=201)["id"]
    w = register(s, cpu=1)
    t = lease(s, w)
    report(s, t["id"], **r(1))
    s.ok("POST", "%s/%d/pause" % (E, eid))
    assert report(s, t["id"], **r(2)) == "stop"
    s.ok("POST", "%s/%d/resume" % (E, eid))
    complete(s, t["id"])
    assert trial(s, t["id"])["status"] == "PENDING"
    t2 = lease(s, w)
    assert t2 and t2["id"] == t["id"], t2


def test_pause_at_heartbeat():
    """A trial that reports rarely is not left running until its next
    result: its worker's next heartbeat is answered stop ("paused"), and
    the trial pauses with its checkpoint when that lease ends."""
    s = Server()
    eid = s.ok("POST", E, cfg(1), status=201)["id"]
    w = register(s, cpu=1)
    t = lease(s, w)
    report(s, t["id"], **r(1))
    put_ckpt(s, t["id"], 1)
    assert heartbeat(s, w, [(t["id"], t["attempt"])]) == []
    s.ok("POST", "%s/%d/pause" % (E, eid))
    stops = heartbeat(s, w, [(t["id"], t["attempt"])])
    assert stops == [(t["id"], t["attempt"], "paused")], stops
    # Told again while it is still stopping; still RUNNING until then.
    assert heartbeat(s, w, [(t["id"], t["attempt"])]) == stops
    tj = trial(s, t["id"])
    assert tj["status"] == "RUNNING" and "paused" in tj["reason"], tj
    s.restart()  # the decision survives a restart (persisted with the row)
    complete(s, t["id"])
    assert trial(s, t["id"])["status"] == "PAUSED"
    s.ok("POST", "%s/%d/resume" % (E, eid))
    t2 = lease(s, w)
    assert t2["id"] == t["id"] and t2["start_iteration"] == 1 and t2["has_checkpoint"], t2


def test_extend_num_samples():
    s = Server()
    eid = s.ok("POST", E, cfg(1, sched={"type": "fifo", "max_t": 2}), status=201)["id"]
    w = register(s, cpu=1)
    t = lease(s, w)
    report(s, t["id"], **r(1))
    assert report(s, t["id"], **r(2)) == "stop"
    complete(s, t["id"])
    assert exp(s, eid)["status"] == "TERMINATED"
    b = patch(s, eid, {"num_samples": 0}, 400)
    assert b["error"]["path"] == "num_samples", b
    e = patch(s, eid, {"num_samples": 3})
    assert e["status"] == "RUNNING" and e["num_trials"] == 3 and e["num_samples"] == 3, e
    s.restart()
    assert exp(s, eid)["num_trials"] == 3
    b = patch(s, eid, {"num_samples": 2}, 400)
    assert b["error"]["path"] == "num_samples", b
    for _ in range(2):
        t = lease(s, w)
        assert t is not None
        report(s, t["id"], **r(1))
        assert report(s, t["id"], **r(2)) == "stop"
        complete(s, t["id"])
    e = exp(s, eid)
    assert e["status"] == "TERMINATED" and e["counts"]["TERMINATED"] == 3, e


def test_extend_max_t():
    s = Server()
    eid = s.ok("POST", E, cfg(1, sched={"type": "fifo", "max_t": 2}), status=201)["id"]
    w = register(s, cpu=1)
    t = lease(s, w)
    report(s, t["id"], **r(1))
    put_ckpt(s, t["id"], 1)
    assert report(s, t["id"], **r(2)) == "stop"
    put_ckpt(s, t["id"], 2)
    complete(s, t["id"])
    assert exp(s, eid)["status"] == "TERMINATED"
    b = patch(s, eid, {"scheduler": {"max_t": 1}}, 400)
    assert b["error"]["path"] == "scheduler.max_t", b
    e = patch(s, eid, {"scheduler": {"max_t": 4}})
    assert e["status"] == "RUNNING" and e["counts"]["PENDING"] == 1, e
    assert e["config"]["scheduler"]["max_t"] == 4, e
    s.restart()
    t2 = lease(s, w)
    assert t2["id"] == t["id"] and t2["start_iteration"] == 2 and t2["max_t"] == 4, t2
    assert report(s, t["id"], **r(3)) == "continue"
    assert report(s, t["id"], **r(4)) == "stop"
    complete(s, t["id"])
    assert exp(s, eid)["status"] == "TERMINATED"
    # A scheduler whose plan depends on max_t refuses it, clearly.
    eid2 = s.ok("POST", E, cfg(1, sched={"type": "asha", "max_t": 4}, name="a"), status=201)["id"]
    b = patch(s, eid2, {"scheduler": {"max_t": 8}}, 400)
    assert b["error"]["path"] == "scheduler.max_t" and "fifo" in b["error"]["message"], b


def test_patch_live_and_search():
    s = Server()
    eid = s.ok("POST", E, cfg(4), status=201)["id"]
    other = s.ok("POST", E, cfg(1, name="other"), status=201)["id"]
    e = patch(s, eid, {"max_concurrent_trials": 1, "priority": 2.5, "notes": "Learning RATE sweep",
                       "tags": ["lr", "baseline"]})
    assert e["max_concurrent_trials"] == 1 and e["priority"] == 2.5, e
    assert e["notes"] == "Learning RATE sweep" and e["tags"] == ["lr", "baseline"], e
    w = register(s, cpu=4)
    got = [lease(s, w) for _ in range(3)]
    mine = [t for t in got if t and t["experiment_id"] == eid]
    assert len(mine) == 1, got  # max_concurrent_trials 1, live
    for bad, field in (({"priority": 0}, "priority"), ({"tags": [""]}, "tags[0]"),
                       ({"notes": "x" * 4097}, "notes"), ({"bogus": 1}, "bogus"),
                       ({"max_concurrent_trials": -1}, "max_concurrent_trials"),
                       ({"scheduler": {"grace_period": 1}}, "scheduler.grace_period")):
        b = patch(s, eid, bad, 400)
        assert b["error"]["path"] == field, (bad, b)
    patch(s, 999, {"priority": 1}, 404)
    s.restart()
    e = exp(s, eid)
    assert e["priority"] == 2.5 and e["tags"] == ["lr", "baseline"], e
    assert e["max_concurrent_trials"] == 1
    ids = lambda q: [x["id"] for x in s.ok("GET", E + q)["experiments"]]  # noqa: E731
    assert ids("?q=rate") == [eid]
    assert ids("?q=BASE") == [eid]
    assert ids("?tag=lr") == [eid]
    assert ids("?tag=l") == []
    assert ids("?q=other") == [other]
    assert sorted(ids("")) == sorted([eid, other])


def test_stop_trial():
    s = Server()
    eid = s.ok("POST", E, cfg(2), status=201)["id"]
    w = register(s, cpu=2)
    a = lease(s, w)
    report(s, a["id"], **r(1))
    put_ckpt(s, a["id"], 1)
    tj = s.ok("POST", "/api/v1/trials/%d/stop" % a["id"])
    assert tj["status"] == "TERMINATED" and tj["reason"] == "stopped by user", tj
    # Its worker learns it; results and checkpoint are kept.
    assert [x[0] for x in heartbeat(s, w, [(a["id"], a["attempt"])])] == [a["id"]]
    assert len(s.ok("GET", "/api/v1/trials/%d/results" % a["id"])["results"]) == 1
    st, _, _ = s.request("GET", "/api/v1/trials/%d/checkpoint" % a["id"],
                         token=s.tokens["worker"])
    st, body, _ = s.post("/api/v1/trials/%d/stop" % a["id"])
    assert st == 409 and body["error"]["code"] == "ended", (st, body)
    st, body, _ = s.post("/api/v1/trials/999/stop")
    assert st == 404
    s.restart()
    assert trial(s, a["id"])["status"] == "TERMINATED"
    assert exp(s, eid)["status"] == "RUNNING"


def test_delete():
    s = Server()
    e1 = s.ok("POST", E, cfg(2, name="gone"), status=201)["id"]
    e2 = s.ok("POST", E, cfg(1, name="kept"), status=201)["id"]
    w = register(s, cpu=3)
    a = lease(s, w)
    assert a["experiment_id"] == e1
    report(s, a["id"], **r(1))
    put_ckpt(s, a["id"], 1)
    st, body, _ = s.request("DELETE", "%s/%d" % (E, e1))
    assert st == 409 and body["error"]["code"] == "running", (st, body)
    b = s.ok("DELETE", "%s/%d?force=1" % (E, e1))
    assert b["id"] == e1 and b["deleted"] is True, b
    for path in ("%s/%d" % (E, e1), "/api/v1/trials/%d" % a["id"]):
        st, _, _ = s.get(path)
        assert st == 404, path
    assert [x["id"] for x in s.ok("GET", E)["experiments"]] == [e2]
    # The worker is told to stop it and gets its resources back.
    assert [x[0] for x in heartbeat(s, w, [(a["id"], a["attempt"])])] == [a["id"]]
    t2 = lease(s, w)
    assert t2 and t2["experiment_id"] == e2, t2
    s.restart()  # a gap in the ids loads
    st, _, _ = s.get("%s/%d" % (E, e1))
    assert st == 404
    assert exp(s, e2)["counts"]["RUNNING"] == 1
    report(s, t2["id"], **r(1))
    complete(s, t2["id"])
    b = s.ok("DELETE", "%s/%d" % (E, e2))  # finished: no force needed
    assert s.ok("GET", E)["experiments"] == []
    # The newest experiment and trial were deleted: after a restart their
    # ids are still taken (a link to the old id never shows a new one).
    s.restart()
    e3 = s.ok("POST", E, cfg(1, name="new"), status=201)["id"]
    assert e3 > e2 and exp(s, e3)["name"] == "new", e3
    st, _, _ = s.get("%s/%d" % (E, e2))
    assert st == 404
    t3 = lease(s, w)
    assert t3["experiment_id"] == e3 and t3["id"] > t2["id"], (t3, t2)


def crash_case(kind, before_commit):
    """kill -9 in the middle of a pause / extend / delete: after the reply
    (the change is there, whole) or just before its COMMIT (not at all)."""
    s = Server()
    eid = s.ok("POST", E, cfg(2, sched={"type": "fifo", "max_t": 5}), status=201)["id"]
    w = register(s, cpu=1)
    a = lease(s, w)
    report(s, a["id"], **r(1))
    put_ckpt(s, a["id"], 1)
    if kind == "delete":
        report(s, a["id"], **r(2))
    if before_commit:
        os.environ["CTUNE_TEST_FAULT"] = "kill_before_exp_commit=1"
        try:
            s.restart()
        finally:
            del os.environ["CTUNE_TEST_FAULT"]
    req = {"pause": ("POST", "%s/%d/pause" % (E, eid), None),
           "extend": ("PATCH", "%s/%d" % (E, eid), {"num_samples": 5, "tags": ["x"]}),
           "delete": ("DELETE", "%s/%d?force=1" % (E, eid), None)}[kind]
    hdr = {"Content-Type": "application/json"} if req[2] else None
    try:
        st, _, _ = s.request(req[0], req[1], req[2], headers=hdr)
        replied = st == 200
    except (ConnectionError, OSError, Exception):
        replied = False
    assert replied != before_commit, (kind, before_commit, replied)
    if before_commit:
        s.proc.wait(timeout=10)  # the hook killed it
    s.restart()
    st, e, _ = s.get("%s/%d" % (E, eid))
    tr = s.get("/api/v1/trials/%d" % a["id"])
    res = s.get("/api/v1/trials/%d/results" % a["id"])
    if kind == "delete":
        if before_commit:
            assert st == 200 and tr[0] == 200 and res[0] == 200, (st, tr[0], res[0])
            assert len(res[1]["results"]) == 2 and tr[1]["status"] == "RUNNING", tr
        else:
            assert st == 404 and tr[0] == 404 and res[0] == 404, (st, tr[0], res[0])
        return
    assert st == 200 and tr[1]["status"] == "RUNNING", (st, tr)
    if kind == "pause":
        assert e["status"] == ("RUNNING" if before_commit else "PAUSED"), e
        if not before_commit:
            assert report(s, a["id"], **r(2)) == "stop"
            complete(s, a["id"])
            assert trial(s, a["id"])["status"] == "PAUSED"
    else:
        want = (2, []) if before_commit else (5, ["x"])
        assert (e["num_samples"], e["tags"]) == want, e
        assert e["num_trials"] == want[0] and e["config"]["num_samples"] == want[0], e


def test_crash_after_reply():
    for kind in ("pause", "extend", "delete"):
        crash_case(kind, False)


def test_crash_before_commit():
    for kind in ("pause", "extend", "delete"):
        crash_case(kind, True)


if __name__ == "__main__":
    run = Runner()
    for fn in (test_pause_resume, test_pause_resume_before_lease_end, test_pause_at_heartbeat,
               test_extend_num_samples,
               test_extend_max_t, test_patch_live_and_search, test_stop_trial, test_delete,
               test_crash_after_reply, test_crash_before_commit):
        run.run(fn)
    run.done()
