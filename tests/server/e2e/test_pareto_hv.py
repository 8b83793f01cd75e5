"""The hypervolume of the Pareto front through the real server, against a
front, a hypervolume (inclusion-exclusion), a reference point and
non-dominated ranks computed here independently: /pareto answers the
reference point (the config's, or the derived one), the hypervolume and its
history in the order the trials last changed; GET /trials/{id} answers each
trial's rank (null for a trial with a null objective); a config's bad
reference_point is refused naming it."""
from ctune_e2e import Server, Runner, experiment, register, lease, report
import pareto_oracle as po  # tests/lib, on the path ctune_e2e sets

METRICS = ["loss", "acc", "latency"]
MODES = ["min", "max", "min"]


def front_of(points):
    return po.front_of(points, MODES)


def derived_ref(front):
    return po.derived_ref(front, MODES)


def run(s, cfg, results):
    """results: [(trial index, (loss, acc, latency))] in the order reported;
    returns ({trial id: its last values}, [ids in the order they last
    changed])."""
    eid = s.ok("POST", "/api/v1/experiments", cfg, status=201)["id"]
    w = register(s, cpu=16)
    ids = [lease(s, w)["id"] for _ in range(cfg["num_samples"])]
    last, order, it = {}, [], {}
    for i, (loss, acc, lat) in results:
        it[i] = it.get(i, 0) + 1
        report(s, ids[i], training_iteration=it[i], loss=loss, acc=acc, latency=lat)
        last[ids[i]] = [loss, acc, lat]
        if ids[i] in order:
            order.remove(ids[i])
        order.append(ids[i])
    order = [t for t in ids if t not in order] + order  # never reported: first
    return eid, last, order


def check(s, eid, points, order, ref):
    b = s.ok("GET", "/api/v1/experiments/%d/pareto" % eid)
    want = front_of(points)
    assert {t["trial_id"]: [t["values"][m] for m in METRICS] for t in b["trials"]} == want, b
    assert all(a == pytest_approx(x) for a, x in zip(b["reference_point"], ref)), (b, ref)
    want_hv = po.hypervolume(want.values(), ref, MODES)
    assert b["hypervolume"] == pytest_approx(want_hv), (b, want_hv)
    hist = [(n, order[n - 1], v) for n, v in po.history(points, order, ref, MODES)]
    got = [(h["trials"], h["trial_id"], h["hypervolume"]) for h in b["hypervolume_history"]]
    assert [g[:2] for g in got] == [h[:2] for h in hist], (got, hist)
    assert all(g[2] == pytest_approx(h[2]) for g, h in zip(got, hist)), (got, hist)
    rk = po.ranks({t: points.get(t, [None] * 3) for t in order}, MODES)
    for t in order:
        assert s.ok("GET", "/api/v1/trials/%d" % t)["pareto_rank"] == rk[t], (t, rk)
    return b


class pytest_approx(float):
    def __eq__(self, other):
        return abs(float(self) - other) <= 1e-12 * max(1.0, abs(float(self)))


def test_derived_reference():
    s = Server()
    cfg = experiment(n=8, metric=METRICS, mode=MODES)
    results = [(0, (0.2, 0.8, 10)), (1, (0.1, 0.7, 20)), (2, (0.3, 0.9, 5)),
               (3, (0.25, 0.75, 15)),   # a dominates it: rank 2
               (4, (0.01, 0.99, 1)),    # the best ever, then
               (4, (0.3, 0.6, 30)),     # d dominates it: rank 3 by its last result
               (5, (0.05, None, 1)),    # a null objective: no rank, off the front
               (6, (0.2, 0.8, 10)),     # a's twin: both on it
               (1, (0.12, 0.7, 20))]    # b changes last (and gets worse)
    eid, points, order = run(s, cfg, results)
    b = check(s, eid, points, order, derived_ref(front_of(points)))
    assert b["reference_point_source"] == "derived", b
    # A trial never reported has no rank.
    assert s.ok("GET", "/api/v1/trials/%d" % order[0])["pareto_rank"] is None
    s.stop()


def test_config_reference():
    s = Server()
    ref = [0.5, 0.5, 25]
    cfg = experiment(n=4, metric=METRICS, mode=MODES, reference_point=ref)
    results = [(0, (0.2, 0.8, 10)), (1, (0.6, 0.9, 5)),   # beyond ref on loss: adds nothing
               (2, (0.1, 0.6, 20)), (3, (0.3, 0.7, 8))]
    eid, points, order = run(s, cfg, results)
    b = check(s, eid, points, order, ref)
    assert b["reference_point_source"] == "config" and b["reference_point"] == ref, b
    # A list of the wrong length is refused; a single metric has no rank,
    # and its front's volume is a length.
    st, body, _ = s.post("/api/v1/experiments",
                         experiment(metric=METRICS[:2], mode=MODES[:2], reference_point=[1]))
    assert st == 400 and body["error"]["path"] == "reference_point", (st, body)
    eid = s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)["id"]
    t = lease(s, register(s))["id"]
    report(s, t, training_iteration=1, loss=0.3)
    assert "pareto_rank" not in s.ok("GET", "/api/v1/trials/%d" % t)
    b = s.ok("GET", "/api/v1/experiments/%d/pareto" % eid)
    assert b["reference_point"][0] == pytest_approx(0.4), b  # 0.3 + 10% of max(0.3, 1)
    assert b["hypervolume"] == pytest_approx(0.1), b
    s.stop()


if __name__ == "__main__":
    r = Runner()
    for fn in (test_derived_reference, test_config_reference):
        r.run(fn)
    r.done()
