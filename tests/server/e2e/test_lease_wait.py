"""ctune-server: a lease request that sends wait_ms is held until a trial
may be leasable for it (a long-poll): answered at once when work appears,
204 when its wait ends, never granted to a client that hung up, ended by a
deregistration and by the server's stop. The wake rules themselves are
tested in-process (tests/server/state/test_state_leases.c, held_lease_*)."""
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
import ctune_harness as harness  # noqa: E402
from ctune_e2e import Server, Runner, experiment, register, lease, tmpdir  # noqa: E402,F401


def held_lease(s, wid, body):
    """Sends a lease request on a connection of its own, in a thread; the
    result is [status, body, seconds it took] once it is answered."""
    out = []

    def go():
        c = harness.JsonClient(s.host, s.port, token=s.token, timeout=40, keep_alive=False)
        t0 = time.time()
        st, b, _ = c.request("POST", "/api/v1/workers/%d/lease" % wid, body,
                             headers={"Content-Type": "application/json"})
        out.extend([st, json.loads(b) if b else None, time.time() - t0])
    th = threading.Thread(target=go)
    th.start()
    return th, out


def parked(s, n=1, timeout=5.0):
    """Waits until the server holds n lease requests (ctune_leases_held)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        st, b, _ = s.get("/metrics", raw=True)
        for line in b.decode().splitlines():
            if line.startswith("ctune_leases_held ") and int(float(line.split()[1])) >= n:
                return
        time.sleep(0.02)
    raise AssertionError("the server never held %d lease request(s)" % n)


def test_held_until_an_experiment_comes():
    s = Server()
    reg = s.ok("POST", "/api/v1/workers", {"name": "w", "resources": {"cpu": 1}})
    assert reg["lease_wait_max_ms"] == 30000, reg
    th, out = held_lease(s, reg["id"], {"free": {"cpu": 1}, "wait_ms": 20000})
    parked(s)
    t0 = time.time()
    s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)
    th.join(10)
    assert out and out[0] == 200 and out[1]["trial"]["attempt"] == 1, out
    assert time.time() - t0 < 5, "the held lease was not answered when the experiment came"
    s.stop()


def test_held_until_a_trial_ends_then_204_at_its_deadline():
    s = Server()
    s.ok("POST", "/api/v1/experiments", experiment(n=2, resources_per_trial={"cpu": 1}), status=201)
    w = register(s, cpu=1)
    t = lease(s, w)
    th, out = held_lease(s, w, {"free": {"cpu": 1}, "wait_ms": 20000})
    parked(s)
    s.ok("POST", "/api/v1/trials/%d/complete" % t["id"], {})
    th.join(10)
    assert out and out[0] == 200 and out[1]["trial"]["id"] != t["id"], out
    assert out[2] < 10, out
    # nothing more to lease: answered 204 when its wait is over, not before
    th, out = held_lease(s, w, {"free": {"cpu": 1}, "wait_ms": 400})
    th.join(10)
    assert out and out[0] == 204 and 0.35 <= out[2] < 5, out
    s.stop()


def test_answered_when_its_worker_frees_more_than_it_asked():
    # The request asked with half a CPU; a lease of its worker ends (1 CPU
    # more free there than it said): 204 at once, not a 20 s hold, so the
    # worker asks again with all it has.
    s = Server()
    s.ok("POST", "/api/v1/experiments", experiment(n=3, resources_per_trial={"cpu": 1}), status=201)
    w = register(s, cpu=2)
    a, b = lease(s, w), lease(s, w)
    th, out = held_lease(s, w, {"free": {"cpu": 0.5}, "wait_ms": 20000})
    parked(s)
    s.ok("POST", "/api/v1/trials/%d/complete" % a["id"], {})
    th.join(25)
    assert out and out[0] == 204 and out[2] < 10, out
    t = lease(s, w, free={"cpu": 1})
    assert t is not None and t["id"] not in (a["id"], b["id"]), t
    s.stop()


def test_answered_when_its_worker_had_freed_more_before_it_asked():
    # Both leases of a 2-CPU worker end on the server (a cancel) while the
    # worker still sees one running: it asks with 1 CPU and is held. An
    # experiment of 2-CPU trials comes: that wake answers 204 at once (the
    # worker has 2 free by the server's count), not after a 20 s hold.
    s = Server()
    first = s.ok("POST", "/api/v1/experiments",
                 experiment(n=2, resources_per_trial={"cpu": 1}), status=201)
    w = register(s, cpu=2)
    a, b = lease(s, w), lease(s, w)
    assert a and b, (a, b)
    s.ok("POST", "/api/v1/experiments/%d/cancel" % first["id"], {})
    th, out = held_lease(s, w, {"free": {"cpu": 1}, "wait_ms": 20000})
    parked(s)
    s.ok("POST", "/api/v1/experiments", experiment(n=1, resources_per_trial={"cpu": 2}),
         status=201)
    th.join(25)
    assert out and out[0] == 204 and out[2] < 10, out
    t = lease(s, w, free={"cpu": 2})
    assert t is not None and t["id"] not in (a["id"], b["id"]), t
    s.stop()


def test_wait_ms_checked():
    s = Server()
    w = register(s)
    for bad in (-1, "5", 30001):
        st, b, _ = s.post("/api/v1/workers/%d/lease" % w, {"wait_ms": bad})
        assert st == 400 and b["error"]["path"] == "wait_ms", (bad, st, b)
        assert "wait_ms" in b["error"]["message"], b
    s.stop()


def test_not_granted_to_a_client_that_hung_up():
    s = Server()
    w1 = register(s, name="gone")
    w2 = register(s, name="here")
    body = json.dumps({"free": {"cpu": 4}, "wait_ms": 20000}).encode()
    sk = socket.create_connection((s.host.strip("[]"), s.port))
    sk.sendall(b"POST /api/v1/workers/%d/lease HTTP/1.1\r\nHost: %s:%d\r\n"
               b"Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n%s"
               % (w1, s.host.encode(), s.port, s.token.encode(), len(body), body))
    parked(s)
    sk.close()
    s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)
    t = lease(s, w2)
    assert t is not None and t["attempt"] == 1, "the trial went to the client that hung up"
    s.stop()


def test_ended_by_deregister_and_by_stop():
    s = Server()
    w = register(s)
    th, out = held_lease(s, w, {"wait_ms": 20000})
    parked(s)
    s.ok("POST", "/api/v1/workers/%d/deregister" % w, {})
    th.join(10)
    assert out and out[0] == 404 and out[1]["error"]["code"] == "unknown_worker", out
    w = register(s)
    th, out = held_lease(s, w, {"wait_ms": 20000})
    parked(s)
    t0 = time.time()
    s.stop()  # exit status 0: no reply left held
    th.join(10)
    assert out and out[0] in (204, 503), out
    assert time.time() - t0 < 4, "the stop waited for a held lease"


if __name__ == "__main__":
    r = Runner()
    for name, fn in list(globals().items()):
        if name.startswith("test_"):
            r.run(fn)
    r.done()
