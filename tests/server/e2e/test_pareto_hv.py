"""The hypervolume of the Pareto front through the real server, against a
front, a hypervolume (inclusion-exclusion), a reference point and
non-dominated ranks computed here independently: /pareto answers the
reference point (the config's, or the derived one), the hypervolume and its
history in the order the trials last changed; GET /trials/{id} answers each
trial's rank (null for a trial with a null objective); a config's bad
reference_point is refused naming it."""
import itertools
import math

from ctune_e2e import Server, Runner, experiment, register, lease, report

METRICS = ["loss", "acc", "latency"]
MODES = ["min", "max", "min"]


def minimised(p):
    return [-x if m == "max" else x for x, m in zip(p, MODES)]


def finite(p):
    return all(x is not None and math.isfinite(x) for x in p)


def dominates(a, b):
    a, b = minimised(a), minimised(b)
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


def front_of(points):
    ok = {t: p for t, p in points.items() if finite(p)}
    return {t: p for t, p in ok.items() if not any(dominates(q, p) for q in ok.values())}


def derived_ref(front):
    ref = []
    for j, m in enumerate(MODES):
        xs = [minimised(p)[j] for p in front.values()]
        worst, best = max(xs), min(xs)
        r = worst + 0.1 * (worst - best if worst > best else max(abs(worst), 1.0))
        ref.append(-r if m == "max" else r)
    return ref


def hv(points, ref):
    r = minimised(ref)
    pts = [minimised(p) for p in points if finite(p)]
    pts = [p for p in pts if all(x < y for x, y in zip(p, r))]
    total = 0.0
    for size in range(1, len(pts) + 1):
        for sub in itertools.combinations(pts, size):
            vol = 1.0
            for j in range(len(r)):
                vol *= r[j] - max(p[j] for p in sub)
            total += vol if size % 2 else -vol
    return total


def ranks(points):
    left = {t: p for t, p in points.items() if finite(p)}
    out, r = {t: None for t in points}, 1
    while left:
        layer = [t for t, p in left.items() if not any(dominates(q, p) for q in left.values())]
        for t in layer:
            out[t] = r
            del left[t]
        r += 1
    return out


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
    assert b["hypervolume"] == pytest_approx(hv(want.values(), ref)), (b, hv(want.values(), ref))
    hist, prev = [], 0.0
    for i in range(len(order)):
        v = hv([points[t] for t in order[:i + 1] if t in points], ref)
        if abs(v - prev) > 1e-12:
            hist.append((i + 1, order[i], v))
        prev = v
    got = [(h["trials"], h["trial_id"], h["hypervolume"]) for h in b["hypervolume_history"]]
    assert [g[:2] for g in got] == [h[:2] for h in hist], (got, hist)
    assert all(g[2] == pytest_approx(h[2]) for g, h in zip(got, hist)), (got, hist)
    rk = ranks({t: points.get(t, [None] * 3) for t in order})
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
