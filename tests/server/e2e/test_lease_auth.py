"""ctune-server: lease expiry with resume info and checkpoint; lease release
by a draining worker; restart keeps leases; auth with admin and worker tokens; non-loopback refusal."""
import os
import time
import zlib

from ctune_e2e import Server, Runner, experiment, heartbeat, register, lease, report, tmpdir


def test_lease_expiry_resume():
    s = Server(args=["--lease-timeout", "2"])
    s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)
    w1 = register(s, name="first")
    reg = s.ok("POST", "/api/v1/workers", {"name": "second", "resources": {"cpu": 1}})
    assert reg["lease_timeout_s"] == 2 and reg["heartbeat_interval_s"] < 1
    w2 = reg["id"]
    t = lease(s, w1)
    report(s, t["id"], training_iteration=1, loss=1.0)
    report(s, t["id"], training_iteration=2, loss=0.9)
    data = b"weights" * 100
    s.ok("PUT", "/api/v1/trials/%d/checkpoint" % t["id"], data,
         headers={"X-Ctune-Iteration": "2", "X-Ctune-Crc32": "%08x" % zlib.crc32(data)})
    # w2 keeps heartbeating, w1 goes silent
    deadline = time.time() + 8
    while time.time() < deadline:
        s.ok("POST", "/api/v1/workers/%d/heartbeat" % w2, {"running": []})
        tr = s.ok("GET", "/api/v1/trials/%d" % t["id"])
        if tr["status"] == "PENDING":
            break
        time.sleep(0.2)
    assert tr["status"] == "PENDING", tr
    ws = {w["id"]: w for w in s.ok("GET", "/api/v1/workers")["workers"]}
    assert ws[w1]["status"] == "lost" and ws[w2]["status"] == "alive"
    t2 = lease(s, w2)
    assert t2["id"] == t["id"] and t2["start_iteration"] == 2 and t2["has_checkpoint"]
    assert t2["checkpoint_iteration"] == 2 and t2["attempt"] == 2
    st, body, h = s.request("GET", "/api/v1/trials/%d/checkpoint" % t["id"], raw=True)
    assert body == data
    # the lost worker comes back: its old trial is no longer its own
    assert heartbeat(s, w1, [(t["id"], 1)]) == [(t["id"], 1, "not_leased")]
    s.stop()


def test_lease_release():
    # A long lease timeout: whatever comes back to PENDING here was released.
    s = Server(args=["--lease-timeout", "60"])
    s.ok("POST", "/api/v1/experiments",
         experiment(n=2, max_failures=1, resources_per_trial={"cpu": 2}), status=201)
    w1 = register(s, cpu=2, name="draining")
    w2 = register(s, cpu=2, name="other")
    t = lease(s, w1)
    assert lease(s, w1) is None  # w1 is full
    report(s, t["id"], training_iteration=1, loss=1.0)
    report(s, t["id"], training_iteration=2, loss=0.9)
    data = b"weights" * 50
    s.ok("PUT", "/api/v1/trials/%d/checkpoint" % t["id"], data,
         headers={"X-Ctune-Iteration": "2", "X-Ctune-Crc32": "%08x" % zlib.crc32(data)})
    path = "/api/v1/trials/%d/release" % t["id"]
    # bad bodies and someone else's lease change nothing
    st, b, _ = s.post(path, {"iteration": "two"})
    assert st == 400 and b["error"]["code"] == "invalid_body" and b["error"]["path"] == "iteration", b
    st, b, _ = s.post(path, {"iteration": 2, "worker_id": w2})
    assert st == 409 and b["error"]["code"] == "not_leased", b
    assert s.ok("GET", "/api/v1/trials/%d" % t["id"])["status"] == "RUNNING"
    t0 = time.time()
    tr = s.ok("POST", path, {"iteration": 2, "worker_id": w1})
    assert tr["status"] == "PENDING" and tr["num_failures"] == 0 and tr["worker_id"] in (None, 0), tr
    assert time.time() - t0 < 2
    tr = s.ok("GET", "/api/v1/trials/%d" % t["id"])
    assert tr["status"] == "PENDING" and tr["num_failures"] == 0, tr
    ws = {w["id"]: w for w in s.ok("GET", "/api/v1/workers")["workers"]}
    assert ws[w1]["free"]["cpu"] == 2 and ws[w1]["running_trials"] == [], ws[w1]
    assert ws[w1]["status"] == "alive"
    # releasing again: no longer leased -> 409, nothing changes
    st, b, _ = s.post(path, {})
    assert st == 409 and b["error"]["code"] == "not_leased", b
    assert s.ok("GET", "/api/v1/trials/%d" % t["id"])["status"] == "PENDING"
    st, b, _ = s.post("/api/v1/trials/99/release", {}, lease="%d:1" % w1)
    assert st == 404 and b["error"]["code"] == "not_found", b
    # the resources are free on w1 (full before), and the next lease resumes
    # exactly as after a lease expiry
    t2 = lease(s, w1)
    assert t2["id"] == t["id"] and t2["start_iteration"] == 2 and t2["has_checkpoint"], t2
    assert t2["checkpoint_iteration"] == 2 and t2["attempt"] == 2
    # the release counts no failure: max_failures=1 still allows one retry.
    # The first failure, with another worker in service, is tried again
    # there before it is counted (docs/scheduling.md#failures-told-apart);
    # the second, on w2, is the one max_failures sees.
    s.ok("POST", "/api/v1/trials/%d/fail" % t["id"], {"error": "x", "reason": "exit_code"})
    tr = s.ok("GET", "/api/v1/trials/%d" % t["id"])
    assert tr["status"] == "PENDING" and tr["num_failures"] == 0, tr
    t2 = lease(s, w2)
    assert t2["id"] == t["id"] and t2["attempt"] == 3 and t2["start_iteration"] == 2, t2
    s.ok("POST", "/api/v1/trials/%d/fail" % t["id"], {"error": "x", "reason": "exit_code"})
    tr = s.ok("GET", "/api/v1/trials/%d" % t["id"])
    assert tr["status"] == "PENDING" and tr["num_failures"] == 1, tr
    # committed before the reply: a restart keeps it
    t3 = lease(s, w2)
    before = s.ok("GET", "/api/v1/trials/%d" % t3["id"])["num_failures"]
    s.ok("POST", "/api/v1/trials/%d/release" % t3["id"], {"worker_id": w2})
    s.restart()
    tr = s.ok("GET", "/api/v1/trials/%d" % t3["id"])
    assert tr["status"] == "PENDING" and tr["num_failures"] == before, tr
    s.stop()


def test_restart_keeps_leases_and_workers():
    s = Server(args=["--lease-timeout", "30"])
    s.ok("POST", "/api/v1/experiments", experiment(n=2, resources_per_trial={"cpu": 2}), status=201)
    w = register(s, cpu=2)
    t = lease(s, w)
    s.restart()
    # the server remembers the worker and what it has leased
    assert heartbeat(s, w, [(t["id"], t["attempt"])]) == []
    assert lease(s, w) is None
    tr = s.ok("GET", "/api/v1/trials/%d" % t["id"])
    assert tr["status"] == "RUNNING" and tr["worker_id"] == w
    s.stop()


def write_tokens(d):
    path = os.path.join(d, "tokens")
    with open(path, "w") as f:
        f.write("# ctune tokens\nadmin=admin-token-0123456789\nworker=worker-token-0123456789\n")
    os.chmod(path, 0o600)
    return path


def test_auth_tokens():
    d = tmpdir()
    tokens = write_tokens(d)
    s = Server(args=["--token-file", tokens])
    admin, worker = "admin-token-0123456789", "worker-token-0123456789"
    st, b, h = s.get("/api/v1/experiments")
    assert st == 401 and b["error"]["code"] == "unauthorized" and "www-authenticate" in h
    st, b, _ = s.get("/api/v1/experiments", token="wrong-token-0123456789")
    assert st == 401
    st, b, _ = s.get("/api/v1/experiments", token=worker)
    assert st == 403 and b["error"]["code"] == "forbidden"
    st, b, _ = s.post("/api/v1/experiments", experiment(n=1), token=worker)
    assert st == 403
    assert s.ok("GET", "/api/v1/experiments", token=admin)["experiments"] == []
    s.ok("POST", "/api/v1/experiments", experiment(n=1), token=admin, status=201)
    # the worker token registers; the secret registration returns reaches that
    # worker's own routes and trials (test_worker_creds.py has the details)
    reg = s.ok("POST", "/api/v1/workers", {"name": "w", "resources": {"cpu": 1}}, token=worker)
    wid, secret = reg["id"], reg["secret"]
    st, b, _ = s.post("/api/v1/workers/%d/lease" % wid, {}, token=worker)
    assert st == 403
    st, b, _ = s.post("/api/v1/workers/%d/lease" % wid, {}, token=secret)
    assert st == 200
    st, b, _ = s.post("/api/v1/trials/1/results", {"training_iteration": 1, "loss": 1}, token=secret)
    assert st == 200
    st, b, _ = s.post("/api/v1/trials/1/results", {"training_iteration": 2, "loss": 1})
    assert st == 401
    st, b, _ = s.post("/api/v1/trials/1/release", {"worker_id": wid})
    assert st == 401
    st, b, _ = s.post("/api/v1/trials/1/release", {"worker_id": wid, "iteration": 1}, token=secret)
    assert st == 200 and b["status"] == "PENDING", (st, b)
    st, b, _ = s.get("/metrics", token=worker)
    assert st == 403
    st, b, _ = s.get("/healthz")
    assert st == 200
    s.stop()


def test_refuse_non_loopback_without_tokens():
    s = Server()
    s.kill()
    s.args = ["--bind", "0.0.0.0", "--no-auth"]
    rc = s.start(expect_fail=True)
    s.kill()
    assert rc == 2 and "--no-auth" in s.stderr(), (rc, s.stderr())
    # with a token file it starts
    s2 = Server(args=["--bind", "0.0.0.0", "--token-file", write_tokens(tmpdir())],
                token="admin-token-0123456789")
    s2.host = "127.0.0.1"
    assert s2.ok("GET", "/api/v1/experiments")["experiments"] == []
    s2.stop()
    # a malformed token file is refused with its line number
    d = tmpdir()
    bad = os.path.join(d, "tokens")
    open(bad, "w").write("admin=short\n")
    os.chmod(bad, 0o600)
    s3 = Server()
    s3.kill()
    s3.args = ["--token-file", bad]
    rc = s3.start(expect_fail=True)
    s3.kill()
    assert rc == 2 and "tokens:1" in s3.stderr(), s3.stderr()


def test_one_server_per_database():
    s = Server()
    other = Server.__new__(Server)
    other.dir, other.db, other.args, other.token, other.proc = tmpdir(), s.db, [], None, None
    rc = other.start(expect_fail=True)
    other.kill()
    assert rc == 1 and "another ctune-server" in other.stderr(), other.stderr()
    s.stop()
    s.start()  # the lock went with the first process
    s.stop()


def test_ipv6_loopback():
    try:
        import socket
        socket.socket(socket.AF_INET6).bind(("::1", 0))
    except OSError:
        print("no IPv6 loopback here: skipped")
        return
    s = Server(args=["--bind", "::1"])
    assert s.host == "[::1]"
    s.host = "::1"
    assert s.ok("GET", "/healthz")["status"] == "ok"
    s.stop()


if __name__ == "__main__":
    r = Runner()
    for name, fn in list(globals().items()):
        if name.startswith("test_"):
            r.run(fn)
    r.done()
