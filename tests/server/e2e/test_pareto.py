"""Several objectives through the real server: metric/mode lists are
accepted (and refused with median_stopping, or with lists of different
lengths; asha takes them, and tpe: test_ondemand.py), the lease carries
every objective, /pareto answers the front under each scope (ties kept, a trial whose window holds a null for one objective
left out), the same after a restart (the stored config read back), and /best
points to /pareto unless ?metric= picks one objective, whose own mode it
then uses. Outcome constraints: infeasible trials are shown so and left out
of the front and the best, under each scope."""
from ctune_e2e import Server, Runner, experiment, register, lease, report


def multi(**extra):
    return experiment(n=5, metric=["loss", "acc"], mode=["min", "max"], **extra)


def test_submission_checks():
    s = Server()
    for cfg, path in ((multi(sched={"type": "median_stopping"}), "scheduler.type"),
                      (experiment(metric=["loss", "acc"], mode=["min"]), "mode"),
                      (experiment(metric=["loss", "loss"], mode=["min", "min"]), "metric[1]")):
        st, b, _ = s.post("/api/v1/experiments", cfg)
        assert st == 400 and b["error"]["code"] == "invalid_config", (st, b)
        assert b["error"]["path"] == path, b
    st, b, _ = s.post("/api/v1/experiments", multi(sched={"type": "median_stopping"}))
    assert "median_stopping and pbt stop or exploit trials by one metric" in \
        b["error"]["message"], b
    s.ok("POST", "/api/v1/experiments", multi(sched={"type": "asha"}), status=201)
    s.stop()


def front(s, eid, scope=None):
    q = "?scope=" + scope if scope else ""
    b = s.ok("GET", "/api/v1/experiments/%d/pareto%s" % (eid, q))
    assert b["metrics"] == ["loss", "acc"] and b["modes"] == ["min", "max"], b
    return {t["trial_id"]: t["values"] for t in b["trials"]}


def test_front_and_best():
    s = Server()
    eid = s.ok("POST", "/api/v1/experiments", multi(), status=201)["id"]
    e = s.ok("GET", "/api/v1/experiments/%d" % eid)
    assert e["metric"] == "loss" and e["mode"] == "min", e
    assert e["metrics"] == ["loss", "acc"] and e["modes"] == ["min", "max"], e
    w = register(s, cpu=8)
    ts = [lease(s, w) for _ in range(5)]
    assert ts[0]["metrics"] == ["loss", "acc"] and ts[0]["modes"] == ["min", "max"], ts[0]
    assert ts[0]["metric"] == "loss" and ts[0]["mode"] == "min", ts[0]
    a, b, c, d, x = (t["id"] for t in ts)
    report(s, a, training_iteration=1, loss=0.1, acc=0.6)
    report(s, b, training_iteration=1, loss=0.5, acc=0.9)
    report(s, c, training_iteration=1, loss=0.05, acc=0.95)  # best ever, then worse
    report(s, c, training_iteration=2, loss=0.5, acc=0.8)  # b dominates it
    report(s, d, training_iteration=1, loss=0.1, acc=0.6)  # a's twin: both kept
    report(s, x, training_iteration=1, loss=0.01, acc=0.99)  # best of all, then
    report(s, x, training_iteration=2, loss=0.01, acc=None)  # no finite acc: out
    want = {a: {"loss": 0.1, "acc": 0.6}, b: {"loss": 0.5, "acc": 0.9},
            d: {"loss": 0.1, "acc": 0.6}}
    assert front(s, eid) == want, front(s, eid)
    assert front(s, eid, "last") == want
    # all: each objective's best ever (x's null ignored); avg: x's null
    # is inside the window.
    assert front(s, eid, "all") == {x: {"loss": 0.01, "acc": 0.99}}, front(s, eid, "all")
    avg = front(s, eid, "avg")
    assert x not in avg and avg[c] == {"loss": 0.275, "acc": 0.875}, avg
    st, body, _ = s.get("/api/v1/experiments/%d/pareto?scope=best" % eid)
    assert st == 400 and body["error"]["path"] == "scope", (st, body)
    assert s.ok("GET", "/api/v1/experiments/%d" % eid)["best"] is None
    # /best: no single best; ?metric= picks one objective and its mode.
    st, body, _ = s.get("/api/v1/experiments/%d/best" % eid)
    assert st == 400 and body["error"]["path"] == "metric", (st, body)
    assert "/api/v1/experiments/%d/pareto" % eid in body["error"]["message"], body
    best = s.ok("GET", "/api/v1/experiments/%d/best?metric=acc" % eid)
    assert best["trial_id"] == b and best["mode"] == "max" and best["value"] == 0.9, best
    best = s.ok("GET", "/api/v1/experiments/%d/best?metric=loss" % eid)
    assert best["trial_id"] == x and best["mode"] == "min", best
    # The stored config is read back the same after a restart.
    s.restart()
    assert front(s, eid) == want
    e = s.ok("GET", "/api/v1/experiments/%d" % eid)
    assert e["config"]["metric"] == ["loss", "acc"] and e["metrics"] == ["loss", "acc"], e
    s.stop()


MEM = [{"metric": "mem", "op": "<=", "value": 100}]


def test_constraints():
    """Outcome constraints: refused where wrong (the field and index named),
    the lease names the constrained metric, the trial JSON says feasible and
    by how much not, and /pareto and /best leave out a trial infeasible under
    the scope asked, also after a restart (ended trials read back compact)."""
    s = Server()
    bad = multi(constraints=[{"metric": "mem", "op": "<=", "value": 1},
                             {"metric": "mem", "op": "<", "value": 1}])
    st, b, _ = s.post("/api/v1/experiments", bad)
    assert st == 400 and b["error"]["path"] == "constraints[1].op", (st, b)
    cfg = multi(constraints=MEM)
    cfg["num_samples"] = 4
    eid = s.ok("POST", "/api/v1/experiments", cfg, status=201)["id"]
    w = register(s, cpu=8)
    ts = [lease(s, w) for _ in range(4)]
    assert ts[0]["constraint_metrics"] == ["mem"], ts[0]
    a, b, c, d = (t["id"] for t in ts)
    report(s, a, training_iteration=1, loss=0.1, acc=0.9, mem=500)  # dominates all: infeasible
    report(s, b, training_iteration=1, loss=0.2, acc=0.8, mem=50)
    report(s, c, training_iteration=1, loss=0.3, acc=0.7, mem=50)  # b dominates it
    report(s, d, training_iteration=1, loss=0.05, acc=0.5, mem=200)
    report(s, d, training_iteration=2, loss=0.05, acc=0.5, mem=80)  # feasible at its last only
    ta = s.ok("GET", "/api/v1/trials/%d" % a)
    assert ta["feasible"] is False and ta["violation"] == 400, ta
    tb = s.ok("GET", "/api/v1/trials/%d" % b)
    assert tb["feasible"] is True and tb["violation"] == 0, tb
    # An infeasible trial is on no front, so it has no rank and does not push
    # the feasible trials it dominates off the first front.
    assert ta["pareto_rank"] is None and tb["pareto_rank"] == 1, (ta, tb)
    assert s.ok("GET", "/api/v1/trials/%d" % c)["pareto_rank"] == 2

    def check():
        last = s.ok("GET", "/api/v1/experiments/%d/pareto" % eid)
        assert sorted(t["trial_id"] for t in last["trials"]) == [b, d], last
        assert last["infeasible"] == 1 and all(t["feasible"] for t in last["trials"]), last
        avg = s.ok("GET", "/api/v1/experiments/%d/pareto?scope=avg" % eid)  # d's mem: 140
        assert [t["trial_id"] for t in avg["trials"]] == [b] and avg["infeasible"] == 2, avg
        best = s.ok("GET", "/api/v1/experiments/%d/best?metric=loss" % eid)
        assert best["trial_id"] == d and best["feasible"] is True, best
        best = s.ok("GET", "/api/v1/experiments/%d/best?metric=loss&scope=avg" % eid)
        assert best["trial_id"] == b, best
        assert s.ok("GET", "/api/v1/experiments/%d/best?metric=acc" % eid)["trial_id"] == b
    check()
    for t in (a, b, c, d):
        s.ok("POST", "/api/v1/trials/%d/complete" % t, {})
    s.restart()
    check()
    assert s.ok("GET", "/api/v1/trials/%d" % a)["violation"] == 400
    # One objective: the experiment's best is the best feasible trial.
    one = s.ok("POST", "/api/v1/experiments", experiment(n=2, constraints=MEM), status=201)["id"]
    x, y = (lease(s, w)["id"] for _ in range(2))
    report(s, x, training_iteration=1, loss=0.1, mem=101)
    report(s, y, training_iteration=1, loss=0.3, mem=100)
    assert s.ok("GET", "/api/v1/experiments/%d" % one)["best"]["trial_id"] == y
    assert s.ok("GET", "/api/v1/experiments/%d/best" % one)["trial_id"] == y
    s.stop()


def test_single_metric_unchanged():
    s = Server()
    eid = s.ok("POST", "/api/v1/experiments", experiment(n=2), status=201)["id"]
    e = s.ok("GET", "/api/v1/experiments/%d" % eid)
    assert "metrics" not in e and e["config"]["metric"] == "loss", e
    w = register(s)
    t = lease(s, w)
    assert "metrics" not in t and t["metric"] == "loss", t
    report(s, t["id"], training_iteration=1, loss=0.3)
    b = s.ok("GET", "/api/v1/experiments/%d/pareto" % eid)
    assert b["metrics"] == ["loss"] and [r["trial_id"] for r in b["trials"]] == [t["id"]], b
    assert s.ok("GET", "/api/v1/experiments/%d/best" % eid)["trial_id"] == t["id"]
    s.stop()


if __name__ == "__main__":
    r = Runner()
    for fn in (test_submission_checks, test_front_and_best, test_constraints,
               test_single_metric_unchanged):
        r.run(fn)
    r.done()
