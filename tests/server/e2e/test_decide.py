#!/usr/bin/env python3
"""Scheduler decisions on the real daemon (ARCHITECTURE.md#decisions-pause-and-exploit): stop
rules (reason, event, result kept, not stopped early), time_budget_s (counted
only while a server runs, across a restart), and the PAUSE / EXPLOIT framework
driven by the test-only hook CTUNE_TEST_DECIDE (a fake worker speaks HTTP)."""
import os
import time
import zlib

from ctune_e2e import Server, Runner, experiment, register, lease, report


def put_ckpt(s, tid, it, data, lease_hdr=None):
    h = {"X-Ctune-Iteration": str(it), "X-Ctune-Crc32": "%08x" % zlib.crc32(data),
         "Content-Type": "application/octet-stream"}
    return s.request("PUT", "/api/v1/trials/%d/checkpoint" % tid, data, headers=h,
                     lease=lease_hdr)


def test_stop_rule_reason_events_restart():
    s = Server()
    e = s.ok("POST", "/api/v1/experiments",
             experiment(n=1, metric="acc", mode="max",
                        stop={"training_iteration": 20, "acc": 0.95}))
    w = register(s)
    t = lease(s, w)
    assert report(s, t["id"], training_iteration=1, acc=0.5) == "continue"
    assert report(s, t["id"], training_iteration=2, acc=0.951) == "stop"
    tr = s.ok("GET", "/api/v1/trials/%d" % t["id"])
    assert tr["status"] == "TERMINATED" and tr["stopped_early"] is False, tr
    assert tr["reason"] == "stop rule: acc 0.951 >= 0.95", tr
    assert [(x["kind"], x["reason"]) for x in tr["events"]] == \
        [("stop_rule", "stop rule: acc 0.951 >= 0.95")], tr["events"]
    res = s.ok("GET", "/api/v1/trials/%d/results" % t["id"])["results"]
    assert res[-1]["acc"] == 0.951, res  # the result that reached it is kept
    s.restart()
    tr = s.ok("GET", "/api/v1/trials/%d" % t["id"])
    assert tr["reason"] == "stop rule: acc 0.951 >= 0.95" and len(tr["events"]) == 1, tr
    ex = s.ok("GET", "/api/v1/experiments/%d" % e["id"])
    assert ex["status"] == "TERMINATED", ex
    s.stop()


def test_asha_stop_has_reason():
    s = Server()
    s.ok("POST", "/api/v1/experiments",
         experiment(n=3, metric="loss", mode="min",
                    sched={"type": "asha", "max_t": 10, "grace_period": 4, "reduction_factor": 2}))
    w = register(s, cpu=8)
    ts = [lease(s, w) for _ in range(3)]
    dec = [report(s, t["id"], training_iteration=4, loss=v) for t, v in zip(ts, (0.39, 0.30, 0.41))]
    assert dec[2] == "stop", dec
    tr = s.ok("GET", "/api/v1/trials/%d" % ts[2]["id"])
    assert tr["stopped_early"] is True, tr
    assert tr["reason"] == "stopped at t=4: 0.41 worse than cutoff 0.345 of 3 trials at rung 4", tr
    assert tr["events"][0]["kind"] == "stopped", tr
    s.stop()


def test_time_budget_counts_only_running_server():
    s = Server()
    e = s.ok("POST", "/api/v1/experiments", experiment(n=3, time_budget_s=1.5))
    w = register(s, cpu=1)
    t = lease(s, w)
    assert report(s, t["id"], training_iteration=1, loss=1.0) == "continue"
    s.kill()
    time.sleep(2.0)  # downtime: not counted
    s.start()
    time.sleep(0.3)  # a few timer ticks: the downtime would have spent it
    ex = s.ok("GET", "/api/v1/experiments/%d" % e["id"])
    assert ex["status"] == "RUNNING", ex
    assert report(s, t["id"], training_iteration=2, loss=0.95) == "continue"
    time.sleep(1.6)
    # Spent: the running trial is stopped at its next result, which is kept.
    assert report(s, t["id"], training_iteration=3, loss=0.9) == "stop"
    tr = s.ok("GET", "/api/v1/trials/%d" % t["id"])
    assert tr["reason"] == "time_budget_s 1.5 spent" and tr["stopped_early"] is False, tr
    assert lease(s, w) is None
    for _ in range(50):
        ex = s.ok("GET", "/api/v1/experiments/%d" % e["id"])
        if ex["status"] != "RUNNING":
            break
        time.sleep(0.1)
    assert ex["status"] == "TERMINATED" and ex["end_reason"] == "time_budget_s 1.5 spent", ex
    s.stop()


def test_pause_then_paused_at_lease_end():
    os.environ["CTUNE_TEST_DECIDE"] = "pause_at=2"
    try:
        s = Server()
    finally:
        del os.environ["CTUNE_TEST_DECIDE"]
    s.ok("POST", "/api/v1/experiments", experiment(n=1))
    w = register(s, cpu=1)
    t = lease(s, w)
    assert report(s, t["id"], training_iteration=1, loss=1.0) == "continue"
    assert report(s, t["id"], training_iteration=2, loss=0.5) == "stop"
    tr = s.ok("GET", "/api/v1/trials/%d" % t["id"])
    assert tr["status"] == "RUNNING" and tr["reason"] == "paused at rung 2 (t=2)", tr
    st, b, _ = put_ckpt(s, t["id"], 2, b"paused-state")
    assert st in (200, 201, 204), (st, b)
    s.ok("POST", "/api/v1/trials/%d/complete" % t["id"], {})
    tr = s.ok("GET", "/api/v1/trials/%d" % t["id"])
    assert tr["status"] == "PAUSED" and tr["has_checkpoint"] and tr["worker_id"] is None, tr
    assert [x["kind"] for x in tr["events"]] == ["paused"], tr
    s.restart()
    tr = s.ok("GET", "/api/v1/trials/%d" % t["id"])
    assert tr["status"] == "PAUSED" and tr["reason"] == "paused at rung 2 (t=2)", tr
    s.stop()


def test_exploit_copies_donor_checkpoint():
    os.environ["CTUNE_TEST_DECIDE"] = "exploit_at=3,donor=1,set=lr:0.012"
    try:
        s = Server()
    finally:
        del os.environ["CTUNE_TEST_DECIDE"]
    s.ok("POST", "/api/v1/experiments", experiment(n=2))
    w = register(s, cpu=2)
    a, b = lease(s, w), lease(s, w)
    assert a["id"] == 1, a
    assert report(s, a["id"], training_iteration=3, loss=0.2) == "continue"  # the donor
    st, _, _ = put_ckpt(s, a["id"], 3, b"donor-bytes")
    assert st in (200, 201, 204), st
    assert report(s, b["id"], training_iteration=3, loss=0.9) == "stop"
    tr = s.ok("GET", "/api/v1/trials/%d" % b["id"])
    assert tr["config"]["lr"] == 0.012 and tr["reason"].startswith("exploited trial 1 at t=3"), tr
    ev = tr["events"][-1]
    assert ev["kind"] == "exploited" and ev["data"]["donor"] == 1 and ev["data"]["t"] == 3, ev
    assert ev["data"]["new_config"]["lr"] == 0.012 and ev["data"]["old_config"]["lr"] != 0.012, ev
    # Its own late checkpoint from that lease is refused.
    st, body, _ = put_ckpt(s, b["id"], 3, b"own-bytes")
    assert st == 409 and body["error"]["code"] == "not_leased", (st, body)
    assert "exploit_pending" in body["error"]["message"], body
    s.ok("POST", "/api/v1/trials/%d/complete" % b["id"], {})
    tr = s.ok("GET", "/api/v1/trials/%d" % b["id"])
    assert tr["status"] == "PENDING", tr
    st, data, _ = s.get("/api/v1/trials/%d/checkpoint" % b["id"], raw=True)
    assert st == 200 and data == b"donor-bytes", (st, data)
    s.stop()


if __name__ == "__main__":
    r = Runner()
    for fn in (test_stop_rule_reason_events_restart, test_asha_stop_has_reason,
               test_time_budget_counts_only_running_server, test_pause_then_paused_at_lease_end,
               test_exploit_copies_donor_checkpoint):
        r.run(fn)
    r.done()
