"""ctune-server: fenced leases and two-way reconciliation
(docs/protocol.md#worker-protocol-v2): every trial write names its lease, stale ones are refused and
change nothing; heartbeats requeue what the worker does not run; checkpoint
rules; result batches; honest resource accounting."""
import time
import zlib

from ctune_e2e import Server, Runner, experiment, register, lease, heartbeat

# Where a test waits for a lease to expire: short, yet several times what
# its writes before the expiry take on a loaded machine under a sanitizer.
LEASE_S = "0.75"
ASHA = {"type": "asha", "time_attr": "training_iteration", "max_t": 10, "grace_period": 1,
        "reduction_factor": 2, "brackets": 1}


def put_ckpt(s, tid, it, data, lease_h=None):
    return s.request("PUT", "/api/v1/trials/%d/checkpoint" % tid, data, lease=lease_h,
                     headers={"X-Ctune-Iteration": str(it),
                              "X-Ctune-Crc32": "%08x" % zlib.crc32(data)})


def post(s, tid, what, body, lease_h=None):
    return s.request("POST", "/api/v1/trials/%d/%s" % (tid, what), body, lease=lease_h)


def results(s, tid):
    return [r["training_iteration"] for r in s.ok("GET", "/api/v1/trials/%d/results" % tid)["results"]]


def trial(s, tid):
    return s.ok("GET", "/api/v1/trials/%d" % tid)


def wait_status(s, tid, status, timeout, beat=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if beat:
            beat()
        tr = trial(s, tid)
        if tr["status"] == status:
            return tr
        time.sleep(0.05)
    raise AssertionError("trial %d still %s after %.1f s" % (tid, tr["status"], timeout))


def not_leased(st, b, stop=False):
    assert st == 409 and b["error"]["code"] == "not_leased", (st, b)
    if stop:
        assert b["decision"] == "stop", b


def test_missing_lease_is_400():
    s = Server()
    s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)
    w = register(s)
    t = lease(s, w)
    tid = t["id"]
    for bad in (False, "", "1", "1:", ":1", "x:1", "1:0", "0:1", "1:1:1", "-1:1", "1:99999999999"):
        for what, body in (("results", {"training_iteration": 1, "loss": 1}), ("complete", {}),
                           ("fail", {"error": "x"}), ("release", {})):
            st, b, _ = post(s, tid, what, body, lease_h=bad)
            assert st == 400 and b["error"]["code"] == "missing_lease", (bad, what, st, b)
        st, b, _ = put_ckpt(s, tid, 0, b"x", lease_h=bad)
        assert st == 400 and b["error"]["code"] == "missing_lease", (bad, st, b)
        st, b, _ = s.request("PUT", "/api/v1/trials/%d/logs" % tid, b"log", lease=bad)
        assert st == 400 and b["error"]["code"] == "missing_lease", (bad, st, b)
    # nothing happened
    tr = trial(s, tid)
    assert tr["status"] == "RUNNING" and results(s, tid) == [], tr
    assert s.request("GET", "/api/v1/trials/%d/checkpoint" % tid)[0] == 404
    s.stop()


def test_late_result_after_lease_expiry_refused():
    # (a) the worker's lease expired (no heartbeats): a late result is refused
    # with 409 and not stored, never acknowledged-and-dropped
    s = Server(args=["--lease-timeout", LEASE_S])
    s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)
    w = register(s)
    t = lease(s, w)
    tid, mine = t["id"], "%d:%d" % (w, t["attempt"])
    assert post(s, tid, "results", {"training_iteration": 1, "loss": 1.0})[1]["decision"] == "continue"
    wait_status(s, tid, "PENDING", 10)
    st, b, _ = post(s, tid, "results", {"training_iteration": 2, "loss": 0.5}, lease_h=mine)
    not_leased(st, b, stop=True)
    assert results(s, tid) == [1]
    # a replay of what is stored is acknowledged whatever the lease
    st, b, _ = post(s, tid, "results", {"training_iteration": 1, "loss": 1.0}, lease_h=mine)
    assert st == 200 and b == {"decision": "continue"}, (st, b)
    # complete/fail/release of the expired lease change nothing
    for what in ("complete", "fail", "release"):
        not_leased(*post(s, tid, what, {}, lease_h=mine)[:2])
    tr = trial(s, tid)
    assert tr["status"] == "PENDING" and tr["num_failures"] == 0, tr
    s.stop()


def test_lost_lease_reply_requeued():
    # (b) the worker never saw the lease reply: its heartbeats do not list the
    # trial, which goes back to PENDING after about two heartbeat intervals,
    # not after a lease timeout
    s = Server(args=["--lease-timeout", "60", "--heartbeat-interval", "0.25"])
    s.ok("POST", "/api/v1/experiments", experiment(n=2, resources_per_trial={"cpu": 1}), status=201)
    w = register(s, cpu=2)
    lost = lease(s, w)
    kept = lease(s, w)
    assert lease(s, w) is None  # full
    t0 = time.time()
    beat = lambda: heartbeat(s, w, [(kept["id"], kept["attempt"])])
    tr = wait_status(s, lost["id"], "PENDING", 5, beat=beat)
    took = time.time() - t0
    assert 0.45 <= took <= 5.0, took  # two intervals of 0.25 s (and a loaded machine), not 60 s
    assert tr["num_failures"] == 0
    # the listed one is untouched; the worker got its CPU back exactly once
    assert trial(s, kept["id"])["status"] == "RUNNING"
    wk = s.ok("GET", "/api/v1/workers")["workers"][0]
    assert wk["free"]["cpu"] == 1 and wk["running_trials"] == [kept["id"]], wk
    again = lease(s, w)
    assert again["id"] == lost["id"] and again["attempt"] == lost["attempt"] + 1
    # the stale attempt's writes are refused
    not_leased(*post(s, lost["id"], "complete", {}, lease_h="%d:%d" % (w, lost["attempt"]))[:2])
    s.stop()


def test_unlisted_without_heartbeat_tick():
    # the requeue also happens between heartbeats (the server's own tick),
    # counted from the first heartbeat that left the trial out
    s = Server(args=["--lease-timeout", "60", "--heartbeat-interval", "0.2"])
    s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)
    w = register(s)
    t = lease(s, w)
    heartbeat(s, w, [])
    t0 = time.time()
    wait_status(s, t["id"], "PENDING", 4)
    assert time.time() - t0 <= 3.5
    s.stop()


def test_stale_writer_after_release_and_relase():
    # (c) worker A was paused past its lease; the trial went to worker B. A's
    # writes are all refused and B's newer checkpoint is kept
    s = Server(args=["--lease-timeout", LEASE_S])
    s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)
    wa = register(s, name="a")
    wb = register(s, name="b")
    t = lease(s, wa)
    tid, a = t["id"], "%d:%d" % (wa, t["attempt"])
    for i in (1, 2):
        assert post(s, tid, "results", {"training_iteration": i, "loss": 1.0 / i}, a)[0] == 200
    assert put_ckpt(s, tid, 2, b"iteration-2", a)[0] == 200
    wait_status(s, tid, "PENDING", 10, beat=lambda: heartbeat(s, wb, []))
    t2 = lease(s, wb)
    assert t2["id"] == tid and t2["attempt"] == 2 and t2["start_iteration"] == 2
    b = "%d:%d" % (wb, t2["attempt"])
    for i in range(3, 8):
        assert post(s, tid, "results", {"training_iteration": i, "loss": 1.0 / i}, b)[0] == 200
    new = b"iteration-7" * 10
    assert put_ckpt(s, tid, 7, new, b)[0] == 200
    # A comes back (SIGCONT): every write of its lease is refused
    st, body, _ = post(s, tid, "results", {"training_iteration": 8, "loss": 0.1}, a)
    not_leased(st, body, stop=True)
    not_leased(*put_ckpt(s, tid, 2, b"iteration-2", a)[:2])
    not_leased(*s.request("PUT", "/api/v1/trials/%d/logs" % tid, b"old log", lease=a)[:2])
    not_leased(*post(s, tid, "complete", {}, a)[:2])
    not_leased(*post(s, tid, "fail", {"error": "late"}, a)[:2])
    not_leased(*post(s, tid, "release", {}, a)[:2])
    # the same worker's older attempt is stale too
    not_leased(*post(s, tid, "complete", {}, "%d:1" % wb)[:2])
    st, data, h = s.request("GET", "/api/v1/trials/%d/checkpoint" % tid, raw=True)
    assert st == 200 and data == new and h["x-ctune-iteration"] == "7", (st, data[:20], h)
    tr = trial(s, tid)
    assert tr["status"] == "RUNNING" and tr["worker_id"] == wb and tr["num_failures"] == 0, tr
    assert results(s, tid) == [1, 2, 3, 4, 5, 6, 7]
    assert s.request("GET", "/api/v1/trials/%d/logs" % tid)[1]["log"] == ""
    # B still owns it
    assert post(s, tid, "complete", {}, b)[0] == 200
    s.stop()


def test_checkpoint_rules():
    # (d) empty, corrupt, stale, ahead; an ended trial takes only the final
    # upload of the lease that ended it
    s = Server()
    s.ok("POST", "/api/v1/experiments", experiment(n=2), status=201)
    w = register(s, cpu=2)
    t = lease(s, w)
    other = lease(s, w)
    tid, mine = t["id"], "%d:%d" % (w, t["attempt"])
    for i in (1, 2, 3):
        post(s, tid, "results", {"training_iteration": i, "loss": 1.0}, mine)
    st, b, _ = put_ckpt(s, tid, 2, b"", mine)
    assert st == 400 and b["error"]["code"] == "empty_checkpoint", (st, b)
    st, b, _ = s.request("PUT", "/api/v1/trials/%d/checkpoint" % tid, b"data", lease=mine,
                         headers={"X-Ctune-Iteration": "2", "X-Ctune-Crc32": "00000000"})
    assert st == 400 and b["error"]["code"] == "bad_crc", (st, b)
    st, b, _ = put_ckpt(s, tid, 4, b"ahead", mine)
    assert st == 409 and b["error"]["code"] == "checkpoint_ahead", (st, b)
    assert s.request("GET", "/api/v1/trials/%d/checkpoint" % tid)[0] == 404
    assert put_ckpt(s, tid, 3, b"three", mine)[0] == 200
    st, b, _ = put_ckpt(s, tid, 2, b"two", mine)
    assert st == 409 and b["error"]["code"] == "stale_checkpoint", (st, b)
    assert put_ckpt(s, tid, 3, b"three again", mine)[0] == 200  # same iteration: replaced
    # the trial ends by its own lease: that lease's final uploads still land
    assert post(s, tid, "complete", {}, mine)[0] == 200
    assert post(s, tid, "complete", {}, mine)[0] == 200  # a retried delivery
    assert put_ckpt(s, tid, 3, b"final", mine)[0] == 200
    assert s.request("PUT", "/api/v1/trials/%d/logs" % tid, b"final log", lease=mine)[0] == 200
    # another lease (the other trial's worker and attempt 2 of this one) cannot
    not_leased(*put_ckpt(s, tid, 3, b"intruder", "%d:%d" % (w, other["attempt"] + 1))[:2])
    not_leased(*put_ckpt(s, tid, 3, b"intruder", "%d:%d" % (w + 1, t["attempt"]))[:2])
    st, data, _ = s.request("GET", "/api/v1/trials/%d/checkpoint" % tid, raw=True)
    assert data == b"final", data
    assert s.ok("GET", "/api/v1/trials/%d/logs" % tid)["log"] == "final log"
    # a cancelled trial's lease did not end it: no uploads after the cancel
    oid, olease = other["id"], "%d:%d" % (w, other["attempt"])
    post(s, oid, "results", {"training_iteration": 1, "loss": 1.0}, olease)
    s.ok("POST", "/api/v1/experiments/1/cancel")
    not_leased(*put_ckpt(s, oid, 1, b"after cancel", olease)[:2])
    s.stop()


def test_heartbeat_v2_stop_carries_attempt():
    # (e) each stop names the attempt to stop and why
    s = Server(args=["--lease-timeout", "60", "--heartbeat-interval", "5"])
    s.ok("POST", "/api/v1/experiments", experiment(n=3), status=201)
    s.ok("POST", "/api/v1/experiments", experiment(name="c", n=1), status=201)
    w = register(s, cpu=4)
    # Fair share interleaves the two experiments' leases: d is
    # the one trial of experiment 2, a, b and c are experiment 1's.
    ts = [lease(s, w) for _ in range(4)]
    d = next(t for t in ts if t["experiment_id"] == 2)
    a, b, c = [t for t in ts if t is not d]
    post(s, a["id"], "complete", {})
    s.ok("POST", "/api/v1/experiments/2/cancel")
    hb = s.ok("POST", "/api/v1/workers/%d/heartbeat" % w,
              {"running": [{"id": a["id"], "attempt": 1}, {"id": b["id"], "attempt": 1},
                           {"id": c["id"], "attempt": 7}, {"id": d["id"], "attempt": 1},
                           {"id": 99, "attempt": 1}]})
    assert hb["lease_timeout_s"] == 60 and hb["heartbeat_interval_s"] == 5, hb
    stop = sorted((x["id"], x["attempt"], x["reason"]) for x in hb["stop"])
    assert stop == sorted([(a["id"], 1, "ended"), (c["id"], 7, "not_leased"),
                           (d["id"], 1, "cancelled"), (99, 1, "not_leased")]), stop
    # a bad running list is a 400
    for bad in ([{"id": 1}], [{"id": "1", "attempt": 1}], [0], {"id": 1}):
        st, body, _ = s.post("/api/v1/workers/%d/heartbeat" % w, {"running": bad})
        assert st == 400 and body["error"]["code"] == "invalid_body", (bad, st, body)
    s.stop()


def test_result_batches():
    # (f) a batch is stored whole, answered per result, refused whole
    s = Server()
    s.ok("POST", "/api/v1/experiments",
         experiment(n=3, metric="score", mode="max", sched=ASHA), status=201)
    w = register(s, cpu=3)
    a, b, c = lease(s, w), lease(s, w), lease(s, w)
    la = "%d:%d" % (w, a["attempt"])
    batch = [{"training_iteration": i, "score": float(i)} for i in (1, 2, 3)]
    st, r, _ = post(s, a["id"], "results", batch, la)
    assert st == 200 and r == {"decisions": ["continue"] * 3, "decision": "continue"}, (st, r)
    assert results(s, a["id"]) == [1, 2, 3]
    # replays inside a batch answer their stored decision, new ones are stored
    st, r, _ = post(s, a["id"], "results", batch[1:] + [{"training_iteration": 4, "score": 4}], la)
    assert st == 200 and r["decisions"] == ["continue"] * 3, r
    assert results(s, a["id"]) == [1, 2, 3, 4]
    # one bad result refuses the whole batch
    st, r, _ = post(s, a["id"], "results", [{"training_iteration": 5, "score": 5},
                                            {"training_iteration": 6, "score": "x"}], la)
    assert st == 400 and r["error"]["code"] == "invalid_result", r
    for bad in ([], [1], [{"training_iteration": i} for i in range(1001)]):
        st, r, _ = post(s, a["id"], "results", bad, la)
        assert st == 400, (len(bad), st, r)
    assert results(s, a["id"]) == [1, 2, 3, 4]
    # a stale batch stores nothing, even its new results
    st, r, _ = post(s, a["id"], "results", [{"training_iteration": 5, "score": 5}], "%d:9" % w)
    not_leased(st, r, stop=True)
    assert results(s, a["id"]) == [1, 2, 3, 4]
    # b sets the milestone; c's batch is stopped at t=1: the rest is past its end
    post(s, b["id"], "results", [{"training_iteration": 1, "score": 10}])
    st, r, _ = post(s, c["id"], "results", [{"training_iteration": i, "score": 0} for i in (1, 2, 3)])
    assert st == 200 and r == {"decisions": ["stop", "stop", "stop"], "decision": "stop"}, r
    assert results(s, c["id"]) == [1]
    assert trial(s, c["id"])["status"] == "TERMINATED"
    # the whole batch survives a restart
    s.restart()
    assert results(s, a["id"]) == [1, 2, 3, 4]
    s.stop()


def test_restart_keeps_the_fence():
    s = Server(args=["--lease-timeout", "30"])
    s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)
    w = register(s)
    t = lease(s, w)
    mine = "%d:%d" % (w, t["attempt"])
    s.restart()
    assert heartbeat(s, w, [(t["id"], t["attempt"])]) == []
    assert post(s, t["id"], "results", {"training_iteration": 1, "loss": 1}, mine)[0] == 200
    not_leased(*post(s, t["id"], "results", {"training_iteration": 2, "loss": 1}, "%d:2" % w)[:2])
    assert post(s, t["id"], "complete", {}, mine)[0] == 200
    s.stop()


def test_honest_accounting():
    # a GPU trial never goes to a worker without GPUs, however small its share;
    # free is never negative
    s = Server()
    s.ok("POST", "/api/v1/experiments",
         experiment(n=1, resources_per_trial={"cpu": 1, "gpu": 1e-12, "memory_mb": 1000}),
         status=201)
    w = s.ok("POST", "/api/v1/workers",
             {"name": "nomem", "resources": {"cpu": 1, "gpu": 0, "memory_mb": 0}})["id"]
    assert lease(s, w, free={"cpu": 1}) is None
    wk = s.ok("GET", "/api/v1/workers")["workers"][0]
    assert wk["free"] == {"cpu": 1, "gpu": 0, "memory_mb": 0}, wk
    # a CPU trial with memory on a worker that declared none: not charged
    s.ok("POST", "/api/v1/experiments",
         experiment(name="cpu", n=1, resources_per_trial={"cpu": 1, "memory_mb": 1000}), status=201)
    t = lease(s, w, free={"cpu": 1})
    assert t and t["experiment_id"] == 2
    wk = s.ok("GET", "/api/v1/workers")["workers"][0]
    assert wk["free"] == {"cpu": 0, "gpu": 0, "memory_mb": 0}, wk
    # fractional GPUs add up without going below zero
    s.ok("POST", "/api/v1/experiments",
         experiment(name="frac", n=4, resources_per_trial={"cpu": 0, "gpu": 0.1}), status=201)
    g = s.ok("POST", "/api/v1/workers", {"name": "gpu", "resources": {"cpu": 0, "gpu": 0.3}})["id"]
    got = [lease(s, g) for _ in range(4)]
    assert [x is not None for x in got] == [True, True, True, False], got
    wk = [x for x in s.ok("GET", "/api/v1/workers")["workers"] if x["id"] == g][0]
    assert wk["free"]["gpu"] == 0 and len(wk["running_trials"]) == 3, wk
    for x in got[:3]:
        post(s, x["id"], "complete", {})
    wk = [x for x in s.ok("GET", "/api/v1/workers")["workers"] if x["id"] == g][0]
    assert wk["free"]["gpu"] == 0.3, wk
    s.stop()


def test_long_fail_text_stays_utf8():
    # the stored "reason: error" is bounded; the cut must not split a
    # character, or every trial list after it is invalid UTF-8
    s = Server()
    s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)
    w = register(s)
    tid = lease(s, w)["id"]
    for bad in (1e300, -1e300, 2.5):
        st, b, _ = post(s, tid, "fail", {"error": "x", "exit_code": bad})
        assert st == 400 and b["error"]["path"] == "exit_code", (bad, st, b)
    st, b, _ = post(s, tid, "release", {"worker_id": 1e300})
    assert st == 400 and b["error"]["path"] == "worker_id", (st, b)
    st, b, _ = post(s, tid, "fail", {"error": "\u00e9" * 2100, "reason": "signal"})
    assert st == 200, (st, b)
    st, raw, _ = s.request("GET", "/api/v1/trials/%d" % tid, raw=True)
    assert st == 200
    err = __import__("json").loads(raw.decode("utf-8"))["error"]  # strict decode
    assert err.startswith("signal: \u00e9") and len(err.encode()) < 4096, len(err)
    s.stop()


def test_complete_carries_log_and_next_lease():
    # a complete (or fail) may carry the trial's final log tail, stored with
    # it; a complete may ask for its worker's next lease, granted in the
    # reply only to the complete that ended the trial
    s = Server()
    s.ok("POST", "/api/v1/experiments", experiment(n=3), status=201)
    w = register(s, cpu=1)
    t = lease(s, w)
    tid, mine = t["id"], "%d:%d" % (w, t["attempt"])
    ask = {"free": {"cpu": 1, "gpu": 0, "memory_mb": 0}}
    for body, path in (({"log": 5}, "log"), ({"lease": {"cpu": 1}}, "lease"),
                       ({"lease": 1}, "lease"), ({"lease": {"free": {"cpu": -1}}}, "lease.free")):
        st, b, _ = post(s, tid, "complete", body, mine)
        assert st == 400 and b["error"]["path"] == path, (body, st, b)
    not_leased(*post(s, tid, "complete", {"log": "stale", "lease": ask}, "%d:2" % w)[:2])
    assert trial(s, tid)["status"] == "RUNNING"
    assert s.ok("GET", "/api/v1/trials/%d/logs" % tid)["log"] == ""
    st, b, _ = post(s, tid, "complete", {"log": "last lines\n", "lease": ask}, mine)
    assert st == 200 and b["status"] == "TERMINATED", (st, b)
    nxt = b["lease"]["trial"]
    assert nxt["id"] != tid and nxt["attempt"] == 1 and set(nxt) == set(t), nxt
    assert s.ok("GET", "/api/v1/trials/%d/logs" % tid)["log"] == "last lines\n"
    tr = trial(s, nxt["id"])
    assert tr["status"] == "RUNNING" and tr["worker_id"] == w, tr
    # a retried delivery: answered as before, no second lease
    st, b, _ = post(s, tid, "complete", {"lease": ask}, mine)
    assert st == 200 and "lease" not in b, (st, b)
    assert lease(s, w, free={"cpu": 1}) is None  # the worker's one CPU is the next trial's
    st, b, _ = post(s, nxt["id"], "fail", {"error": "boom", "reason": "internal",
                                            "log": "its own output"}, "%d:1" % w)
    assert st == 200, (st, b)
    assert s.ok("GET", "/api/v1/trials/%d/logs" % nxt["id"])["log"] == "its own output"
    s.stop()


if __name__ == "__main__":
    r = Runner()
    for name, fn in list(globals().items()):
        if name.startswith("test_"):
            r.run(fn)
    r.done()
