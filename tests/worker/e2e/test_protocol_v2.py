#!/usr/bin/env python3
"""ctune-worker's side of protocol v2 (docs/protocol.md#worker-protocol-v2)
against a scriptable fake server over real HTTP, where the test
decides which reply is late, refused or missing:

  stale_stop   a stop meant for attempt 1 (a late result reply, and the
               heartbeat) reaches the worker while attempt 2 of the same
               trial runs: attempt 2 ignores it and completes; attempt 1's
               leftover results are refused 409 not_leased and dropped; every
               trial-scoped write carries X-Ctune-Lease worker:attempt.
  lanes        trial 1's results are refused with 503 until trial 2 has
               completed: trial 2's results and end are not held behind
               them; then trial 1's queued results arrive in batches (an
               array body), one poisoned result (400) is dropped alone, its
               checkpoint goes only after its results (checkpoint_ahead is
               retried), and its complete comes last.
  fence        no heartbeat gets through for lease_timeout_s: the worker
               stops its trial itself (SIGTERM), keeps its messages, releases
               the lease and leases again once the server answers.
  disk_full    the outbox cannot be written (fault injection: disk full):
               the trial is paused (SIGSTOP) and resumes when space returns;
               when the disk stays full it fails after --outbox-stall-s with
               a clear error, and that fail is delivered.
  relase_drain trial 1 is stopped and leased again to the same worker while
               attempt 1's checkpoint upload is still in flight; SIGTERM
               then drains and exits (it used to hang).
  reg_drain    SIGTERM while the registration reply is on its way: the
               worker awaits it (0.5 s at most) and deregisters (the server
               already lists it) instead of exiting unseen.
  ahead_dropped a trial's last result is refused for good and its checkpoint
               is always ahead (409 checkpoint_ahead): the checkpoint is
               given up at once, and the trial completes.
  ahead_always every result stored, yet every checkpoint answered
               checkpoint_ahead: the last one is tried 5 times with a
               growing backoff, then the trial completes.
  retry_after  the first registration (429 too_many_registrations), the
               first results POST and the first checkpoint PUT (503) are
               answered with Retry-After: 1: each is tried again no sooner
               than that (its own backoff would be 0.25 s or 0.1 s).

The cases run in three streams side by side, each case with its own fake
server, worker and work dir. Every wait is for an event (a request, a log
line, a process state); the two sleeps hold a fault for a set time. The
workers tick every TICK_MS (CTUNE_TEST_WORKER_TICK_MS, a test-build hook)
instead of every 2 s, so that what the tick does (log uploads, outbox-space
and stall checks) is not waited for; trainables report every 0.05 s."""
import concurrent.futures
import os
import signal
import threading
import time

from fakeserver import FakeServer, lease
from harness import TRAINABLE, main, wait_for

PACE = "0.05"   # seconds per trainable iteration
TICK_MS = "100"  # the worker's housekeeping tick


def worker_env(**extra):
    return dict(os.environ, CTUNE_TEST_WORKER_TICK_MS=TICK_MS, **extra)


START = threading.Lock()  # env.url is the server start_worker uses


def worker(env, fake, name, *args, wenv=None):
    with START:
        env.url = fake.url
        return env.start_worker(name, "--poll-ms", "50", *args, env=wenv or worker_env())


def trainable(iters):
    return ["sh", TRAINABLE, str(iters), PACE]


def stop_worker(w):
    os.kill(w.pid, signal.SIGTERM)
    t0 = time.time()
    rc = w.p.wait(20)
    assert rc == 0, "worker exited %d after SIGTERM:\n%s" % (rc, w.log()[-3000:])
    return time.time() - t0


def fenced_writes_ok(fake):
    assert not fake.errors, fake.errors
    bad = [r.path for r in fake.requests if r.trial and r.method in ("POST", "PUT")
           and not (r.lease and r.lease.startswith("1:"))]
    assert not bad, "writes without this worker's fence: %r" % bad


def its(reqs):
    out = []
    for r in reqs:
        out += [x["training_iteration"] for x in r.results()]
    return out


def stale_stop(env):
    fake = FakeServer(heartbeat_interval_s=0.2)
    release = threading.Event()

    def hook(req):
        if req.what == "results" and req.attempt() == 1:
            if 3 in its([req]) and not release.is_set():
                release.wait(20)  # the reply to attempt 1 comes late ...
                return 200, {"decision": "stop"}  # ... and says stop
            if release.is_set():
                return 409, {"error": {"code": "not_leased", "message": "attempt 1 is over"},
                             "decision": "stop"}
        return None
    fake.hook = hook
    fake.leases.append(lease(1, 1, trainable(30)))
    w = worker(env, fake, "stale")
    try:
        fake.wait(lambda r: r.what == "results" and 3 in its([r]), 20, "result 3 of attempt 1")
        # The server ends attempt 1 (as after a lease expiry) and says so in
        # every heartbeat from now on: a stop for attempt 1.
        fake.hb_stop = [{"id": 1, "attempt": 1, "reason": "not_leased"}]
        wait_for(lambda: "server says stop (not_leased)" in w.log(), 10, "attempt 1 stopped")
        # Attempt 2 runs 1 s: the late stop and the heartbeats' stops for
        # attempt 1 reach the worker while it runs (a stop applied to it
        # would cut its 20 results short).
        fake.leases.append(lease(1, 2, trainable(20)))
        fake.wait(lambda r: r.what == "logs" and r.attempt() == 2, 20, "attempt 2 running")
        release.set()  # the late "stop" for attempt 1 arrives now
        wait_for(lambda: "ignoring a scheduler decided stop for attempt 1" in w.log(), 10,
                 "the late stop to be ignored")
        done = fake.wait(lambda r: r.what in ("complete", "fail", "release"), 30,
                         "attempt 2's end")
        assert done[0].what == "complete" and done[0].lease == "1:2", (done[0].path, done[0].lease)
        a2 = its(fake.find(lambda r: r.what == "results" and r.attempt() == 2))
        assert sorted(set(a2)) == list(range(1, 21)), a2
        assert "ignoring a server says stop (not_leased) for attempt 1" in w.log()
        fenced_writes_ok(fake)
        print("stale stop: ignored by attempt 2, which completed 20 results;",
              "attempt 1's leftovers refused and dropped")
        stop_worker(w)
    finally:
        release.set()
        fake.close()


def lanes(env):
    fake = FakeServer()
    t2_done = threading.Event()
    early = {}
    refused = []  # when trial 1's results were answered 503

    def hook(req):
        if req.what == "complete" and req.trial == 2:
            # What trial 1 had stored when trial 2 completed, taken before
            # trial 1's results are let through (the test thread may look
            # later than that).
            early["t1"] = list(fake.stored.get(1, []))
            t2_done.set()
        if req.what == "results" and req.trial == 1:
            if not t2_done.is_set():
                refused.append(req.t)
                return 503, {"error": {"code": "unavailable", "message": "trial 1 waits"}}
            if 4 in its([req]):
                return 400, {"error": {"code": "invalid_body", "message": "poisoned result"}}
        if req.what == "checkpoint" and req.method == "PUT":
            it = int(req.headers.get("X-Ctune-Iteration"))
            if it > max(fake.stored.get(req.trial, [0])):
                return 409, {"error": {"code": "checkpoint_ahead", "message": "results first"}}
        return None
    fake.hook = hook
    fake.leases.append(lease(1, 1, trainable(12)))
    w = worker(env, fake, "lanes", "--cpus", "2")
    try:
        # Trial 2 starts once trial 1's results are being refused: all of its
        # run and its end go by while trial 1's lane is blocked.
        fake.wait(lambda r: r.what == "results" and r.trial == 1, 20, "trial 1's first result")
        fake.leases.append(lease(2, 1, trainable(5)))
        fake.wait(lambda r: r.what == "complete" and r.trial == 2, 30, "trial 2's complete")
        assert early["t1"] == [], "trial 1 results were accepted early: %r" % early
        assert fake.stored[2] == [1, 2, 3, 4, 5], fake.stored
        # A 503 backs off (0.1, 0.2, 0.4 s ...) though the server answers
        # leases every 50 ms: such answers clear only an outage's backoff.
        gaps = [b - a for a, b in zip(refused, refused[1:])]
        assert len(gaps) < 2 or gaps[-1] >= 0.15, gaps
        print("lanes: trial 2 completed while trial 1's results were refused (503, %d times, "
              "%s s apart)" % (len(refused), ", ".join("%.2f" % g for g in gaps)))
        end = fake.wait(lambda r: r.what == "complete" and r.trial == 1, 40,
                        "trial 1's complete")[0]
        assert fake.stored[1] == [1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12], fake.stored[1]
        posts = fake.find(lambda r: r.what == "results" and r.trial == 1)
        sizes = [len(r.body) for r in posts if isinstance(r.body, list)]
        assert sizes and max(sizes) > 1 and max(sizes) <= 256, sizes
        assert "poisoned result" in w.log() and "invalid_body" in w.log()
        good = fake.find(lambda r: r.what == "checkpoint" and r.trial == 1 and r.method == "PUT")
        last_ok = [r for r in good if fake.checkpoints.get(1) == r.raw]
        assert fake.checkpoints.get(1, b"").strip() == b"12", fake.checkpoints.get(1)
        assert last_ok and last_ok[-1].t <= end.t, "complete before the last checkpoint"
        fenced_writes_ok(fake)
        print("lanes: trial 1's queued results came in batches of %r; the poisoned one was "
              "dropped alone; checkpoint 12 then complete" % sizes)
        stop_worker(w)
    finally:
        fake.close()


def fence(env):
    fake = FakeServer(lease_timeout_s=1.5, heartbeat_interval_s=0.25)
    down = threading.Event()

    def hook(req):
        if down.is_set():
            return 503, {"error": {"code": "unavailable", "message": "partitioned"}}
        return None
    fake.hook = hook
    fake.leases.append(lease(1, 1, trainable(400)))
    w = worker(env, fake, "fence")
    try:
        fake.wait(lambda r: r.what == "results" and 3 in its([r]), 20, "results")
        down.set()
        t0 = time.time()
        wait_for(lambda: "self-fencing" in w.log(), 10, "the worker to fence itself")
        fenced_after = time.time() - t0
        wait_for(lambda: not env.trial_processes("fence"), 10, "the trial to stop")
        # The worker copies the trial's stderr to stderr.log: its last line
        # may land there a moment after the process exited.
        wait_for(lambda: "got TERM" in read(os.path.join(env.trial_dir("fence", 1), "stderr.log")),
                 10, "the trial's SIGTERM line in its stderr.log")
        # The partition outlasts a heartbeat after the fence: still fenced.
        time.sleep(0.3)
        up = time.time()
        down.clear()
        rel = fake.wait(lambda r: r.what == "release", 15, "the release")[0]
        assert rel.lease == "1:1", rel.lease
        fake.wait(lambda r: r.path.endswith("/lease") and r.t > up, 10, "leasing again")
        stored = fake.stored.get(1, [])
        assert stored == list(range(1, len(stored) + 1)), stored
        fenced_writes_ok(fake)
        print("fence: trial stopped %.1f s after the server went away (lease timeout 1.5 s); "
              "%d results kept and delivered, lease released, leasing again" %
              (fenced_after, len(stored)))
        stop_worker(w)
    finally:
        fake.close()


def relase_drain(env):
    fake = FakeServer(heartbeat_interval_s=0.2)
    uploading = threading.Event()
    w = None

    def hook(req):
        if req.what == "checkpoint" and req.method == "PUT" and req.attempt() == 1 \
                and not uploading.is_set():
            # Attempt 1's upload is slow: the test ends attempt 1 and leases
            # the trial again meanwhile, and the reply waits until the worker
            # has begun draining (bounded: the test fails elsewhere).
            uploading.set()
            deadline = time.time() + 20
            while "draining:" not in w.log() and time.time() < deadline:
                time.sleep(0.02)
        return None
    fake.hook = hook
    # Slow enough that its outbox lane empties between results: a checkpoint
    # goes only then (results first), here after result 1.
    fake.leases.append(lease(1, 1, ["sh", TRAINABLE, "400", "0.2"]))
    w = worker(env, fake, "relase")
    try:
        wait_for(uploading.is_set, 20, "attempt 1's checkpoint upload")
        fake.hb_stop = [{"id": 1, "attempt": 1, "reason": "not_leased"}]
        fake.leases.append(lease(1, 2, trainable(400)))
        fake.wait(lambda r: r.what == "results" and r.attempt() == 2, 20,
                  "attempt 2 of the same trial running here")
        took = stop_worker(w)
        # Typically 0.2 s; a drain stuck on attempt 1's upload ends only at
        # the drain deadline (--stop-grace-s 3 plus 10 s).
        assert took < 5, "SIGTERM took %.1f s to drain" % took
        rel = fake.wait(lambda r: r.what == "release", 1, "attempt 2's release")[0]
        assert rel.lease == "1:2", rel.lease
        fenced_writes_ok(fake)
        print("re-leased trial: SIGTERM drained in %.2f s (attempt 1's upload in flight), "
              "release for attempt 2" % took)
    finally:
        fake.close()


def reg_drain(env):
    fake = FakeServer()
    termed = threading.Event()

    def hook(req):
        if req.path == "/api/v1/workers" and req.method == "POST":
            termed.wait(10)  # the registration reply comes after SIGTERM
        if req.path == "/api/v1/workers/1/deregister":
            return 200, {"id": 1, "status": "deregistered"}
        return None
    fake.hook = hook
    w = worker(env, fake, "reg")
    try:
        fake.wait(lambda r: r.path == "/api/v1/workers", 20, "the registration")
        os.kill(w.pid, signal.SIGTERM)
        wait_for(lambda: "got SIGTERM" in w.log(), 10, "the worker to get SIGTERM")
        termed.set()
        rc = w.p.wait(20)
        assert rc == 0, "worker exited %d after SIGTERM:\n%s" % (rc, w.log()[-3000:])
        assert fake.find(lambda r: r.path == "/api/v1/workers/1/deregister"), \
            "the worker exited without deregistering:\n" + w.log()[-3000:]
        assert not fake.find(lambda r: r.path.endswith("/lease")), "it leased while draining"
        print("registration answered after SIGTERM: the worker deregistered, then exited")
    finally:
        termed.set()
        fake.close()


def retry_after(env):
    fake = FakeServer()
    first = set()

    def hook(req):
        what = "register" if req.path == "/api/v1/workers" else req.what
        if what in ("register", "results", "checkpoint") and req.method in ("POST", "PUT") and \
                what not in first:
            first.add(what)
            st, code = (429, "too_many_registrations") if what == "register" else \
                (503, "spool_unavailable")
            return st, {"error": {"code": code, "message": "later"}}, {"Retry-After": "1"}
        return None
    fake.hook = hook
    fake.leases.append(lease(1, 1, trainable(2)))
    w = worker(env, fake, "retry")
    try:
        fake.wait(lambda r: r.what == "complete" and r.trial == 1, 30, "trial 1's complete")
        gaps = {}
        for what, pred in (("register", lambda r: r.path == "/api/v1/workers"),
                           ("results", lambda r: r.what == "results"),
                           ("checkpoint", lambda r: r.what == "checkpoint" and r.method == "PUT")):
            ts = [r.t for r in fake.find(pred)]
            assert len(ts) >= 2, (what, ts)
            gaps[what] = ts[1] - ts[0]
        assert all(g >= 0.95 for g in gaps.values()), gaps
        assert fake.stored[1] == [1, 2] and fake.checkpoints.get(1, b"").strip() == b"2", \
            (fake.stored, fake.checkpoints)
        print("retry_after: tried again %s s after a Retry-After: 1" %
              ", ".join("%s %.2f" % kv for kv in sorted(gaps.items())))
        stop_worker(w)
    finally:
        fake.close()


def read(path):
    with open(path) as f:
        return f.read()


def ahead_dropped(env):
    """Trial 1's last result is refused for good (400, dropped: as a result
    from a lease that ended is) and the server never takes its checkpoint,
    ahead of the results it stored (409 checkpoint_ahead): the worker knows
    a result of this attempt will never be stored, so it gives that
    checkpoint up after one try and completes the trial.
    It used to PUT it hundreds of times a second, the complete held behind
    it, until a drain's deadline (20 s of CPU at the end of `ctune run`)."""
    fake = FakeServer()

    def hook(req):
        if req.what == "results" and req.trial == 1 and 5 in its([req]):
            return 400, {"error": {"code": "invalid_body", "message": "poisoned result"}}
        if req.what == "checkpoint" and req.method == "PUT" and req.trial == 1:
            if int(req.headers.get("X-Ctune-Iteration")) > max(fake.stored.get(1, [0])):
                return 409, {"error": {"code": "checkpoint_ahead", "message": "results first"}}
        return None
    fake.hook = hook
    fake.leases.append(lease(1, 1, ["sh", TRAINABLE, "5", "0.05"]))
    w = worker(env, fake, "ahead")
    try:
        fake.wait(lambda r: r.what == "complete" and r.trial == 1, 10, "trial 1's complete")
        puts = fake.find(lambda r: r.what == "checkpoint" and r.trial == 1 and r.method == "PUT"
                         and r.headers.get("X-Ctune-Iteration") == "5")
        assert len(puts) == 1, "checkpoint 5 was sent %d times" % len(puts)
        fenced_writes_ok(fake)
        took = stop_worker(w)
        print("checkpoint ahead of dropped results: sent %d times, then complete; SIGTERM "
              "drained in %.2f s" % (len(puts), took))
    finally:
        fake.close()


def ahead_always(env):
    """The server stores every result of trial 1 but answers each checkpoint
    409 checkpoint_ahead (none of its results refused, none queued: as if
    they were stored after it looked): the last checkpoint is tried 5 times
    with a growing backoff (0.1, 0.2, 0.4, 0.8 s), never in a loop, and the
    trial completes."""
    fake = FakeServer()

    def hook(req):
        if req.what == "checkpoint" and req.method == "PUT" and req.trial == 1:
            return 409, {"error": {"code": "checkpoint_ahead", "message": "results first"}}
        return None
    fake.hook = hook
    fake.leases.append(lease(1, 1, trainable(5)))
    w = worker(env, fake, "always")
    try:
        done = fake.wait(lambda r: r.what == "complete" and r.trial == 1, 10, "trial 1's complete")
        puts = fake.find(lambda r: r.what == "checkpoint" and r.trial == 1 and r.method == "PUT"
                         and r.headers.get("X-Ctune-Iteration") == "5")
        assert 5 <= len(puts) <= 7, "checkpoint 5 was sent %d times" % len(puts)
        span = puts[-1].t - puts[-5].t
        assert span >= 1.3, "its last 5 tries took %.3f s" % span
        assert done[0].t >= puts[-1].t
        fenced_writes_ok(fake)
        stop_worker(w)
        print("checkpoint always ahead: tried %d times, the last 5 over %.2f s, then complete"
              % (len(puts), span))
    finally:
        fake.close()


def proc_state(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def disk_full(env):
    fake = FakeServer()
    fault = os.path.join(env.tmp, "outbox-fault")
    fake.leases.append(lease(1, 1, trainable(15)))
    w = worker(env, fake, "disk", wenv=worker_env(CTUNE_TEST_OUTBOX_FAULT_FILE=fault))
    try:
        fake.wait(lambda r: r.what == "results" and 3 in its([r]), 20, "results")
        open(fault, "w").close()  # the disk is full from now on
        wait_for(lambda: "pausing the trial" in w.log(), 10, "the trial to pause")
        with open(os.path.join(env.trial_dir("disk", 1), "pid")) as f:
            pid = int(f.read())
        # 'T', or 'D' for a shell caught in vfork whose child was stopped
        # before it could exec (see test_faults.py).
        wait_for(lambda: proc_state(pid) in ("T", "D"), 5, "the trial process stopped (SIGSTOP)")
        time.sleep(0.3)  # a few ticks find the disk still full: it stays paused
        assert proc_state(pid) in ("T", "D"), proc_state(pid)
        os.unlink(fault)  # space again
        wait_for(lambda: "outbox has room again" in w.log(), 10, "the trial to resume")
        fake.wait(lambda r: r.what == "complete" and r.trial == 1, 30, "trial 1's complete")
        assert fake.stored[1] == list(range(1, 16)), fake.stored[1]
        print("disk full: trial paused while the outbox could not be written, resumed when "
              "space came back, all 15 results delivered")
        fenced_writes_ok(fake)
        stop_worker(w)
    finally:
        if os.path.exists(fault):
            os.unlink(fault)
        fake.close()


def disk_full_for_good(env):
    # The disk stays full: after --outbox-stall-s the trial fails with a
    # clear error, which is delivered (kept in memory) instead of hanging.
    fake = FakeServer()
    fault = os.path.join(env.tmp, "outbox-fault-2")
    open(fault, "w").close()
    fake.leases.append(lease(2, 1, trainable(400)))
    w = worker(env, fake, "disk2", "--outbox-stall-s", "1",
               wenv=worker_env(CTUNE_TEST_OUTBOX_FAULT_FILE=fault))
    try:
        fail = fake.wait(lambda r: r.what == "fail" and r.trial == 2, 30, "trial 2's fail")[0]
        assert "outbox" in fail.body["error"] and fail.body["reason"] == "internal", fail.body
        assert "pausing the trial" in w.log(), w.log()[-3000:]
        print("disk full for good: trial failed after the stall bound:", fail.body["error"][:60])
        os.unlink(fault)
        fenced_writes_ok(fake)
        stop_worker(w)
    finally:
        if os.path.exists(fault):
            os.unlink(fault)
        fake.close()


def body(env):
    # Three streams of cases side by side: each case has its own fake
    # server, worker and work dir, and most of its time is waiting.
    streams = [[disk_full, stale_stop, ahead_dropped], [disk_full_for_good, fence, ahead_always],
               [lanes, relase_drain, reg_drain, retry_after]]
    with concurrent.futures.ThreadPoolExecutor(len(streams)) as pool:
        runs = [pool.submit(lambda cases: [case(env) for case in cases], cases)
                for cases in streams]
        for run in runs:
            run.result()  # re-raises a case's failure


main("protocol-v2", body)
