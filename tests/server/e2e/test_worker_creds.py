"""ctune-server: per-worker credentials tied to leases, and authentication
on the request head before any body is read
(docs/protocol.md#worker-credentials).

Each test fails on the code before per-worker secrets: there the worker token
reached every trial, registration took any resources, and a body was read
(up to 512 MiB in memory) before its token was checked."""
import os
import socket
import stat
import time
import zlib

from ctune_e2e import Server, Runner, experiment, lease, tmpdir


def worker(s, name="w", cpu=4):
    """Registers with the shared worker token: (id, secret)."""
    st, b, _ = s.request("POST", "/api/v1/workers",
                         {"name": name, "resources": {"cpu": cpu, "gpu": 0, "memory_mb": 0}},
                         token=s.tokens["worker"])
    assert st == 201, (st, b)
    assert len(b["secret"].split(".", 1)[1]) == 64, b
    return b["id"], b["secret"]


def codes(b):
    return b["error"]["code"] if isinstance(b, dict) and "error" in b else b


def test_worker_token_is_not_admin():
    s = Server()
    wt = s.tokens["worker"]
    eid = s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)["id"]
    for method, path, body in [("POST", "/api/v1/experiments", experiment(n=1)),
                               ("GET", "/api/v1/experiments", None),
                               ("GET", "/api/v1/experiments/%d" % eid, None),
                               ("POST", "/api/v1/experiments/%d/cancel" % eid, {}),
                               ("GET", "/api/v1/trials/1", None)]:
        st, b, _ = s.request(method, path, body, token=wt)
        assert st == 403, (method, path, st, b)
    assert s.ok("GET", "/api/v1/experiments/%d" % eid)["status"] == "RUNNING"
    assert len(s.ok("GET", "/api/v1/experiments")["experiments"]) == 1


def test_registration_limits():
    s = Server()
    for res, field in [({"cpu": 1e9}, "resources.cpu"), ({"cpu": 4, "gpu": 1000}, "resources.gpu"),
                       ({"cpu": 4, "memory_mb": 1e8}, "resources.memory_mb")]:
        st, b, _ = s.request("POST", "/api/v1/workers", {"name": "fake", "resources": res},
                             token=s.tokens["worker"])
        assert st == 400 and b["error"]["path"] == field, (res, st, b)
    assert s.ok("GET", "/api/v1/workers")["workers"] == []


def test_shared_token_only_registers():
    s = Server()
    a, sa = worker(s, "a")
    b, sb = worker(s, "b")
    hb = {"running": []}
    # the shared worker token no longer reaches a worker's own routes
    st, body, _ = s.request("POST", "/api/v1/workers/%d/heartbeat" % a, hb, token=s.tokens["worker"])
    assert st == 403, (st, body)
    # its own secret does; another worker's does not
    s.ok("POST", "/api/v1/workers/%d/heartbeat" % a, hb, token=sa)
    st, body, _ = s.request("POST", "/api/v1/workers/%d/heartbeat" % a, hb, token=sb)
    assert st == 403, (st, body)
    st, body, _ = s.request("POST", "/api/v1/workers/%d/lease" % a, {}, token=sb)
    assert st == 403, (st, body)
    # a secret cannot register, create experiments or read them
    st, body, _ = s.request("POST", "/api/v1/workers", {"name": "x", "resources": {"cpu": 1}},
                            token=sa)
    assert st == 403, (st, body)
    st, body, _ = s.request("GET", "/api/v1/experiments", token=sa)
    assert st == 403, (st, body)
    # a wrong secret for a real id: 401
    st, body, _ = s.request("POST", "/api/v1/workers/%d/heartbeat" % a, hb,
                            token="%d.%s" % (a, "0" * 64))
    assert st == 401, (st, body)
    # secrets survive a restart; the database file is 0600
    s.restart()
    s.ok("POST", "/api/v1/workers/%d/heartbeat" % a, hb, token=sa)
    assert stat.S_IMODE(os.stat(s.db).st_mode) == 0o600, oct(os.stat(s.db).st_mode)


def test_foreign_trial_refused():
    s = Server()
    s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)
    a, sa = worker(s, "a")
    b, sb = worker(s, "b")
    st, body, _ = s.request("POST", "/api/v1/workers/%d/lease" % a, {}, token=sa)
    assert st == 200, (st, body)
    t = body["trial"]
    tid, own = t["id"], "%d:%d" % (a, t["attempt"])
    data = b"evil" * 100
    ck = {"X-Ctune-Iteration": "0", "X-Ctune-Crc32": "%08x" % zlib.crc32(data)}
    writes = [("POST", "results", {"training_iteration": 1, "loss": 0.0}, None),
              ("POST", "complete", {}, None),
              ("POST", "fail", {"error": "x", "exit_code": 1}, None),
              ("POST", "release", {}, None),
              ("PUT", "checkpoint", data, ck),
              ("PUT", "logs", b"forged", {"Content-Type": "text/plain"})]
    for method, what, body, hdrs in writes:
        path = "/api/v1/trials/%d/%s" % (tid, what)
        # worker b, under a's lease: forbidden
        st, rb, _ = s.request(method, path, body, token=sb, lease=own, headers=hdrs)
        assert st == 403, (what, st, rb)
        # worker b, under a lease of its own name: not the trial's lessee
        st, rb, _ = s.request(method, path, body, token=sb, lease="%d:%d" % (b, t["attempt"]),
                              headers=hdrs)
        assert st == 409 and codes(rb) == "not_leased", (what, st, rb)
        # the shared worker token: only registers
        st, rb, _ = s.request(method, path, body, token=s.tokens["worker"], lease=own, headers=hdrs)
        assert st == 403, (what, st, rb)
    st, rb, _ = s.request("GET", "/api/v1/trials/%d/checkpoint" % tid, token=sb)
    assert st == 403, (st, rb)
    tr = s.ok("GET", "/api/v1/trials/%d" % tid)
    assert tr["status"] == "RUNNING" and tr["iteration"] in (0, None) and tr["worker_id"] == a, tr
    assert s.ok("GET", "/api/v1/trials/%d/results" % tid)["results"] == []
    st, rb, _ = s.request("GET", "/api/v1/trials/%d/checkpoint" % tid, raw=True)
    assert st == 404, st
    # the lessee itself goes through with its secret
    st, rb, _ = s.request("POST", "/api/v1/trials/%d/results" % tid,
                          {"training_iteration": 1, "loss": 0.5}, token=sa, lease=own)
    assert st == 200, (st, rb)
    st, rb, _ = s.request("PUT", "/api/v1/trials/%d/checkpoint" % tid, data, token=sa, lease=own,
                          headers={"X-Ctune-Iteration": "1",
                                   "X-Ctune-Crc32": "%08x" % zlib.crc32(data)})
    assert st == 200, (st, rb)
    st, rb, _ = s.request("GET", "/api/v1/trials/%d/checkpoint" % tid, token=sa, raw=True)
    assert st == 200 and rb == data, st
    st, rb, _ = s.request("POST", "/api/v1/trials/%d/complete" % tid, {}, token=sa, lease=own)
    assert st == 200, (st, rb)


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def big_upload(s, path, token, lease_hdr, mib=200, send_mib=32):
    """Sends the head of a `mib` MiB PUT and streams up to `send_mib` MiB of it;
    returns the status line the server answered with (before the body)."""
    sock = socket.create_connection((s.host, s.port), timeout=10)
    head = ["PUT %s HTTP/1.1" % path, "Host: %s:%d" % (s.host, s.port),
            "Content-Type: application/octet-stream",
            "Content-Length: %d" % (mib << 20), "X-Ctune-Iteration: 1", "X-Ctune-Crc32: 00000000"]
    if token:
        head.append("Authorization: Bearer " + token)
    if lease_hdr:
        head.append("X-Ctune-Lease: " + lease_hdr)
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
    chunk = b"\0" * (1 << 20)
    try:
        for _ in range(send_mib):
            sock.sendall(chunk)
    except OSError:
        pass  # refused before the body: the server closed its side
    data = b""
    try:
        while b"\r\n" not in data:
            got = sock.recv(4096)
            if not got:
                break
            data += got
    except OSError:
        pass
    sock.close()
    return data.split(b"\r\n", 1)[0].decode(errors="replace")


def test_refused_before_body():
    s = Server()
    s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)
    a, sa = worker(s, "a")
    b, sb = worker(s, "b")
    st, body, _ = s.request("POST", "/api/v1/workers/%d/lease" % a, {}, token=sa)
    t = body["trial"]
    path = "/api/v1/trials/%d/checkpoint" % t["id"]
    own = "%d:%d" % (a, t["attempt"])
    before = rss_kb(s.proc.pid)
    line = big_upload(s, path, None, own)
    assert " 401 " in line, line
    line = big_upload(s, path, sb, own)
    assert " 403 " in line, line
    line = big_upload(s, path, sb, "%d:%d" % (b, t["attempt"]))
    assert " 409 " in line, line
    grew = rss_kb(s.proc.pid) - before
    assert grew < 16 * 1024, "server RSS grew by %d KiB" % grew
    # a declared body over the limit is refused before it too
    line = big_upload(s, path, sa, own, mib=600, send_mib=4)
    assert " 413 " in line, line
    assert rss_kb(s.proc.pid) - before < 16 * 1024
    st, rb, _ = s.request("GET", path, raw=True)
    assert st == 404, st


def test_spooled_checkpoint_large():
    """A lessee's large checkpoint goes through the spool file, not RAM."""
    s = Server()
    s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)
    a, sa = worker(s, "a")
    st, body, _ = s.request("POST", "/api/v1/workers/%d/lease" % a, {}, token=sa)
    t = body["trial"]
    own = "%d:%d" % (a, t["attempt"])
    s.ok("POST", "/api/v1/trials/%d/results" % t["id"], {"training_iteration": 3, "loss": 1.0},
         token=sa, lease=own)
    data = os.urandom(1 << 20) * 48
    s.ok("PUT", "/api/v1/trials/%d/checkpoint" % t["id"], data, token=sa, lease=own,
         headers={"X-Ctune-Iteration": "3", "X-Ctune-Crc32": "%08x" % zlib.crc32(data)})
    st, rb, h = s.request("GET", "/api/v1/trials/%d/checkpoint" % t["id"], token=sa, raw=True)
    assert st == 200 and rb == data and h["x-ctune-iteration"] == "3", st
    # a corrupted spooled upload is refused as before
    st, rb, _ = s.request("PUT", "/api/v1/trials/%d/checkpoint" % t["id"], data, token=sa,
                          lease=own, headers={"X-Ctune-Iteration": "3", "X-Ctune-Crc32": "00000000"})
    assert st == 400 and codes(rb) == "bad_crc", (st, rb)


def test_slowloris_closed():
    os.environ["CTUNE_TEST_HTTP_TIMEOUT_S"] = "2"
    try:
        s = Server()
    finally:
        del os.environ["CTUNE_TEST_HTTP_TIMEOUT_S"]
    sock = socket.create_connection((s.host, s.port), timeout=15)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x")
    t0 = time.time()
    try:
        got = sock.recv(4096)
    except OSError:
        got = b""
    took = time.time() - t0
    sock.close()
    assert got == b"" and took < 10, (got, took)
    s.ok("GET", "/healthz")


if __name__ == "__main__":
    r = Runner()
    for fn in [test_worker_token_is_not_admin, test_registration_limits,
               test_shared_token_only_registers, test_foreign_trial_refused,
               test_refused_before_body, test_spooled_checkpoint_large, test_slowloris_closed]:
        r.run(fn)
    r.done()
