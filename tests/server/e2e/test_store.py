"""ctune-server's store against real processes: multi-row changes are atomic,
loading repairs what a crash left half done, the change counter never goes
backwards across a restart, a write the database refuses fails only its own
request and the server stays writable, a transient BUSY is retried.

Faults are injected with CTUNE_TEST_FAULT (server/store/store.h, a test-build hook: common/testhook.h), only here."""
import http.client
import os
import signal
import sqlite3
import time
import zlib

from ctune_e2e import Server, Runner, experiment, register, lease


def start(fault=None, db=None, args=()):
    """A server, with a test fault in its environment when asked."""
    old = os.environ.pop("CTUNE_TEST_FAULT", None)
    if fault:
        os.environ["CTUNE_TEST_FAULT"] = fault
    try:
        return Server(db=db, args=args)
    finally:
        os.environ.pop("CTUNE_TEST_FAULT", None)
        if old is not None:
            os.environ["CTUNE_TEST_FAULT"] = old


def restart(s, fault=None):
    s.kill()
    old = os.environ.pop("CTUNE_TEST_FAULT", None)
    if fault:
        os.environ["CTUNE_TEST_FAULT"] = fault
    try:
        s.start()
    finally:
        os.environ.pop("CTUNE_TEST_FAULT", None)
        if old is not None:
            os.environ["CTUNE_TEST_FAULT"] = old


def fence(w, t):
    return {"X-Ctune-Lease": "%d:%d" % (w, t["attempt"])}


def result(s, w, t, it, loss=0.5):
    return s.ok("POST", "/api/v1/trials/%d/results" % t["id"],
                {"training_iteration": it, "loss": loss}, headers=fence(w, t))


def complete(s, w, t, status=200):
    return s.ok("POST", "/api/v1/trials/%d/complete" % t["id"], {}, headers=fence(w, t),
                status=status)


def put_checkpoint(s, w, t, it, data):
    h = fence(w, t)
    h.update({"Content-Type": "application/octet-stream", "X-Ctune-Iteration": str(it),
              "X-Ctune-Crc32": "%08x" % (zlib.crc32(data) & 0xffffffff)})
    return s.request("PUT", "/api/v1/trials/%d/checkpoint" % t["id"], data, headers=h)


def exp_status(s, eid=1):
    return s.ok("GET", "/api/v1/experiments/%d" % eid)


def edit(db, *sql):
    c = sqlite3.connect(db)
    for q in sql:
        c.execute(q)
    c.commit()
    c.close()


def test_repair_running_experiment_whose_trials_all_ended():
    s = start()
    s.ok("POST", "/api/v1/experiments", experiment(n=2, sched={"type": "fifo"}), status=201)
    w = register(s)
    ts = [lease(s, w), lease(s, w)]
    for t in ts:
        result(s, w, t, 1)
        complete(s, w, t)
    assert exp_status(s)["status"] == "TERMINATED"
    s.kill()
    # what a crash between the trial end and the experiment end left (before
    # both were one transaction)
    edit(s.db, "UPDATE experiments SET status='RUNNING', ended_at=NULL WHERE id=1")
    s.start()
    e = exp_status(s)
    assert e["status"] == "TERMINATED", e
    assert e["ended_at"] is not None
    # repaired on disk too: a second restart finds it so
    s.restart()
    assert exp_status(s)["status"] == "TERMINATED"
    s.stop()


def test_start_on_a_full_disk_names_the_cause():
    """A restart whose self-repair must write, on a disk that refuses the
    write (full): exit 1 with SQLite's reason, the database and the free
    space named, nothing changed; once writable, it starts and repairs."""
    s = start()
    s.ok("POST", "/api/v1/experiments", experiment(n=1, sched={"type": "fifo"}), status=201)
    w = register(s)
    t = lease(s, w)
    result(s, w, t, 1)
    complete(s, w, t)
    s.kill()
    edit(s.db, "UPDATE experiments SET status='RUNNING', ended_at=NULL WHERE id=1")
    os.environ["CTUNE_TEST_FAULT"] = "disk_full=1"
    try:
        rc = s.start(expect_fail=True)
    finally:
        os.environ.pop("CTUNE_TEST_FAULT", None)
    err = s.stderr()
    assert rc == 1, (rc, err)
    want = ("cannot start: the database %s needs a write at start to finish what a crash "
            "left half done, and it was refused: database or disk is full (injected) (%s has "
            % (os.path.realpath(s.db), os.path.dirname(os.path.realpath(s.db))))
    tail = ("KiB free: is the disk full? free some space there). Nothing was changed; start "
            "again once the database can be written")
    assert want in err and tail in err, err
    s.kill()
    s.start()
    assert exp_status(s)["status"] == "TERMINATED"
    s.stop()


def test_repair_half_cancelled_experiment():
    s = start()
    s.ok("POST", "/api/v1/experiments", experiment(n=3, sched={"type": "fifo"}), status=201)
    w = register(s, cpu=1)
    t1 = lease(s, w)
    # trials are made at lease time: a second worker makes the other two
    w2 = register(s, cpu=2, name="w2")
    lease(s, w2), lease(s, w2)
    s.ok("POST", "/api/v1/experiments/1/cancel", {})
    s.kill()
    # the cancel's experiment row went in, its trial rows did not
    edit(s.db, "UPDATE trials SET status='RUNNING', ended_at=NULL, worker_id=%d WHERE id=%d"
         % (w, t1["id"]), "UPDATE trials SET status='PENDING', ended_at=NULL WHERE id>1")
    s.start()
    e = exp_status(s)
    assert e["status"] == "CANCELLED", e
    assert e["counts"]["TERMINATED"] == 3 and e["counts"]["RUNNING"] == 0, e["counts"]
    # nothing is leased from a cancelled experiment, and the worker is told to stop
    assert lease(s, w) is None
    free = [x for x in s.ok("GET", "/api/v1/workers")["workers"] if x["id"] == w][0]["free"]
    assert free["cpu"] == 1, free
    s.restart()
    assert exp_status(s)["counts"]["TERMINATED"] == 3
    s.stop()


def test_kill9_right_after_trial_end_commit():
    """The test hook SIGKILLs the server right after the commit that ends a
    trial: the experiment's end must be in that same commit."""
    s = start(fault="kill_after_trial_end=1")
    s.ok("POST", "/api/v1/experiments", experiment(n=1, sched={"type": "fifo"}), status=201)
    w = register(s)
    t = lease(s, w)
    result(s, w, t, 1)
    try:
        s.request("POST", "/api/v1/trials/%d/complete" % t["id"], {}, headers=fence(w, t))
    except Exception:
        pass  # the server died before (or while) answering
    s.proc.wait(timeout=10)
    assert s.proc.returncode == -signal.SIGKILL, s.proc.returncode
    restart(s)
    e = exp_status(s)
    assert e["status"] == "TERMINATED", e
    assert e["counts"]["TERMINATED"] == 1
    s.stop()


def test_since_never_goes_backwards_across_restart():
    s = start()
    s.ok("POST", "/api/v1/experiments", experiment(n=1, sched={"type": "fifo"}), status=201)
    w = register(s)
    t = lease(s, w)
    result(s, w, t, 1)
    st, b, _ = put_checkpoint(s, w, t, 1, b"state-at-1")
    assert st == 200, (st, b)
    last = s.ok("GET", "/api/v1/experiments/1/trials?since=0")["last_seq"]
    s.kill()  # kill -9: every acknowledged change (and its number) is on disk
    s.start()
    # nothing changed since `last`
    got = s.ok("GET", "/api/v1/experiments/1/trials?since=%d" % last)
    assert got["trials"] == [], got
    assert got["last_seq"] >= last
    result(s, w, t, 2)
    got = s.ok("GET", "/api/v1/experiments/1/trials?since=%d" % last)
    assert [x["id"] for x in got["trials"]] == [t["id"]], got
    assert got["trials"][0]["updated_seq"] > last
    res = s.ok("GET", "/api/v1/experiments/1/results?since=%d" % last)["results"]
    assert [r["result"]["training_iteration"] for r in res] == [2], res
    s.stop()


def test_refused_write_fails_alone_and_server_stays_writable():
    """A checkpoint over the database's length limit (set low by the test
    hook: a real SQLITE_TOOBIG): that upload errors, the requests after it
    succeed without a restart, and memory matches the database. The model's
    rebuild is slowed (300 ms): the refusal is answered only after it, so the
    next read never sees the refused checkpoint."""
    s = start(fault="blob_limit=200000,repair_delay_ms=300")
    s.ok("POST", "/api/v1/experiments", experiment(n=2, sched={"type": "fifo"}), status=201)
    w = register(s)
    t = lease(s, w)
    result(s, w, t, 1)
    result(s, w, t, 2)
    st, b, _ = put_checkpoint(s, w, t, 2, b"x" * 300000)
    assert st == 500 and b["error"]["code"] == "store_error", (st, b)
    assert "big" in b["error"]["message"], b  # SQLite's reason: string or blob too big
    # the failed upload left nothing behind: no checkpoint, in memory or on disk
    tr = s.ok("GET", "/api/v1/trials/%d" % t["id"])
    assert not tr.get("has_checkpoint"), tr
    assert s.get("/api/v1/trials/%d/checkpoint" % t["id"])[0] == 404
    # the server is still writable: results, a smaller checkpoint, a new experiment
    assert result(s, w, t, 3)["decision"] == "continue"
    st, b, _ = put_checkpoint(s, w, t, 3, b"y" * 1000)
    assert st == 200, (st, b)
    st, data, _ = s.get("/api/v1/trials/%d/checkpoint" % t["id"], raw=True)
    assert st == 200 and data == b"y" * 1000
    s.ok("POST", "/api/v1/experiments", experiment(name="f", n=1), status=201)
    t2 = lease(s, w)
    assert t2 is not None
    result(s, w, t2, 1)
    # a clean stop after the rebuild (the sanitizer build checks the old
    # model is freed), and all of it is there after the restart
    s.stop()
    s.start()
    res = s.ok("GET", "/api/v1/trials/%d/results" % t["id"])["results"]
    assert [r["training_iteration"] for r in res] == [1, 2, 3], res
    assert len(s.ok("GET", "/api/v1/experiments")["experiments"]) == 2
    s.stop()


def test_change_queued_behind_a_refused_one_is_retried():
    """A refused write and a result that was queued right behind it, in the
    same batch: the first gets 500, the second 503 with Retry-After and is
    not stored (it might build on the refused change); sent again, it is
    stored. The test's own connection holds the database's write lock (as
    an operator's sqlite3 would: the writer waits for it), so that a first
    result holds the writer and the upload and the result line up behind it,
    each seen queued (ctune_commit_pending) before the next is sent; then
    the lock goes."""
    import json
    import threading
    s = start(fault="blob_limit=200000")
    s.ok("POST", "/api/v1/experiments", experiment(n=2, sched={"type": "fifo"}), status=201)
    w = register(s)
    t1, t2 = lease(s, w), lease(s, w)
    result(s, w, t1, 1)
    out = {}

    def send(name, method, path, body, headers):
        # tokens by default: these raw requests carry the admin token too
        headers = dict(headers, Authorization="Bearer " + s.token)
        c = http.client.HTTPConnection(s.host, s.port, timeout=30)
        c.request(method, path, body, headers)
        r = c.getresponse()
        out[name] = (r.status, json.loads(r.read()), r.getheader("Retry-After"))
        c.close()

    def post_result(name, tid, it):
        t = {t1["id"]: t1, t2["id"]: t2}[tid]
        h = dict(fence(w, t), **{"Content-Type": "application/json"})
        send(name, "POST", "/api/v1/trials/%d/results" % tid,
             json.dumps({"training_iteration": it, "loss": 0.5}), h)

    def queued(n):
        deadline = time.time() + 10
        while metric(s, "ctune_commit_pending") < n:
            assert time.time() < deadline, "never %d change(s) queued" % n
            time.sleep(0.01)  # no event to wait on: the gauge, polled

    big = b"x" * 300000
    h = fence(w, t1)
    h.update({"Content-Type": "application/octet-stream", "X-Ctune-Iteration": "1",
              "X-Ctune-Crc32": "%08x" % (zlib.crc32(big) & 0xffffffff)})
    assert metric(s, "ctune_commit_pending") == 0
    lock = sqlite3.connect(s.db, timeout=10, isolation_level=None, check_same_thread=False)
    lock.execute("BEGIN IMMEDIATE")
    threads = []
    try:
        for n, (fn, args) in enumerate(
                [(post_result, ("first", t2["id"], 1)),
                 (send, ("bad", "PUT", "/api/v1/trials/%d/checkpoint" % t1["id"], big, h)),
                 (post_result, ("behind", t2["id"], 2))], 1):
            threads.append(threading.Thread(target=fn, args=args))
            threads[-1].start()
            queued(n)
    finally:
        lock.execute("COMMIT")
        lock.close()
    for th in threads:
        th.join()
    assert out["first"][0] == 200, out
    assert out["bad"][0] == 500 and out["bad"][1]["error"]["code"] == "store_error", out
    st, body, retry = out["behind"]
    assert st == 503 and body["error"]["code"] == "store_retry" and retry == "1", out
    assert metric(s, "ctune_commit_pending") == 0
    # not stored, and the model forgot it: the same result again is stored
    assert [r["training_iteration"] for r in
            s.ok("GET", "/api/v1/trials/%d/results" % t2["id"])["results"]] == [1]
    assert result(s, w, t2, 2)["decision"] == "continue"
    assert [r["training_iteration"] for r in
            s.ok("GET", "/api/v1/trials/%d/results" % t2["id"])["results"]] == [1, 2]
    s.stop()


def test_busy_database_is_retried():
    s = start(fault="busy=4")
    s.ok("POST", "/api/v1/experiments", experiment(n=1, sched={"type": "fifo"}), status=201)
    w = register(s)
    t = lease(s, w)
    assert result(s, w, t, 1)["decision"] == "continue"
    assert "busy" in s.stderr()
    s.stop()


def test_writer_waits_for_another_connection():
    """An operator's sqlite3 holding the write lock for a moment delays the
    replies; it does not fail them."""
    s = start()
    s.ok("POST", "/api/v1/experiments", experiment(n=1, sched={"type": "fifo"}), status=201)
    w = register(s)
    t = lease(s, w)
    c = sqlite3.connect(s.db, timeout=10, isolation_level=None, check_same_thread=False)
    c.execute("BEGIN IMMEDIATE")
    import threading
    threading.Timer(0.5, lambda: c.execute("COMMIT")).start()
    t0 = time.time()
    assert result(s, w, t, 1)["decision"] == "continue"
    assert time.time() - t0 >= 0.4
    c.close()
    s.restart()
    assert len(s.ok("GET", "/api/v1/trials/%d/results" % t["id"])["results"]) == 1
    s.stop()


def test_result_is_acknowledged_only_after_its_flush():
    """--durability full (the default): a result's reply goes out only after
    the WAL that holds it is flushed to the disk. When that flush fails,
    nobody can tell what the disk holds: the server answers nothing more and
    exits 1, so the worker keeps the result and sends it again; a restart
    serves what the database really holds, and the resend is stored once."""
    s = start(fault="sync_fail_after_result=1")
    s.ok("POST", "/api/v1/experiments", experiment(n=1, sched={"type": "fifo"}), status=201)
    w = register(s)
    t = lease(s, w)
    answered = None
    try:
        answered = s.request("POST", "/api/v1/trials/%d/results" % t["id"],
                             {"training_iteration": 1, "loss": 0.5}, headers=fence(w, t))
    except (ConnectionError, OSError, http.client.HTTPException):
        pass
    assert answered is None, "acknowledged before its flush: %r" % (answered,)
    assert s.proc.wait(timeout=10) == 1
    assert "flushing the WAL to disk failed" in s.stderr()
    restart(s)
    assert result(s, w, t, 1)["decision"] == "continue"
    assert len(s.ok("GET", "/api/v1/trials/%d/results" % t["id"])["results"]) == 1
    s.stop()


def test_normal_durability_does_not_flush_per_commit():
    """--durability normal keeps the older promise (a process crash, not an
    OS crash): no flush per commit, so the same fault never fires."""
    s = start(fault="sync_fail_after_result=1", args=["--durability", "normal"])
    s.ok("POST", "/api/v1/experiments", experiment(n=1, sched={"type": "fifo"}), status=201)
    w = register(s)
    t = lease(s, w)
    assert result(s, w, t, 1)["decision"] == "continue"
    assert metric(s, "ctune_commit_flushes_total") == 0
    s.stop()


def metric(s, name):
    st, body, _ = s.request("GET", "/metrics", raw=True)
    assert st == 200, st
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no %s in /metrics" % name)


def test_slow_commits_are_logged_once_per_interval():
    """Every batch here takes over 20 ms (the delay_ms fault): the first is
    logged, the next ones within 10 s are only counted (a slow disk is slow
    every time; a line per batch would flood the log). /metrics counts the
    WAL flushes that replies waited for and the time they took."""
    s = start(fault="delay_ms=30")
    s.ok("POST", "/api/v1/experiments", experiment(n=1, sched={"type": "fifo"}), status=201)
    w = register(s)
    t = lease(s, w)
    before = metric(s, "ctune_commit_flushes_total")
    for it in range(1, 6):
        assert result(s, w, t, it)["decision"] == "continue"
    assert metric(s, "ctune_commit_flushes_total") >= before + 5
    assert metric(s, "ctune_commit_flush_seconds_total") > 0
    lines = [l for l in s.stderr().splitlines() if "commit: a batch of" in l]
    assert len(lines) == 1, lines
    s.stop()


if __name__ == "__main__":
    r = Runner()
    for name, fn in list(globals().items()):
        if name.startswith("test_"):
            r.run(fn)
    r.done()
