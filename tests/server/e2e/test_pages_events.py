"""Pages and events against the real daemon: every list endpoint is paged
(default page size, a cursor walk sees every item exactly once while items are
added), GET /api/v1/events streams changes (experiments, trial status changes,
results) and resumes with Last-Event-ID without a gap or a repeat (also after
a burst bigger than one read), keepalives keep a quiet stream open past the
idle timeout, a cleanly stopped ctune-worker deregisters and leaves GET
/workers, and a lost worker is pruned after --worker-retention-s."""
import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import time

from ctune_e2e import (BIN_DIR, Runner, Server, experiment, lease, register, report,
                       tmpdir)

FAST = ["--durability", "normal"]


def walk(s, path, key, limit, between=None):
    """Follows next_cursor from the start; calls between() after each page."""
    seen, cursor, pages = [], None, 0
    while True:
        sep = "&" if "?" in path else "?"
        q = "%s%slimit=%d" % (path, sep, limit) + ("&cursor=%s" % cursor if cursor else "")
        b = s.ok("GET", q)
        seen += b[key]
        pages += 1
        assert "next_cursor" in b, b
        cursor = b["next_cursor"]
        if cursor is None:
            return seen, pages
        assert isinstance(cursor, str), b
        if between:
            between()


def test_experiments_pages():
    s = Server(args=FAST)
    for i in range(103):
        s.ok("POST", "/api/v1/experiments", experiment(name="e%d" % i, n=1), status=201)
    b = s.ok("GET", "/api/v1/experiments")
    assert len(b["experiments"]) == 100 and b["next_cursor"], (len(b["experiments"]), b["next_cursor"])
    rest = s.ok("GET", "/api/v1/experiments?cursor=%s" % b["next_cursor"])
    assert [e["id"] for e in rest["experiments"]] == [101, 102, 103] and rest["next_cursor"] is None
    added = []

    def more():
        added.append(s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)["id"])

    seen, pages = walk(s, "/api/v1/experiments", "experiments", 9, more)
    ids = [e["id"] for e in seen]
    assert len(ids) == len(set(ids)), "an experiment was listed twice"
    assert sorted(ids) == list(range(1, 104)) + added, (ids[-5:], added)
    for bad in ("limit=0", "limit=10001", "cursor=abc", "cursor=-1"):
        st, body, _ = s.get("/api/v1/experiments?" + bad)
        assert st == 400, (bad, st, body)


def test_trials_results_workers_pages():
    s = Server(args=FAST)
    eid = s.ok("POST", "/api/v1/experiments", experiment(n=500), status=201)["id"]
    w = register(s, cpu=1000)
    tids = [lease(s, w)["id"] for _ in range(20)]

    def more_trials():
        tids.append(lease(s, w)["id"])

    seen, _ = walk(s, "/api/v1/experiments/%d/trials" % eid, "trials", 6, more_trials)
    assert [t["id"] for t in seen] == tids, ([t["id"] for t in seen], tids)
    # results: 1000 a page by default (stored in two batches: the pages,
    # not the posting, are what is tested here)
    t = tids[0]
    for lo, hi in ((1, 1001), (1001, 1006)):
        b = s.ok("POST", "/api/v1/trials/%d/results" % t,
                 [{"training_iteration": i, "loss": 1.0 / i} for i in range(lo, hi)])
        assert b["decisions"] == ["continue"] * (hi - lo), b["decision"]
    b = s.ok("GET", "/api/v1/trials/%d/results" % t)
    assert len(b["results"]) == 1000 and b["next_cursor"], len(b["results"])
    n = [1005]

    def more_results():
        n[0] += 1
        report(s, t, training_iteration=n[0], loss=1.0 / n[0])

    seen, pages = walk(s, "/api/v1/trials/%d/results" % t, "results", 300, more_results)
    assert [r["training_iteration"] for r in seen] == list(range(1, n[0] + 1)), pages
    # workers: 100 a page by default
    for i in range(101):
        register(s, cpu=1, name="x%d" % i)
    b = s.ok("GET", "/api/v1/workers")
    assert len(b["workers"]) == 100 and b["next_cursor"], len(b["workers"])
    regs = []
    seen, _ = walk(s, "/api/v1/workers", "workers", 13,
                   lambda: regs.append(register(s, cpu=1, name="late")))
    ids = [x["id"] for x in seen]
    assert ids == list(range(1, 103)) + regs, (ids[-4:], regs)


class Stream:
    """One GET /api/v1/events connection, read frame by frame."""

    def __init__(self, s, last_id=None, since=None, timeout=10):
        self.conn = http.client.HTTPConnection(s.host, s.port, timeout=timeout)
        h = {"Accept": "text/event-stream"}
        if s.token:
            h["Authorization"] = "Bearer " + s.token
        if last_id is not None:
            h["Last-Event-ID"] = str(last_id)
        self.conn.request("GET", "/api/v1/events" + ("" if since is None else "?since=%d" % since),
                          headers=h)
        self.r = self.conn.getresponse()
        assert self.r.status == 200, (self.r.status, self.r.read())
        assert self.r.getheader("Content-Type").startswith("text/event-stream")

    def frame(self):
        """{"id", "event", "data"} or {"comment": text}."""
        f = {}
        while True:
            line = self.r.readline()
            if not line:
                raise EOFError("stream ended")
            line = line.decode().rstrip("\n")
            if not line:
                if f:
                    return f
                continue
            if line.startswith(":"):
                return {"comment": line[1:].strip()}
            k, _, v = line.partition(":")
            v = v[1:] if v.startswith(" ") else v
            f[k] = int(v) if k == "id" else json.loads(v) if k == "data" else v

    def events(self, until, timeout=10):
        """Frames (not comments) until until(frames) is true."""
        out, t0 = [], time.time()
        while not until(out):
            assert time.time() - t0 < timeout, "stream stalled after %r" % out[-3:]
            f = self.frame()
            if "comment" not in f:
                out.append(f)
        return out

    def close(self):
        try:  # wakes a thread blocked reading it
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        except (OSError, AttributeError):
            pass
        self.conn.close()


def test_events_resume():
    s = Server(args=FAST)
    ref = Stream(s, since=0)  # follows everything, never disconnects
    ref_frames, stop = [], threading.Event()

    def follow():
        try:
            while not stop.is_set():
                f = ref.frame()
                if "comment" not in f:
                    ref_frames.append(f)
        except Exception:
            pass

    th = threading.Thread(target=follow, daemon=True)
    th.start()
    live = Stream(s)
    eid = s.ok("POST", "/api/v1/experiments", experiment(n=2), status=201)["id"]
    w = register(s)
    tr = lease(s, w)
    report(s, tr["id"], training_iteration=1, loss=0.5)
    got = live.events(lambda fs: any(f["event"] == "result" for f in fs))
    kinds = [f["event"] for f in got]
    assert "experiment" in kinds and "trial" in kinds and "worker" in kinds, kinds
    running = [f for f in got if f["event"] == "trial" and f["data"]["status"] == "RUNNING"]
    assert running and running[0]["data"]["id"] == tr["id"], got
    res = [f for f in got if f["event"] == "result"][0]
    assert res["data"]["trial_id"] == tr["id"] and res["data"]["result"]["loss"] == 0.5, res
    assert [f["data"]["id"] for f in got if f["event"] == "experiment"][0] == eid
    last = got[-1]["id"]
    live.close()
    # a burst far bigger than one read (64 events) while disconnected
    for i in range(2, 302):
        report(s, tr["id"], training_iteration=i, loss=1.0 / i)
    s.ok("POST", "/api/v1/trials/%d/complete" % tr["id"], {})
    again = Stream(s, last_id=last)
    after = again.events(lambda fs: any(f["event"] == "trial" and f["data"]["id"] == tr["id"] and
                                        f["data"]["status"] == "TERMINATED" for f in fs))
    deadline = time.time() + 10
    while time.time() < deadline and (not ref_frames or ref_frames[-1]["id"] < after[-1]["id"]):
        time.sleep(0.05)
    stop.set()
    ids = [f["id"] for f in got + after]
    assert ids == sorted(set(ids)), "ids repeat or go back"
    ref_ids = [f["id"] for f in ref_frames if f["id"] <= after[-1]["id"]]
    assert ids == ref_ids, "resumed stream differs from the continuous one: %d vs %d" % (
        len(ids), len(ref_ids))
    its = [f["data"]["result"]["training_iteration"] for f in got + after if f["event"] == "result"]
    assert its == list(range(1, 302)), its[:5]
    again.close()
    ref.close()
    # a position the server cannot serve (before a restart): "reset"
    s.restart()
    st = Stream(s, last_id=1)
    f = st.events(lambda fs: len(fs) >= 1)[0]
    assert f["event"] == "reset", f
    s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)
    f = st.events(lambda fs: len(fs) >= 1)[0]
    assert f["event"] == "experiment" and f["id"] > 1, f
    st.close()
    st, b, _ = s.get("/api/v1/events", headers={"Last-Event-ID": "x"})
    assert st == 400, (st, b)


def test_events_keepalive():
    # The idle timeout is whole seconds (libmicrohttpd's): 1 s, the least.
    os.environ["CTUNE_TEST_HTTP_TIMEOUT_S"] = "1"
    os.environ["CTUNE_TEST_SSE_KEEPALIVE_S"] = "0.2"
    try:
        s = Server(args=FAST)
    finally:
        del os.environ["CTUNE_TEST_HTTP_TIMEOUT_S"]
        del os.environ["CTUNE_TEST_SSE_KEEPALIVE_S"]
    st = Stream(s, timeout=5)
    t0, comments = time.time(), 0
    while time.time() - t0 < 1.6:  # quiet well past the idle timeout
        f = st.frame()
        assert "comment" in f, f
        comments += 1
    assert comments >= 4, comments
    s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)
    f = st.events(lambda fs: len(fs) >= 1)[0]
    assert f["event"] == "experiment", f
    st.close()


def test_worker_deregister_and_prune():
    s = Server(args=FAST + ["--lease-timeout", "0.5", "--worker-retention-s", "1"])
    d = tmpdir()
    w = subprocess.Popen(
        [os.path.join(BIN_DIR, "ctune-worker"), "--server", "http://%s:%d" % (s.host, s.port),
         "--cpus", "1", "--token-file", s.db + ".tokens", "--name", "clean",
         "--work-dir", os.path.join(d, "w"), "--poll-ms", "100", "--no-cgroup"],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "w.log"), "wb"))
    try:
        deadline = time.time() + 10
        while time.time() < deadline and not s.ok("GET", "/api/v1/workers")["workers"]:
            time.sleep(0.1)
        lost = register(s, name="lost")  # never heard from again
        names = [x["name"] for x in s.ok("GET", "/api/v1/workers")["workers"]]
        assert names == ["clean", "lost"], names
        w.send_signal(signal.SIGTERM)
        assert w.wait(timeout=20) == 0
    finally:
        if w.poll() is None:
            w.kill()
            w.wait()
    log = open(os.path.join(d, "w.log"), errors="replace").read()
    assert "deregistered" in log, log[-2000:]
    assert not os.path.exists(os.path.join(d, "w", "identity")), "identity kept after deregistering"
    # A sign of life from "lost" now: the clean worker's drain and exit
    # (slow under a sanitizer) may have taken longer than its 1 s retention.
    s.ok("POST", "/api/v1/workers/%d/heartbeat" % lost, {"running": []})
    names = [x["name"] for x in s.ok("GET", "/api/v1/workers")["workers"]]
    assert "clean" not in names, names
    assert names == ["lost"], names
    # lost after 0.5 s of silence, pruned 1 s after the last sign of life
    deadline = time.time() + 8
    while time.time() < deadline and s.ok("GET", "/api/v1/workers")["workers"]:
        time.sleep(0.05)
    assert s.ok("GET", "/api/v1/workers")["workers"] == [], "lost worker not pruned"
    # a pruned worker that comes back is listed again; a deregistered one is unknown
    s.ok("POST", "/api/v1/workers/%d/heartbeat" % lost, {"running": []})
    assert [x["id"] for x in s.ok("GET", "/api/v1/workers")["workers"]] == [lost]
    st, b, _ = s.post("/api/v1/workers/1/heartbeat", {"running": []})
    assert st in (401, 403, 404), (st, b)
    # the deregistration survives a restart
    s.restart()
    assert [x["id"] for x in s.ok("GET", "/api/v1/workers")["workers"]] == [lost]


if __name__ == "__main__":
    r = Runner()
    for fn in (test_experiments_pages, test_trials_results_workers_pages, test_events_resume,
               test_events_keepalive, test_worker_deregister_and_prune):
        r.run(fn)
    r.done()
