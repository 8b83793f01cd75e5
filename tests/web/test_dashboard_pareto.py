#!/usr/bin/env python3
"""Browser test of the Pareto view, in headless chromium against a real
ctune-server: an experiment with three objectives (loss min, acc max,
latency min) whose trials include a null objective, a result without one
and a trial with no result. The points the experiment page plots (read from
the SVG's data attributes) equal a front and a scatter computed here
independently, for the default axes and after choosing others; a new result
that moves the front shows without a reload; the hypervolume shown equals an
inclusion-exclusion computation from the derived reference point; each
trial's page shows its non-dominated rank. Screenshots land in the
artifacts folder."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Client, Harness, fresh, parse_args  # noqa: E402
import pareto_oracle as po  # noqa: E402  (tests/lib, on the path harness sets)

METRICS = ["loss", "acc", "latency"]
MODES = ["min", "max", "min"]
CONFIG = {"name": "pareto-web", "metric": METRICS, "mode": MODES, "num_samples": 7, "seed": 3,
          "param_space": {"lr": {"type": "loguniform", "lower": 1e-4, "upper": 1e-1}},
          "trainable": {"type": "command", "argv": ["true"]}}
# (trial index, result): a null acc, a result without latency, and trial 6
# never reports.
RESULTS = [(0, {"loss": 0.2, "acc": 0.8, "latency": 10}),
           (1, {"loss": 0.1, "acc": 0.7, "latency": 20}),
           (2, {"loss": 0.3, "acc": 0.9, "latency": 5}),
           (3, {"loss": 0.25, "acc": 0.75, "latency": 15}),
           (4, {"loss": 0.05, "acc": None, "latency": 1}),
           (5, {"loss": 0.15, "acc": 0.85})]
LIVE = (3, {"loss": 0.01, "acc": 0.95, "latency": 4})  # joins the front, alone on top

POINTS_JS = """
return [...document.querySelectorAll('#pareto-scatter circle.' + arguments[0])]
  .map((c) => [Number(c.dataset.trial), Number(c.dataset.x), Number(c.dataset.y)]);
"""


def vectors(last):
    """{trial: [loss, acc, latency]} (None where a value is missing)."""
    return {t: [r.get(m) for m in METRICS] for t, r in last.items()}


def front_of(last):
    return po.front_of(vectors(last), MODES)


def hypervolume(last):
    """The front's volume from the derived reference point, and that point."""
    front = front_of(last)
    ref = po.derived_ref(front, MODES)
    return po.hypervolume(front.values(), ref, MODES), ref


HISTORY_JS = """
return [...document.querySelectorAll('#pareto-hv circle.hv-pt')]
  .map((c) => [Number(c.dataset.trials), Number(c.dataset.hv)]);
"""


def close(a, b):
    return len(a) == len(b) and all(x[0] == y[0] and abs(x[1] - y[1]) <= 1e-9 * max(1, abs(y[1]))
                                    for x, y in zip(a, b))


def expected(last, xi, yi):
    """(every plotted point, the ringed front points) on axes xi, yi."""
    pts = {(t, r[METRICS[xi]], r[METRICS[yi]]) for t, r in last.items()
           if po.finite([r.get(METRICS[xi]), r.get(METRICS[yi])])}
    fr = {(t, p[xi], p[yi]) for t, p in front_of(last).items()}
    return pts, fr


def plotted(d):
    return (fresh(lambda: {tuple(p) for p in d.execute_script(POINTS_JS, "pt")}),
            fresh(lambda: {tuple(p) for p in d.execute_script(POINTS_JS, "front-pt")}))


def choose(d, sel, index):
    from selenium.webdriver.support.ui import Select
    fresh(lambda: Select(d.find_element("id", sel)).select_by_value(str(index)))


def main():
    args = parse_args()
    h = Harness(args, "pareto")
    try:
        h.browser_soon()
        _srv, port = h.start_server()
        base = "http://127.0.0.1:%d" % port
        api = Client(port)
        eid = api.post("/experiments", CONFIG)["id"]
        wid = api.post("/workers", {"name": "w", "resources": {"cpu": 16, "gpu": 0, "memory_mb": 0}})["id"]
        ids = [api.post("/workers/%d/lease" % wid, {})["trial"]["id"] for _ in range(7)]
        last = {}
        for i, r in RESULTS:
            api.post("/trials/%d/results" % ids[i], dict(r, training_iteration=1))
            last[ids[i]] = r

        d = h.browser()
        d.get(base + "/#/experiments/%d" % eid)
        h.wait_ready(d, "experiment")
        want = expected(last, 0, 1)
        h.wait("the scatter of loss and acc with the front", lambda: plotted(d) == want)
        assert len(want[1]) == 3 and len(want[0]) == 5, want  # the null acc and no-result trials out
        # No single best trial: the card says why and names none.
        best = d.find_element("id", "best-trial")
        assert "3 objectives: no single best trial" in best.text and not best.find_elements(
            "css selector", "a"), best.get_attribute("innerHTML")
        assert not d.find_elements("css selector", "#trials-table .tag.best")
        h.screenshot(d, "pareto.png")
        # Other axes: latency across, acc up (the result without latency out).
        choose(d, "pareto-x", 2)
        want = expected(last, 2, 1)
        h.wait("the scatter of latency and acc", lambda: plotted(d) == want)
        hv, ref = hypervolume(last)
        shown = h.wait("the hypervolume", lambda: float(d.find_element("id", "pareto-hv").get_attribute("data-hv")))
        assert abs(shown - hv) <= 1e-9 * max(1, abs(hv)), (shown, hv)
        # Its history, the trials in the order they last changed: the one
        # never reported (leased last), then the reports in order.
        order = [ids[6]] + [ids[i] for i, _ in RESULTS]
        want_hist = po.history(vectors(last), order, ref, MODES)
        got = fresh(lambda: d.execute_script(HISTORY_JS))
        assert len(want_hist) >= 2 and close(got, want_hist), (got, want_hist)

        # Live: a result that dominates the front replaces it, no reload.
        api.post("/trials/%d/results" % ids[LIVE[0]], dict(LIVE[1], training_iteration=2))
        last[ids[LIVE[0]]] = LIVE[1]
        want = expected(last, 2, 1)
        assert len(want[1]) == 1, want
        h.wait("the live front", lambda: plotted(d) == want, timeout=15)
        hv, _ = hypervolume(last)
        h.wait("the live hypervolume", lambda: abs(float(d.find_element("id", "pareto-hv")
                                                         .get_attribute("data-hv")) - hv) <= 1e-9)

        # Each trial's page: its rank, a dash for the null objective.
        rk = po.ranks(vectors(last), MODES)
        for t in (ids[0], ids[LIVE[0]], ids[4]):
            d.get(base + "/#/trials/%d" % t)
            h.wait_ready(d, "trial")
            h.wait("trial %d's rank" % t, lambda: d.find_element("id", "pareto-rank"))
            got = fresh(lambda: d.find_element("id", "pareto-rank").get_attribute("data-rank"))
            assert got == ("" if rk[t] is None else str(rk[t])), (t, got, rk)
        errors = h.browser_errors(d)
        assert not errors, errors
        api.close()
        print("ok: pareto view", flush=True)
    finally:
        h.close()


if __name__ == "__main__":
    main()
