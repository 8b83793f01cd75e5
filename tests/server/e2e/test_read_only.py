#!/usr/bin/env python3
"""ctune-server --read-only (docs/server.md#read-only): it serves a database
as stored and changes nothing. Beside the server that writes the database
(no lock refuses it) both answer; alone, its GETs answer as before, every
write is refused 405 read_only, a RUNNING trial stays RUNNING past the lease
timeout, and the database file and <db>.login-url are byte for byte what
they were."""
import hashlib
import http.client
import os
import sqlite3
import subprocess
import time

from ctune_e2e import BIN_DIR, Runner, Server, experiment, lease, register, report


def digest(db):
    """The database's content (a dump through a read-only connection) and
    the main file's bytes."""
    con = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
    try:
        dump = "\n".join(con.iterdump())
        running = con.execute("SELECT id FROM trials WHERE status='RUNNING'").fetchall()
    finally:
        con.close()
    with open(db, "rb") as f:
        raw = f.read()
    return hashlib.sha256(dump.encode()).hexdigest(), hashlib.sha256(raw).hexdigest(), running


def first_event(srv):
    """The first event of GET /api/v1/events from a position no server can
    serve (a reset): the stream answers."""
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=10)
    try:
        conn.request("GET", "/api/v1/events", headers={
            "Accept": "text/event-stream", "Authorization": "Bearer " + srv.token,
            "Last-Event-ID": "1"})
        r = conn.getresponse()
        assert r.status == 200, (r.status, r.read())
        while True:
            line = r.readline()
            assert line, "the event stream ended"
            if line.startswith(b"event:"):
                return line.decode().split(":", 1)[1].strip()
    finally:
        conn.close()


def writes_refused(ro, eid, tid):
    for method, path, body in (("POST", "/api/v1/experiments", experiment(n=1)),
                               ("POST", "/api/v1/experiments/%d/cancel" % eid, {}),
                               ("DELETE", "/api/v1/experiments/%d" % eid, None),
                               ("PUT", "/api/v1/trials/%d/logs" % tid, None),
                               ("POST", "/api/v1/workers", {"name": "w2", "resources": {"cpu": 1}})):
        st, b, h = ro.request(method, path, body)
        assert st == 405 and b["error"]["code"] == "read_only", (method, path, st, b)
        assert "--read-only" in b["error"]["message"], b
        assert h.get("allow") == "GET, HEAD", h


def test_read_only_server():
    w = Server()
    eid = w.ok("POST", "/api/v1/experiments", experiment(n=2), status=201)["id"]
    wid = register(w)
    t1 = lease(w, wid)["id"]
    report(w, t1, loss=0.5, training_iteration=1)
    w.ok("POST", "/api/v1/trials/%d/complete" % t1, {})
    t2 = lease(w, wid)["id"]

    # Beside the writer: no lock refuses it, and both answer.
    ro = Server(db=w.db, args=["--read-only"], token=w.token)
    got = {t["id"]: t["status"] for t in ro.ok("GET", "/api/v1/experiments/%d/trials" % eid)["trials"]}
    assert got == {t1: "TERMINATED", t2: "RUNNING"}, got
    report(w, t2, loss=0.9, training_iteration=1)  # the writer goes on writing
    ro.stop()
    w.stop()

    # Its worker's row gone (pruned): a restarted writer would requeue t2 at
    # load, a read-only server shows it as stored.
    con = sqlite3.connect(w.db)
    con.execute("DELETE FROM workers WHERE id=?", (wid,))
    con.commit()
    con.close()
    with open(w.db + ".login-url", "rb") as f:
        login = f.read()
    before = digest(w.db)
    assert before[2] == [(t2,)], before[2]
    # Alone, with a lease timeout it would pass many times over were it
    # expiring leases.
    ro = Server(db=w.db, args=["--read-only", "--lease-timeout", "0.4"], token=w.token)
    best = ro.ok("GET", "/api/v1/experiments/%d/best" % eid)
    assert best["trial"]["id"] == t1, best
    assert ro.ok("GET", "/api/v1/trials/%d/results" % t2)["results"], "t2's result is gone"
    st, page, _ = ro.request("GET", "/", raw=True)
    assert st == 200 and b"<html" in page.lower(), st  # the dashboard
    assert first_event(ro) == "reset"
    writes_refused(ro, eid, t2)
    deadline = time.monotonic() + 1.2  # three lease timeouts
    while time.monotonic() < deadline:
        st = ro.ok("GET", "/api/v1/trials/%d" % t2)["status"]
        assert st == "RUNNING", "t2 is %s in the read-only server" % st
        assert " error " not in ro.stderr(), ro.stderr()
        time.sleep(0.05)
    ro.stop()
    assert digest(w.db) == before, "the read-only server changed the database"
    with open(w.db + ".login-url", "rb") as f:
        assert f.read() == login, "the read-only server rewrote the writer's login URL"


def test_old_schema_refused():
    w = Server()
    w.stop()
    con = sqlite3.connect(w.db)
    have = con.execute("PRAGMA user_version").fetchone()[0]
    con.execute("PRAGMA user_version=%d" % (have - 1))
    con.commit()
    con.close()
    p = subprocess.run([os.path.join(BIN_DIR, "ctune-server"), "--db", w.db, "--read-only",
                        "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    err = p.stderr.decode()
    assert p.returncode != 0, err
    assert "schema version %d, older than this server's %d" % (have - 1, have) in err, err
    con = sqlite3.connect(w.db)
    assert con.execute("PRAGMA user_version").fetchone()[0] == have - 1  # not migrated
    con.close()


if __name__ == "__main__":
    r = Runner()
    r.run(test_read_only_server)
    r.run(test_old_schema_refused)
    r.done()
