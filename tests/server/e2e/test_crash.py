"""kill -9 of ctune-server in the middle of reporting: every acknowledged
result survives exactly once, and ASHA decides after the restart exactly as a
server that never stopped."""
import http.client
import json
import random
import signal
import threading

from ctune_e2e import Server, Runner, experiment, register, lease

SCHED = {"type": "asha", "max_t": 9, "grace_period": 1, "reduction_factor": 3, "brackets": 2}
N_TRIALS = 24


def script():
    """A fixed order of (trial index, t, loss): round-robin over the trials."""
    rng = random.Random(1234)
    base = [rng.uniform(0.5, 2.0) for _ in range(N_TRIALS)]
    out = []
    for t in range(1, SCHED["max_t"] + 1):
        for i in range(N_TRIALS):
            out.append((i, t, round(base[i] / t + rng.uniform(-0.1, 0.1), 6)))
    return out


def setup(s):
    s.ok("POST", "/api/v1/experiments",
         experiment(n=N_TRIALS, sched=SCHED, max_concurrent_trials=0), status=201)
    w = register(s, cpu=N_TRIALS)
    ids = [lease(s, w)["id"] for _ in range(N_TRIALS)]
    return ids


def run(s, ids, steps, decisions, crash_at=None):
    """Posts the script in order, skipping stopped trials. When crash_at is
    set, a kill -9 lands while that request is in flight; the harness then
    restarts and re-posts it (idempotency answers if it was committed)."""
    stopped = {tid for (tid, _), d in decisions.items() if d == "stop"}
    crashed = False
    for n, (i, t, loss) in enumerate(steps):
        tid = ids[i]
        if tid in stopped:
            continue
        body = {"training_iteration": t, "loss": loss}
        if crash_at is not None and n == crash_at and not crashed:
            crashed = True
            c = http.client.HTTPConnection(s.host, s.port, timeout=10)
            c.request("POST", "/api/v1/trials/%d/results" % tid, json.dumps(body),
                      {"X-Ctune-Lease": s.leases[tid], "Content-Type": "application/json",
                       "Authorization": "Bearer " + s.token})
            s.kill(signal.SIGKILL)  # the reply may or may not have been sent
            c.close()
            s.start()
        d = s.ok("POST", "/api/v1/trials/%d/results" % tid, body)["decision"]
        decisions[(tid, t)] = d
        if d == "stop":
            stopped.add(tid)
    return decisions


def state(s):
    e = s.ok("GET", "/api/v1/experiments/1")
    return e["scheduler"], e["counts"], e["status"]


def test_restart_decides_like_uninterrupted():
    steps = script()
    a = Server()
    ids = setup(a)
    ref = run(a, ids, steps, {})
    ref_state = state(a)
    a.stop()

    b = Server()
    ids_b = setup(b)
    assert ids_b == ids
    got = run(b, ids_b, steps, {}, crash_at=len(steps) // 3)
    # and a second, plain restart later on
    b.restart()
    got_state = state(b)
    assert got == ref, "decisions differ after a kill -9"
    assert got_state == ref_state
    # every acknowledged result is stored exactly once
    res = b.ok("GET", "/api/v1/experiments/1/results?since=0")["results"]
    keys = [(r["trial_id"], r["result"]["training_iteration"]) for r in res]
    assert len(keys) == len(set(keys)) and set(keys) == set(got.keys())
    assert sum(1 for d in ref.values() if d == "stop") > N_TRIALS // 2  # ASHA did stop some
    b.stop()


def test_concurrent_acks_survive_kill9(sig=signal.SIGKILL):
    s = Server()
    s.ok("POST", "/api/v1/experiments", experiment(n=16, sched={"type": "fifo"}), status=201)
    w = register(s, cpu=16)
    ids = [lease(s, w)["id"] for _ in range(16)]
    acked = []
    lock = threading.Lock()
    stop = threading.Event()
    errors = []

    def poster(tid):
        c = http.client.HTTPConnection(s.host, s.port, timeout=10)
        t = 0
        while not stop.is_set():
            t += 1
            try:
                c.request("POST", "/api/v1/trials/%d/results" % tid,
                          json.dumps({"training_iteration": t, "loss": 1.0 / t}),
                          {"X-Ctune-Lease": s.leases[tid], "Content-Type": "application/json",
                           "Authorization": "Bearer " + s.token})
                r = c.getresponse()
                if r.status not in (200, 503):
                    # anything else (401, 415...) would never count as an
                    # ack: fail now instead of waiting for 800 forever
                    errors.append((r.status, r.read()))
                    return
                r.read()
                if r.status == 200:
                    with lock:
                        acked.append((tid, t))
            except Exception:
                return

    threads = [threading.Thread(target=poster, args=(tid,)) for tid in ids]
    for th in threads:
        th.start()
    while True:
        with lock:
            if len(acked) >= 800:
                break
        assert not errors, "a poster got %s" % (errors[:1],)
        assert any(th.is_alive() for th in threads), "every poster stopped early"
        stop.wait(0.01)
    if sig == signal.SIGKILL:
        s.kill(sig)
    else:
        s.stop()  # SIGTERM with replies held for their commit: exits 0
    stop.set()
    for th in threads:
        th.join()
    s.start()
    res = s.ok("GET", "/api/v1/experiments/1/results?since=0")["results"]
    stored = [(r["trial_id"], r["result"]["training_iteration"]) for r in res]
    assert len(stored) == len(set(stored)), "a result was stored twice"
    missing = set(acked) - set(stored)
    assert not missing, "acknowledged but lost: %s" % sorted(missing)[:10]
    s.stop()


def test_wal_stays_bounded():
    """Constant writes must not grow the WAL forever: with the writer's
    checkpoint at 64 pages, 400 separately committed results leave a WAL of
    a few hundred KiB (without it: one commit's pages each, megabytes)."""
    import os
    s = Server(args=["--wal-checkpoint-frames", "64"])
    s.ok("POST", "/api/v1/experiments", experiment(n=4, sched={"type": "fifo"}), status=201)
    w = register(s, cpu=4)
    ids = [lease(s, w)["id"] for _ in range(4)]
    for t in range(1, 101):
        for tid in ids:
            s.ok("POST", "/api/v1/trials/%d/results" % tid, {"training_iteration": t, "loss": 1.0 / t})
    wal = os.path.getsize(s.db + "-wal")
    assert wal < 1024 * 1024, "WAL is %d bytes after 400 commits" % wal
    s.stop()


def test_sigterm_under_load():
    test_concurrent_acks_survive_kill9(signal.SIGTERM)


if __name__ == "__main__":
    r = Runner()
    for name, fn in list(globals().items()):
        if name.startswith("test_"):
            r.run(fn)
    r.done()
