#!/usr/bin/env python3
"""Startup tolerates rows it cannot use
(ARCHITECTURE.md#startup-tolerates-rows-it-cannot-use), against real ctune-server processes.

Four experiments run with a scripted fake worker (lease, results,
checkpoint, complete); the server stops; sqlite3 damages rows of the stopped
database: A's config is not JSON, B's config is JSON the validator refuses
(num_samples -3), one trial of C has status 'BOGUS', one result row of D is
not JSON, and a worker row has an empty name. The restarted server must
start, warn once per unusable experiment (`load: experiment <id> not
loaded: <why>`), list only A..D's good ones (D: the bad result row alone is
skipped), answer A, B, C and their trials 409 `unusable` with the reason,
hand out ids above every old one, count the skipped rows in /metrics
(`ctune_unusable_rows`) and leave every damaged row byte-identical. A
second restart answers the same.
"""
import json
import os
import re
import sqlite3
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ctune_e2e import Runner, Server, lease, register, report  # noqa: E402

E = "/api/v1/experiments"
N = 3  # trials per experiment: two run to the end, the third stays RUNNING
ITERS = 3


def cfg(name):
    return {"name": name, "metric": "loss", "mode": "min", "num_samples": N, "seed": 11,
            "param_space": {"lr": {"type": "loguniform", "lower": 1e-4, "upper": 1e-1}},
            "resources_per_trial": {"cpu": 1}, "scheduler": {"type": "fifo"},
            "trainable": {"type": "command", "argv": ["true"]}}


def put_ckpt(s, tid, it):
    data = json.dumps({"trial": tid, "iteration": it}).encode()
    h = {"X-Ctune-Iteration": str(it), "X-Ctune-Crc32": "%08x" % zlib.crc32(data),
         "Content-Type": "application/octet-stream"}
    st, b, _ = s.request("PUT", "/api/v1/trials/%d/checkpoint" % tid, data, headers=h)
    assert st in (200, 201, 204), (st, b)


def rows(db, sql, args=()):
    c = sqlite3.connect(db)
    try:
        return c.execute(sql, args).fetchall()
    finally:
        c.close()


def edit(db, *stmts):
    c = sqlite3.connect(db)
    for q, a in stmts:
        c.execute(q, a)
    c.commit()
    c.close()


def snapshot(db, exps, bad_seq, bad_worker):
    """Every row of the given experiments (all their tables), the damaged
    result row and the damaged worker row, exactly as SQLite holds them."""
    q = ",".join("?" * len(exps))
    tids = "SELECT id FROM trials WHERE experiment_id IN (%s)" % q
    snap = {}
    for table, where, args in (
            ("experiments", "id IN (%s)" % q, exps),
            ("trials", "experiment_id IN (%s)" % q, exps),
            ("results", "experiment_id IN (%s) OR seq = ?" % q, exps + [bad_seq]),
            ("checkpoints", "trial_id IN (%s)" % tids, exps),
            ("logs", "trial_id IN (%s)" % tids, exps),
            ("asha_records", "experiment_id IN (%s)" % q, exps),
            ("sched_records", "experiment_id IN (%s)" % q, exps),
            ("trial_events", "experiment_id IN (%s)" % q, exps),
            ("workers", "id = ?", [bad_worker])):
        # quote() shows each value with its storage class: text vs blob vs number
        cols = [r[1] for r in rows(db, "PRAGMA table_info(%s)" % table)]
        expr = " || '|' || ".join("quote(%s)" % c for c in cols)
        snap[table] = rows(db, "SELECT %s FROM %s WHERE %s ORDER BY rowid" % (expr, table, where),
                           args)
    return snap


def unusable(s, path, why):
    st, b, _ = s.get(path)
    assert st == 409, (path, st, b)
    err = b["error"]
    assert err["code"] == "unusable", (path, b)
    assert "not loaded" in err["message"] and why in err["message"], (path, why, b)
    return err["message"]


def metric(s, name):
    st, body, _ = s.get("/metrics", raw=True)
    assert st == 200, (st, body)
    m = re.search(r"^%s (\S+)$" % name, body.decode(), re.M)
    assert m, "no %s in /metrics:\n%s" % (name, body.decode())
    return float(m.group(1))


def setup():
    """Runs four experiments to the damage point; returns the stopped server
    and what the test needs to know about the rows."""
    s = Server()
    # the validator refuses what B's row will say
    st, b, _ = s.post(E, dict(cfg("refused"), num_samples=-3))
    assert st == 400, (st, b)
    eids = [s.ok("POST", E, cfg(n), status=201)["id"] for n in "ABCD"]
    w = register(s, cpu=4 * N)
    by_exp = {e: [] for e in eids}
    for _ in range(4 * N):
        t = lease(s, w)
        assert t is not None
        by_exp[t["experiment_id"]].append(t["id"])
    for e in eids:
        tids = by_exp[e]
        assert len(tids) == N, by_exp
        for k, tid in enumerate(tids):
            for it in range(1, ITERS + 1):
                assert report(s, tid, training_iteration=it, loss=1.0 / (it + k)) == "continue"
            put_ckpt(s, tid, ITERS)
            if k < N - 1:
                st, b, _ = s.post("/api/v1/trials/%d/complete" % tid, {})
                assert st in (200, 204), (st, b)
    s.stop()
    return s, eids, by_exp, w


def test_startup_tolerates_unusable_rows():
    s, (A, B, C, D), by_exp, w = setup()
    db = s.db
    # A: not JSON; B: JSON the validator refuses; C: one (ended) trial with
    # an unknown status; D: one result of its RUNNING trial is not JSON.
    (cfg_b,), = rows(db, "SELECT config FROM experiments WHERE id = ?", (B,))
    cfg_b = dict(json.loads(cfg_b), num_samples=-3)
    bogus = by_exp[C][0]
    d_run = by_exp[D][-1]
    (bad_seq,), = rows(db, "SELECT seq FROM results WHERE trial_id = ? AND t = 2", (d_run,))
    (max_trial, max_exp, max_worker), = rows(
        db, "SELECT (SELECT max(id) FROM trials), (SELECT max(id) FROM experiments), "
            "(SELECT max(id) FROM workers)")
    assert max_exp == D
    bad_worker = max_worker + 1
    # the schema allows an empty worker name (TEXT NOT NULL); registration refuses it
    wcols = [r[1] for r in rows(db, "PRAGMA table_info(workers)")]
    assert "name" in wcols
    edit(db,
         ("UPDATE experiments SET config = ? WHERE id = ?", ("{not json at all", A)),
         ("UPDATE experiments SET config = ? WHERE id = ?", (json.dumps(cfg_b), B)),
         ("UPDATE trials SET status = 'BOGUS' WHERE id = ?", (bogus,)),
         ("UPDATE results SET data = ? WHERE seq = ?", ("{\"loss\": 0.5, oops", bad_seq)),
         ("INSERT INTO workers (id, name, cpu, gpu, memory_mb, registered_at, last_heartbeat)"
          " VALUES (?, '', 1, 0, 0, 0, 0)", (bad_worker,)))
    before = snapshot(db, [A, B, C], bad_seq, bad_worker)
    assert before["experiments"] and before["trials"] and before["results"] and before["workers"]
    # D's other results, as the API will list them
    d_expect = {tid: list(range(1, ITERS + 1)) for tid in by_exp[D]}
    d_expect[d_run] = [it for it in range(1, ITERS + 1) if it != 2]

    def check(new_name):
        """The restarted server's answers; returns the new experiment's id."""
        log = s.stderr()[mark[0]:]
        why = {}
        for eid in (A, B, C, D):
            lines = re.findall(r"load: experiment %d not loaded: (.*)" % eid, log)
            if eid == D:
                assert not lines, lines
            else:
                assert len(lines) == 1, (eid, lines, log)
                why[eid] = lines[0].strip()
        assert re.search(r"config|json|pars", why[A], re.I), why
        assert "num_samples" in why[B], why
        assert re.search(r"bogus|status", why[C], re.I), why
        # the bad result row and the bad worker row: each skipped with a warning
        assert len(re.findall(r"load: result %d\b.*skipped" % bad_seq, log)) == 1, log
        assert len(re.findall(r"load: worker %d\b.*skipped" % bad_worker, log)) == 1, log
        # lists: only the loaded experiments
        listed = [e["id"] for e in s.ok("GET", E + "?limit=10000")["experiments"]]
        assert D in listed and not {A, B, C} & set(listed), listed
        # the experiment, its trials list, one of its trials: 409 unusable
        for eid in (A, B, C):
            unusable(s, "%s/%d" % (E, eid), why[eid])
            unusable(s, "%s/%d/trials" % (E, eid), why[eid])
        unusable(s, "/api/v1/trials/%d" % bogus, why[C])
        unusable(s, "/api/v1/trials/%d" % by_exp[C][-1], why[C])
        unusable(s, "/api/v1/trials/%d" % by_exp[A][0], why[A])
        # D: loaded whole but for its bad result row
        e = s.ok("GET", "%s/%d" % (E, D))
        assert e["status"] == "RUNNING", e
        assert e["counts"]["TERMINATED"] == N - 1 and e["counts"]["RUNNING"] == 1, e["counts"]
        got = [t["id"] for t in s.ok("GET", "%s/%d/trials" % (E, D))["trials"]]
        assert sorted(got) == sorted(by_exp[D]), got
        for tid, its in d_expect.items():
            res = s.ok("GET", "/api/v1/trials/%d/results" % tid)["results"]
            assert [r["training_iteration"] for r in res] == its, (tid, res)
        st, data, _ = s.get("/api/v1/trials/%d/checkpoint" % by_exp[D][0], raw=True)
        assert st == 200 and json.loads(data)["iteration"] == ITERS, (st, data)
        # the empty-named worker row is skipped; the real one is still there
        ws = s.ok("GET", "/api/v1/workers?limit=10000")["workers"]
        assert w in [x["id"] for x in ws] and bad_worker not in [x["id"] for x in ws], ws
        # at least the five damaged rows (3 experiments, 1 result, 1 worker)
        assert metric(s, "ctune_unusable_rows") >= 5
        # new ids are above every old one, loaded or not
        nid = s.ok("POST", E, cfg(new_name), status=201)["id"]
        assert nid > max_exp, (nid, max_exp)
        w2 = register(s, cpu=1, name="w-" + new_name)
        assert w2 > bad_worker, (w2, bad_worker)
        t = lease(s, w2)
        assert t is not None and t["experiment_id"] == nid, t
        assert t["id"] > max_trial, (t, max_trial)
        return nid

    mark = [len(s.stderr())]
    s.start()  # today's server refuses to start here
    n1 = check("E")
    s.stop()
    after = snapshot(db, [A, B, C], bad_seq, bad_worker)
    assert after == before, "damaged rows changed:\n%s\n%s" % (before, after)
    # again: the same answers; the experiment made last time is listed
    mark[0] = len(s.stderr())
    s.start()
    n2 = check("F")
    assert n2 > n1
    listed = [e["id"] for e in s.ok("GET", E + "?limit=10000")["experiments"]]
    assert n1 in listed and n2 in listed, listed
    s.stop()
    assert snapshot(db, [A, B, C], bad_seq, bad_worker) == before


if __name__ == "__main__":
    r = Runner()
    r.run(test_startup_tolerates_unusable_rows)
    r.done()
