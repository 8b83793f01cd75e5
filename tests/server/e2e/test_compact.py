#!/usr/bin/env python3
"""Bounded memory (ARCHITECTURE.md#bounded-memory): an ended trial is
kept in memory as a summary and SQLite has the rest. Every answer about it
stays the same: before and after its history leaves memory, after a restart
(which does not read its results: a damaged result row of an ended trial is
not even parsed), and after a restart on a database whose rows have no
summary yet (an older server's; the summaries are computed once and written
back). A replay of an ended trial's result still gets its stored decision,
and an extend that resumes an ended trial brings its history back first.

A finished experiment then goes cold (its trials leave memory; its row,
counts and best stay): its own JSON is answered as it is, and any read of
its trials warms it first, with the same answers; after a restart it is cold
from the start.

The delays are shortened with CTUNE_TEST_COMPACT_DELAY_MS=0 and
CTUNE_TEST_COLD_DELAY_MS (COLD_S: long enough against the server's 100 ms
tick and a loaded machine's stalls, short because the test waits for it
four times).
"""
import json
import os
import sqlite3
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ctune_e2e import Runner, Server, lease, register, report  # noqa: E402

os.environ["CTUNE_TEST_COMPACT_DELAY_MS"] = "0"
COLD_S = 0.4
os.environ["CTUNE_TEST_COLD_DELAY_MS"] = str(int(COLD_S * 1000))
E = "/api/v1/experiments"
SCOPES = ("last", "avg", "last-5-avg", "last-10-avg", "all")


def cfg():
    return {"name": "compact", "metric": "loss", "mode": "min", "num_samples": 3, "seed": 5,
            "param_space": {"lr": {"type": "loguniform", "lower": 1e-4, "upper": 1e-1}},
            "resources_per_trial": {"cpu": 1},
            "scheduler": {"type": "fifo", "max_t": 6},
            "trainable": {"type": "command", "argv": ["true"]}}


def res(it, loss, acc):
    return {"training_iteration": it, "loss": loss, "acc": acc}


def metric(s, name):
    st, body, _ = s.get("/metrics", raw=True)
    assert st == 200, st
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no %s in /metrics" % name)


def wait_compact(s, n):
    deadline = time.time() + 10
    while metric(s, "ctune_trials_compact") != n:
        assert time.time() < deadline, "trials never compacted: %s" % metric(s, "ctune_trials_compact")
        s.get("/api/v1/experiments?limit=1")  # any request; the server compacts on its own tick
        time.sleep(0.05)


def exp_json(s, eid):
    e = s.ok("GET", "%s/%d" % (E, eid))
    e.pop("pending_reason", None)  # as snapshot() leaves it out
    return json.loads(json.dumps(e, sort_keys=True))


def wait_cold(s, n):
    deadline = time.time() + 10
    while metric(s, "ctune_experiments_cold") != n:
        assert time.time() < deadline, "never cold: %s" % metric(s, "ctune_experiments_cold")
        time.sleep(0.05)


def all_results(s, tid):
    out, cursor = [], None
    while True:
        q = "/api/v1/trials/%d/results?limit=2" % tid + ("&cursor=%s" % cursor if cursor else "")
        b = s.ok("GET", q)
        out += b["results"]
        cursor = b["next_cursor"]
        if not cursor:
            return out


def snapshot(s, eid, tids):
    """Every answer about the experiment's ended trials that memory used to
    give: trial JSON, result pages, best by every scope and mode, best by
    another key, the trials list and the experiment."""
    snap = {"exp": s.ok("GET", "%s/%d" % (E, eid)),
            "list": s.ok("GET", "%s/%d/trials" % (E, eid))}
    for t in tids:
        snap["t%d" % t] = s.ok("GET", "/api/v1/trials/%d" % t)
        snap["r%d" % t] = all_results(s, t)
    for scope in SCOPES:
        for mode in ("min", "max"):
            for m in ("loss", "acc"):
                st, b, _ = s.get("%s/%d/best?metric=%s&mode=%s&scope=%s" % (E, eid, m, mode, scope))
                snap["best-%s-%s-%s" % (m, mode, scope)] = (st, b)
    for v in snap.values():  # the parts that may change without a change to the trials
        if isinstance(v, dict):
            v.pop("pending_reason", None)
    return json.loads(json.dumps(snap, sort_keys=True))


def put_ckpt(s, tid, it):
    data = json.dumps({"trial": tid, "iteration": it}).encode()
    h = {"X-Ctune-Iteration": str(it), "X-Ctune-Crc32": "%08x" % zlib.crc32(data),
         "Content-Type": "application/octet-stream"}
    st, b, _ = s.request("PUT", "/api/v1/trials/%d/checkpoint" % tid, data, headers=h)
    assert st in (200, 201, 204), (st, b)


def complete(s, tid):
    st, b, _ = s.post("/api/v1/trials/%d/complete" % tid, {})
    assert st in (200, 204), (st, b)


def diff(a, b):
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    return ("; ".join("%s: %s != %s" % (k, json.dumps(a.get(k)), json.dumps(b.get(k)))
                      for k in keys))[:4000]


def test_compact_same_answers():
    s = Server()
    eid = s.ok("POST", E, cfg(), status=201)["id"]
    w = register(s, cpu=3)
    a, b, c = (lease(s, w)["id"] for _ in range(3))
    # a: six results, a null loss in the window of last-5 and last-10 (but
    # not last), values that 15 digits would not carry; b: six plain ones;
    # c: three, then it ends early.
    la = [0.9, 0.1234567890123456789, None, 0.5, 0.40000000000000002, 0.3]
    for i, v in enumerate(la, 1):
        d = report(s, a, **res(i, v, 0.1 * i))
        if i in (2, 6):
            put_ckpt(s, a, i)
    assert d == "stop"
    for i in range(1, 7):
        report(s, b, **res(i, 1.0 / (i + 1), 0.5 + 0.01 * i))
    for i in range(1, 4):
        report(s, c, **res(i, 2.0 - 0.1 * i, 0.9))
    for t in (a, b, c):
        complete(s, t)
    before = snapshot(s, eid, (a, b, c))
    assert before["exp"]["status"] == "TERMINATED", before["exp"]
    assert [r["training_iteration"] for r in before["r%d" % a]] == [1, 2, 3, 4, 5, 6]
    assert before["best-loss-min-last"][1]["trial_id"] == b, before["best-loss-min-last"]

    # The histories leave memory, then the trials themselves (the experiment
    # is cold): nothing answers differently; the experiment's own JSON
    # (counts, best) is answered without reading its trials back.
    wait_cold(s, 1)
    assert metric(s, "ctune_trials_compact") == 0
    assert exp_json(s, eid) == before["exp"]
    assert metric(s, "ctune_experiments_cold") == 1
    after = snapshot(s, eid, (a, b, c))
    assert after == before, diff(before, after)
    # Reading it keeps it warm (cold COLD_S after the last read, not after
    # the first): read for 2.5 COLD_S and until 5 reads were judged; left
    # alone it goes cold again.
    t0 = time.time()
    checked = 0
    while time.time() - t0 < 2.5 * COLD_S or checked < 5:
        assert time.time() - t0 < 30, "only %d reads judged in 30 s" % checked
        sent = time.time()
        s.ok("GET", "%s/%d/trials?limit=1" % (E, eid))
        time.sleep(COLD_S / 10)  # time passing is what is tested here
        cold = metric(s, "ctune_experiments_cold")
        # Judged only when the read and the check were close together: a
        # stall of COLD_S in between (a loaded machine) lets it go cold rightly.
        if time.time() - sent < 0.7 * COLD_S:
            assert cold == 0, "cold while being read"
            checked += 1
    wait_cold(s, 1)
    # A replay of an ended trial's results gets its stored decision (from
    # SQLite now) and stores nothing.
    st, body, _ = s.post("/api/v1/trials/%d/results" % a, res(6, la[5], 0.6))
    assert st == 200 and body["decision"] == "stop", (st, body)
    st, body, _ = s.post("/api/v1/trials/%d/results" % a, res(3, None, 0.3))
    assert st == 200 and body["decision"] == "continue", (st, body)
    st, body, _ = s.post("/api/v1/trials/%d/results" % a, res(7, 0.2, 0.7))
    assert st == 409 and body["error"]["code"] == "not_leased", (st, body)
    assert len(all_results(s, a)) == 6

    # A restart loads them as summaries, without reading their results: a
    # damaged result row of an ended trial is not even parsed.
    s.stop()
    db = sqlite3.connect(s.db)
    seq, data = db.execute("SELECT seq, data FROM results WHERE trial_id=? ORDER BY seq LIMIT 1",
                           (c,)).fetchone()
    db.execute("UPDATE results SET data='not json' WHERE seq=?", (seq,))
    db.commit()
    s.start()
    assert metric(s, "ctune_experiments_cold") == 1  # cold from the start
    assert metric(s, "ctune_trials_compact") == 0
    assert metric(s, "ctune_unusable_rows") == 0, s.stderr()[-2000:]
    assert exp_json(s, eid) == before["exp"]
    s.stop()
    db.execute("UPDATE results SET data=? WHERE seq=?", (data, seq))
    db.commit()
    s.start()
    after = snapshot(s, eid, (a, b, c))
    assert after == before, diff(before, after)

    # An older database (rows without summaries): computed once at start,
    # written back, same answers.
    cols = "res_known,nres,first_seq,last_seq,last_t,score_last,score_avg,score_last5," \
           "score_last10,score_min,score_max"
    summaries = db.execute("SELECT id,%s FROM trials ORDER BY id" % cols).fetchall()
    assert all(r[1] == 1 for r in summaries), summaries
    s.stop()
    db.execute("UPDATE trials SET res_known=0,nres=0,first_seq=0,last_seq=0,last_t=NULL,"
               "score_last=NULL,score_avg=NULL,score_last5=NULL,score_last10=NULL,"
               "score_min=NULL,score_max=NULL")
    db.commit()
    s.start()
    assert "summarized 3 ended trial(s)" in s.stderr(), s.stderr()[-2000:]
    assert db.execute("SELECT id,%s FROM trials ORDER BY id" % cols).fetchall() == summaries
    after = snapshot(s, eid, (a, b, c))
    assert after == before, diff(before, after)
    db.close()

    # An extend resumes the trials that reached max_t: a and b come back
    # whole from SQLite (a from its checkpoint at 6) and go on.
    wait_cold(s, 1)
    e = s.ok("PATCH", "%s/%d" % (E, eid), {"scheduler": {"max_t": 8}})
    assert e["status"] == "RUNNING" and e["counts"]["PENDING"] == 2, e
    assert metric(s, "ctune_trials_compact") == 1
    t = lease(s, w)
    assert t["id"] == a and t["start_iteration"] == 6, t
    assert report(s, a, **res(7, 0.05, 0.7)) == "continue"
    assert report(s, a, **res(8, 0.04, 0.8)) == "stop"
    complete(s, a)
    t = lease(s, w)
    assert t["id"] == b, t
    assert report(s, b, **res(7, 0.5, 0.1)) == "continue"
    assert report(s, b, **res(8, 0.5, 0.1)) == "stop"
    complete(s, b)
    ra = [r["training_iteration"] for r in all_results(s, a)]
    assert ra == [1, 2, 3, 4, 5, 6, 7, 8], ra
    best = s.ok("GET", "%s/%d/best?scope=last" % (E, eid))
    assert best["trial_id"] == a and best["value"] == 0.04, best
    wait_cold(s, 1)
    s.restart()
    assert [r["training_iteration"] for r in all_results(s, a)] == ra
    best2 = s.ok("GET", "%s/%d/best?scope=last" % (E, eid))
    assert best2 == best, (best, best2)
    s.stop()


if __name__ == "__main__":
    run = Runner()
    run.run(test_compact_same_answers)
    run.done()
