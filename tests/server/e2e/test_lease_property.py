"""ctune-server: property-style test of lease accounting over HTTP. A seeded
random sequence of register / lease / heartbeat (random subsets listed) /
result / complete / fail / release / cancel / submit / silence (a worker
stops sending anything until the server marks it lost, its leases expiring
with it), plus the server's own lease expiries and requeues of trials its
worker does not list (short lease timeout and heartbeat interval), with the
invariants checked after every step:

- free >= 0 and capacity - free == the resources of the RUNNING trials on
  that worker (memory only where the worker declared some);
- every RUNNING trial is in exactly its own worker's running list, and no
  other trial is in any;
- a trial never runs on a worker lacking what it asks for (no GPU trial on a
  0-GPU worker), and a lease never exceeds the free amounts the request sent;
- a write with a superseded lease is always refused (409 not_leased).

The run takes CTUNE_PROPERTY_STEPS steps (default 400), then goes on until
everything in COVERAGE has happened at least once (each write kind answered
200, each refused with a stale lease, a lease expiry, an unlisted requeue, a
worker lost while holding leases, a cancel, ...). CTUNE_PROPERTY_SECONDS
(default 60) bounds the whole run; whatever is still missing then fails the
test. The lease timeout (0.6 s) and heartbeat interval (0.1 s) are short so
that expiries and requeues come within the few seconds a run takes.
CTUNE_PROPERTY_SEED picks the seed (default 1). A long run:
CTUNE_PROPERTY_STEPS=100000 CTUNE_PROPERTY_SECONDS=600 (it stops at
whichever comes first)."""
import collections
import os
import random
import re
import time

from ctune_e2e import Server, Runner, experiment

EPS = 1e-6
SHAPES = [{"cpu": 1}, {"cpu": 2, "gpu": 1}, {"cpu": 0.5, "gpu": 0.1},
          {"cpu": 1, "memory_mb": 1000}, {"cpu": 1, "gpu": 1e-12, "memory_mb": 500},
          {"cpu": 3, "gpu": 0.5, "memory_mb": 2000}]
WORKERS = [{"cpu": 4, "gpu": 0, "memory_mb": 0}, {"cpu": 2, "gpu": 1, "memory_mb": 4000},
           {"cpu": 8, "gpu": 0.3, "memory_mb": 0}, {"cpu": 1, "gpu": 0, "memory_mb": 1000},
           {"cpu": 4, "gpu": 2, "memory_mb": 3000}]


class Model:
    def __init__(self, s, rng):
        self.s, self.rng = s, rng
        self.res = {}        # experiment id -> resources
        self.workers = {}    # worker id -> capacity
        self.leases = {}     # trial id -> (worker, attempt): the last lease we were given
        self.old = []        # superseded (trial id, worker, attempt)
        self.t = {}          # trial id -> next time value
        self.steps = 0
        self.stale_refused = 0
        self.seen = collections.Counter()  # what the run exercised (see COVERAGE)
        self.silent = None   # a worker that sends nothing until the server marks it lost
        self.holding = {}    # worker id -> its RUNNING trials at the last check

    def lease_h(self, wid, attempt):
        return "%d:%d" % (wid, attempt)

    def active(self):
        return [w for w in self.workers if w != self.silent]

    # operations ------------------------------------------------------------
    def submit(self):
        shape = self.rng.choice(SHAPES)
        eid = self.s.ok("POST", "/api/v1/experiments",
                        experiment(name="p%d" % len(self.res), n=60, max_failures=1000,
                                   resources_per_trial=shape), status=201)["id"]
        self.seen["submit"] += 1
        self.res[eid] = {"cpu": shape.get("cpu", 1), "gpu": shape.get("gpu", 0),
                         "memory_mb": shape.get("memory_mb", 0)}

    def register(self):
        cap = self.rng.choice(WORKERS)
        wid = self.s.ok("POST", "/api/v1/workers", {"name": "w", "resources": cap})["id"]
        self.seen["register"] += 1
        self.workers[wid] = cap

    def lease(self):
        wid = self.rng.choice(self.active())
        body = {}
        free = None
        if self.rng.random() < 0.6:
            cap = self.workers[wid]
            free = {k: round(self.rng.uniform(0, 1.5) * max(cap[k], 1), 3)
                    for k in ("cpu", "gpu", "memory_mb")}
            free["memory_mb"] = int(free["memory_mb"])
            if self.rng.random() < 0.5:
                del free["memory_mb"]
            body = {"free": free}
        st, b, _ = self.s.post("/api/v1/workers/%d/lease" % wid, body)
        assert st in (200, 204), (st, b)
        self.seen["lease %s %d" % ("free" if free is None else
                                   "free+mem" if "memory_mb" in free else "free-mem", st)] += 1
        if st == 204:
            return
        tr = b["trial"]
        need = tr["resources"]
        if free is not None:
            for k in ("cpu", "gpu"):
                assert need[k] <= 0 or (free[k] > 0 and need[k] <= free[k] + 1e-9), (free, need)
            if "memory_mb" in free:
                assert need["memory_mb"] <= free["memory_mb"], (free, need)
        if tr["id"] in self.leases:
            self.old.append((tr["id"],) + self.leases[tr["id"]])
        self.leases[tr["id"]] = (wid, tr["attempt"])
        self.t.setdefault(tr["id"], 1)

    def heartbeat(self):
        wid = self.rng.choice(self.active())
        mine = [(tid, a) for tid, (w, a) in self.leases.items() if w == wid]
        listed = [x for x in mine if self.rng.random() < 0.8]
        listed += [(tid, a) for tid, w, a in self.rng.sample(self.old, min(2, len(self.old)))
                   if w == wid]
        self.s.ok("POST", "/api/v1/workers/%d/heartbeat" % wid,
                  {"running": [{"id": i, "attempt": a} for i, a in listed]})
        self.seen["heartbeat"] += 1

    def write(self):
        old = [x for x in self.old if x[1] != self.silent]
        mine = [tid for tid, (w, _) in self.leases.items() if w != self.silent]
        if not mine:
            return
        stale = old and self.rng.random() < 0.3
        if stale:
            tid, wid, a = self.rng.choice(old)
        else:
            tid = self.rng.choice(mine)
            wid, a = self.leases[tid]
        what = self.rng.choice(["results", "results", "results", "complete", "fail", "release"])
        body = {}
        if what == "results":
            body = {"training_iteration": self.t[tid] + 1000 * (stale is True), "loss": 1.0}
        elif what == "fail":
            body = {"error": "boom", "reason": "exit_code", "exit_code": 3}
        st, b, _ = self.s.request("POST", "/api/v1/trials/%d/%s" % (tid, what), body,
                                  lease=self.lease_h(wid, a))
        if stale:
            assert st == 409 and b["error"]["code"] == "not_leased", (what, tid, wid, a, st, b)
            self.stale_refused += 1
            self.seen["stale %s 409" % what] += 1
            return
        assert st in (200, 409), (what, st, b)
        self.seen["%s %d" % (what, st)] += 1
        if st == 409:
            assert b["error"]["code"] == "not_leased", b
        if what == "results" and st == 200:
            self.t[tid] += 1

    def silence(self):
        """A worker goes quiet (paused, cut off) after a last heartbeat that
        lists all it runs and a last result of each: nothing from it until
        the server has marked it lost and its leases have expired (check()
        sees both), while the other workers go on. The results renew the
        leases after the heartbeat, so the worker is lost before they expire."""
        if self.silent is not None:
            return
        # the more it runs, the likelier it still runs something when lost
        busy = sorted(self.holding)
        wid = self.rng.choices(busy, [len(self.holding[w]) for w in busy])[0] if busy else \
            self.rng.choice(list(self.workers))
        mine = [(tid, a) for tid, (w, a) in self.leases.items() if w == wid]
        self.s.ok("POST", "/api/v1/workers/%d/heartbeat" % wid,
                  {"running": [{"id": tid, "attempt": a} for tid, a in mine]})
        for tid, a in mine:
            st, b, _ = self.s.request("POST", "/api/v1/trials/%d/results" % tid,
                                      {"training_iteration": self.t[tid], "loss": 1.0},
                                      lease=self.lease_h(wid, a))
            assert st in (200, 409), (st, b)
            if st == 200:
                self.t[tid] += 1
        self.silent = wid
        self.seen["silence"] += 1

    def cancel(self):
        running = [e for e in self.res
                   if self.s.ok("GET", "/api/v1/experiments/%d" % e)["status"] == "RUNNING"]
        if len(running) > 1:
            self.s.ok("POST", "/api/v1/experiments/%d/cancel" % self.rng.choice(running))
            self.seen["cancel"] += 1

    # invariants --------------------------------------------------------------
    def snapshot(self):
        for _ in range(20):
            w1 = self.s.ok("GET", "/api/v1/workers")["workers"]
            trials = {}
            for eid in self.res:
                for t in self.s.ok("GET", "/api/v1/experiments/%d/trials" % eid)["trials"]:
                    trials[t["id"]] = t
            w2 = self.s.ok("GET", "/api/v1/workers")["workers"]
            if w1 == w2:
                return w1, trials
        raise AssertionError("no stable snapshot")

    def check(self):
        workers, trials = self.snapshot()
        running = {tid: t for tid, t in trials.items() if t["status"] == "RUNNING"}
        seen = set()
        self.holding = {w["id"]: w["running_trials"] for w in workers if w["running_trials"]}
        for w in workers:
            cap, free = w["resources"], w["free"]
            if w["id"] == self.silent and w["status"] == "lost" and not w["running_trials"]:
                # Lost, and its leases gone: it may speak again (its next
                # call brings it back), stale leases and all. Its "lost"
                # line says what it still held then (a cancel may have ended
                # its trials while it was quiet): those expired while it was
                # lost.
                self.seen["worker lost"] += 1
                held = [n for wid, n in LOST.findall(self.s.stderr()) if int(wid) == self.silent]
                if held and held[-1] != "0":
                    self.seen["lost holding leases"] += 1
                self.silent = None
            on = [running.get(tid) for tid in w["running_trials"]]
            assert all(on), ("a non-RUNNING trial in a running list", w, self.steps)
            for t in on:
                assert t["worker_id"] == w["id"], (t, w)
                assert t["id"] not in seen, ("trial on two workers", t)
                seen.add(t["id"])
                need = self.res[t["experiment_id"]]
                for k in ("cpu", "gpu"):
                    assert need[k] <= 0 or cap[k] > 0, ("trial on a worker without %s" % k, t, w)
                    assert need[k] <= cap[k] + 1e-9, (k, t, w)
                if cap["memory_mb"] > 0:
                    assert need["memory_mb"] <= cap["memory_mb"], (t, w)
            for k in ("cpu", "gpu", "memory_mb"):
                assert free[k] >= 0, ("negative free", w)
                used = sum(self.res[t["experiment_id"]][k] for t in on)
                if k == "memory_mb" and cap[k] == 0:
                    continue  # not declared, not accounted
                assert abs((cap[k] - free[k]) - used) <= EPS, \
                    ("used != sum of RUNNING trials", k, w, used, self.steps)
        assert seen == set(running), ("RUNNING trials missing from running lists",
                                      set(running) - seen)


# What every run must have exercised (Model.seen, plus the server's own
# expiries and requeues from its log): each step kind with each outcome that
# moves the accounting, and writes with superseded leases.
COVERAGE = ("submit", "register", "cancel", "heartbeat", "silence", "worker lost",
            "lease free 200", "lease free+mem 200", "lease free-mem 200", "lease free 204",
            "results 200", "complete 200", "fail 200", "release 200",
            "stale results 409", "stale complete 409", "stale fail 409", "stale release 409",
            "lease expired", "not listed by", "lost holding leases")
INITIAL = {"submit": 3, "register": 3}  # made before the random steps
LOST = re.compile(r"worker (\d+) \(w\) missed heartbeats .*: lost \(its (\d+) trial lease")


def missing(m, log):
    seen = dict(m.seen)
    for k in ("lease expired", "not listed by"):  # requeued by a tick or by a heartbeat
        seen[k] = log.count(k)
    return [k for k in COVERAGE if seen.get(k, 0) <= INITIAL.get(k, 0)]


def test_random_lease_sequences():
    seed = int(os.environ.get("CTUNE_PROPERTY_SEED", "1"))
    steps = int(os.environ.get("CTUNE_PROPERTY_STEPS", "400"))
    budget = float(os.environ.get("CTUNE_PROPERTY_SECONDS", "60"))
    rng = random.Random(seed)
    s = Server(args=["--lease-timeout", "0.6", "--heartbeat-interval", "0.1",
                     "--durability", "normal"])
    m = Model(s, rng)
    for _ in range(3):
        m.submit()
    for _ in range(3):
        m.register()
    ops = [(m.lease, 30), (m.write, 40), (m.heartbeat, 20), (m.register, 1), (m.submit, 1),
           (m.cancel, 1), (m.silence, 1)]
    funcs, weights = zip(*ops)
    t0 = time.time()
    look = steps
    while time.time() - t0 < budget:
        # Past the step count, go on only while something is still missing
        # (the server log is read once every 20 steps).
        if m.steps >= look:
            if not missing(m, s.stderr()):
                break
            look = m.steps + 20
        op = rng.choices(funcs, weights)[0]
        if op is m.register and len(m.workers) >= 8:
            continue
        if op is m.submit and len(m.res) >= 8:
            continue
        op()
        m.steps += 1
        m.check()
    log = s.stderr()
    expired = log.count("lease expired")
    unlisted = log.count("not listed by")
    print("seed %d: %d steps in %.1f s; %d leases, %d stale writes refused, %d lease expiries, "
          "%d unlisted requeues" % (seed, m.steps, time.time() - t0, len(m.old) + len(m.leases),
                                    m.stale_refused, expired, unlisted), flush=True)
    print("  " + ", ".join("%s %d" % kv for kv in sorted(m.seen.items())), flush=True)
    assert m.steps >= 100, m.steps
    todo = missing(m, log)
    assert not todo, "not exercised in %.0f s: %s" % (budget, todo)
    s.stop()


if __name__ == "__main__":
    r = Runner()
    r.run(test_random_lease_sequences)
    r.done()
