#!/usr/bin/env python3
"""ctune-worker's held lease requests against the real ctune-server (a
server whose registration reply has lease_wait_max_ms):

  first    a worker that polls only every 60 s (--poll-ms 60000) starts the
           first trial of an experiment submitted after it registered at
           once: its lease request was held on the server, not answered 204.
  split    halves of a CPU end one by one while a request is held (it asked
           with half a CPU): a trial that needs the whole CPU starts within
           seconds (the held request is answered when the server records an
           end of this worker's, and the worker asks again with all that is
           free), not after the held request's whole wait; three 1-CPU
           trials then run two at a time on 2 CPUs, none refused.
  drain    SIGTERM with a request held: the worker exits at once (its
           deregistration ends the wait), exit status 0.
  noroom   (a fake server) a lease granted for more than is free here now
           is given back at once (release, fenced with its lease), not
           failed and not held; a gang member's release carries its rank.
  next     (a fake server) a trial's complete carries its final log tail (no
           log PUT of its own at the end) and asks for the next lease, and
           no lease request goes between the trial's exit and its complete;
           the lease in the complete's reply starts at once (the worker
           polls only every 60 s).
A server without held requests (the fake server of test_protocol_v2) gets
the old poll."""
import os
import signal
import time

from fakeserver import FakeServer, lease
from harness import TRAINABLE, command_config, main, wait_for

FIFO = {"type": "fifo", "time_attr": "training_iteration"}


def held(env):
    """ctune_leases_held from the server's /metrics."""
    import ctune_harness
    c = ctune_harness.JsonClient.for_url(env.url, token=env.admin_token, timeout=10,
                                         keep_alive=False)
    st, text, _ = c.request("GET", "/metrics")
    for line in text.decode().splitlines():
        if line.startswith("ctune_leases_held "):
            return int(float(line.split()[1]))
    raise AssertionError("no ctune_leases_held in /metrics")


def body(env):
    env.start_server("--heartbeat-interval", "0.5")
    w = env.start_worker("w", "--cpus", "2", "--poll-ms", "60000")
    wait_for(lambda: "registered with" in w.log(), 20, "the worker to register")
    wait_for(lambda: held(env) == 1, 10, "the worker's lease request to be held")

    # first
    t0 = time.time()
    exp = env.submit(command_config("first", ["sh", TRAINABLE, "1", "0"], scheduler=FIFO))
    env.wait_experiment(exp, 20)
    first = time.time() - t0
    assert first < 10, "the first trial waited for the worker's next poll (%.1f s)" % first
    print("first: experiment submitted after registration ended in %.2f s (poll 60 s)" % first)

    # split: four half-CPU trials fill the 2 CPUs; they end 0.2 s apart
    # (the first after 0.3 s, so that all four are seen running together),
    # the first end's request asks with half a CPU and is held 5 s.
    exp = env.submit(command_config("halves",
                                    ["sh", "-c", "sleep 0.$((CTUNE_TRIAL_ID % 4 * 2 + 3))"],
                                    scheduler=FIFO, num_samples=4,
                                    resources_per_trial={"cpu": 0.5}))
    wait_for(lambda: env.experiment(exp)["counts"].get("RUNNING", 0) == 4, 10, "4 halves running")
    env.wait_experiment(exp, 20)
    t0 = time.time()
    exp = env.submit(command_config("whole", ["sh", TRAINABLE, "1", "0"], scheduler=FIFO,
                                    resources_per_trial={"cpu": 2}))
    env.wait_experiment(exp, 20)
    took = time.time() - t0
    assert env.trials(exp)[0]["status"] == "TERMINATED", env.trials(exp)
    assert took < 3, "the 2-CPU trial waited %.1f s for a held half-CPU request" % took
    exp = env.submit(command_config("three", ["sh", TRAINABLE, "4", "0.25"], scheduler=FIFO,
                                    num_samples=3))
    most = 0
    deadline = time.time() + 30
    while time.time() < deadline:
        e = env.experiment(exp)
        most = max(most, e["counts"].get("RUNNING", 0))
        if e["status"] != "RUNNING":
            break
        time.sleep(0.05)
    trials = env.trials(exp)
    assert all(t["status"] == "TERMINATED" for t in trials), trials
    assert most == 2, "at most %d of the three ran at once on 2 CPUs: %r" % (most, e)
    assert "no_resources" not in w.log() and "cannot fit" not in w.log(), w.log()[-2000:]
    print("split: a 2-CPU trial after four halves ended in %.2f s; three 1-CPU trials ran two at "
          "a time, none refused" % took)

    # drain
    wait_for(lambda: held(env) >= 1, 10, "a held lease request")
    t0 = time.time()
    os.kill(w.pid, signal.SIGTERM)
    rc = w.p.wait(20)
    took = time.time() - t0
    assert rc == 0, w.log()[-3000:]
    assert took < 4, "the drain waited %.1f s for a held lease request" % took
    wait_for(lambda: held(env) == 0, 5, "the held requests to end")
    print("drain: exited %.2f s after SIGTERM with a request held" % took)
    noroom(env)
    nextlease(env)


def noroom(env):
    fake = FakeServer()
    try:
        a = lease(1, 1, ["sh", TRAINABLE, "200", "0.05"])
        b = lease(2, 1, ["sh", TRAINABLE, "1", "0"])
        b["resources"]["cpu"] = 2  # fits the worker's 2 CPUs, not the 1 left
        # A gang's member (rank 1) with no room here either.
        m = lease(3, 4, ["sh", TRAINABLE, "1", "0"])
        m["resources"]["cpu"] = 2
        m["gang"] = {"rank": 1, "world_size": 2, "node_rank": 1, "num_nodes": 2,
                     "local_rank": 0, "local_world_size": 1, "master_addr": "127.0.0.1",
                     "master_port": 29500}
        fake.leases = [a, b, m]
        env.url = fake.url
        w = env.start_worker("n", "--cpus", "2", "--poll-ms", "50")
        rel = fake.wait(lambda r: r.trial == 2 and r.what in ("release", "fail"), 20,
                        "trial 2 given back")[0]
        assert rel.what == "release" and rel.lease == "1:1", (rel.what, rel.lease, rel.body)
        # The member's release goes at once, fenced by its attempt and rank
        # (the server ends the gang's attempt on it).
        rel3 = fake.wait(lambda r: r.trial == 3 and r.what in ("release", "fail"), 20,
                         "member of trial 3 given back")[0]
        assert (rel3.what, rel3.lease, rel3.headers.get("X-Ctune-Rank")) == (
            "release", "1:4", "1"), (rel3.what, rel3.lease, rel3.headers, rel3.body)
        assert not fake.find(lambda r: r.trial == 1 and r.what in ("release", "fail")), \
            "trial 1 was disturbed"
        os.kill(w.pid, signal.SIGTERM)
        assert w.p.wait(20) == 0, w.log()[-3000:]
        assert not fake.errors, fake.errors
    finally:
        fake.close()
    print("noroom: a lease for more than was free was released at once (fence %s)" % rel.lease)


def nextlease(env):
    fake = FakeServer()
    try:
        fake.leases = [lease(1, 1, ["sh", "-c", "echo first; sleep 0.3; echo A done"])]
        b = lease(2, 1, ["sh", TRAINABLE, "1", "0"])

        def hook(req):
            if req.what == "complete" and req.trial == 1:
                return 200, {"id": 1, "status": "TERMINATED", "lease": {"trial": b}}
            return None
        fake.hook = hook
        env.url = fake.url
        w = env.start_worker("x", "--cpus", "2", "--poll-ms", "60000")
        c1 = fake.wait(lambda r: r.trial == 1 and r.what == "complete", 20, "trial 1's complete")
        body = c1[0].body
        assert "A done" in body.get("log", ""), body
        assert body["lease"]["free"]["cpu"] > 0, body
        puts = fake.find(lambda r: r.trial == 1 and r.what == "logs")
        assert not any(b"A done" in r.raw for r in puts), "the final tail went in a PUT too"
        c2 = fake.wait(lambda r: r.trial == 2 and r.what == "complete", 20,
                       "trial 2 (leased in trial 1's complete reply) to complete")
        assert c2[0].lease == "1:1", c2[0].lease
        # Only the first lease request (trial 1's) found both CPUs free: one
        # sent at trial 1's exit, before the complete that asks, would too.
        two = fake.find(lambda r: r.path.endswith("/lease") and r.t < c2[0].t and
                        r.body["free"]["cpu"] == 2)
        assert len(two) == 1, "%d lease requests found both CPUs free" % len(two)
        leases = fake.find(lambda r: r.path.endswith("/lease"))
        assert len(fake.find(lambda r: r.trial == 2 and r.what == "complete")) == 1
        os.kill(w.pid, signal.SIGTERM)
        assert w.p.wait(20) == 0, w.log()[-3000:]
        assert not fake.errors, fake.errors
    finally:
        fake.close()
    print("next: the complete carried the log tail; trial 2 ran from its reply (%d lease "
          "requests in all, poll 60 s)" % len(leases))


main("lease-wait", body)
