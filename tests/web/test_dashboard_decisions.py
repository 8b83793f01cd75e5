#!/usr/bin/env python3
"""Browser test of the visible decisions on the dashboard, in headless
chromium against tests/web/fake_server.py --decisions (the contract's shapes:
trial "reason", GET /trials/{id} "events", experiment "num_created",
"search_alg", "scheduler"): PAUSED everywhere a status shows (its own colour,
the status filter, the counts), the Reason column, the created/planned count,
and on a PBT trial's page its history of exploits with the donor linked.
Screenshots land in the artifacts folder.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Harness, parse_args  # noqa: E402

ROWS_JS = """
return [...document.querySelectorAll('#trials-table tbody tr')]
  .filter((tr) => tr.dataset.id).map((tr) => tr.textContent);
"""
COLOR_JS = "return getComputedStyle(document.querySelector(arguments[0])).color;"


def check_experiment(h, d, base, r):
    d.get(base + "/#/experiments/%d" % r["hb_exp"])
    h.wait_ready(d, "experiment")
    rows = h.wait("six trial rows", lambda: (lambda x: x if len(x) == 6 else None)(d.execute_script(ROWS_JS)))
    # The Reason column: the head, each decision's sentence, a dash otherwise.
    head = d.find_element("css selector", "#trials-table thead").text
    assert "Reason" in head, head
    text = "\n".join(rows)
    for part in ("paused at rung 1 (t=3)", "promoted from rung 1 (top 1 of 3)",
                 "stopped at t=3: 0.96 worse than the top 1 of 3 trials at rung 1"):
        assert part in text, (part, text)
    cell = d.find_element("css selector", '#trials-table tr[data-id="%d"] .reason' % r["stopped"])
    assert cell.get_attribute("title").endswith("(cutoff 0.64)"), cell.get_attribute("title")
    # PAUSED: a badge of its own colour (not RUNNING's, not TERMINATED's).
    paused = d.find_elements("css selector", "#trials-table .badge.s-paused")
    assert len(paused) == 2 and all(b.text == "PAUSED" for b in paused), [b.text for b in paused]
    assert paused[0].get_attribute("title") == "paused at rung 1 (t=3)"
    cp = d.execute_script(COLOR_JS, "#trials-table .badge.s-paused")
    for other in ("s-running", "s-terminated", "s-pending"):
        co = d.execute_script(COLOR_JS, "#trials-table .badge." + other)
        assert co != cp, (other, co, cp)
    # The counts and the status filter know PAUSED.
    prog = d.find_element("css selector", "#h-progress").find_element("xpath", "..").text
    assert "PAUSED 2" in prog.replace("\n", " "), prog
    assert "6 of 9 created so far" in prog, prog
    assert "1 of 9 trials done" in prog, prog
    d.execute_script("const s = document.getElementById('trials-status'); s.value = 'PAUSED';"
                     "s.dispatchEvent(new Event('change'));")
    only = h.wait("the PAUSED filter", lambda: (lambda x: x if len(x) == 2 else None)(d.execute_script(ROWS_JS)))
    assert all("PAUSED" in row for row in only), only
    # The brief names the scheduler and the search.
    brief = d.find_element("css selector", "#h-config").find_element("xpath", "..").text
    assert "HyperBand on training_iteration: max_t 9, reduction_factor 3" in brief, brief
    assert "Search\nrandom" in brief, brief
    state = d.find_element("id", "asha-state").text
    assert "Paused" in state and "2 trials" in state, state
    h.screenshot(d, "decisions-experiment.png")
    d.execute_script("const s = document.getElementById('trials-status'); s.value = '';"
                     "s.dispatchEvent(new Event('change'));")


def check_trial(h, d, base, r):
    d.get(base + "/#/trials/%d" % r["exploited"])
    h.wait_ready(d, "trial")
    items = h.wait("two decisions", lambda: (lambda x: x if len(x) == 2 else None)(
        d.find_elements("css selector", "#events-list li")))
    texts = [i.text.replace("\n", " ") for i in items]
    assert "t=3 exploited trial %d: lr 0.001 → 0.0008" % r["donor"] in texts[0], texts
    assert "t=6 exploited trial %d: lr 0.0008 → 0.012, momentum 0.9 → 0.72" % r["donor"] in texts[1], texts
    reason = d.find_element("id", "trial-reason").text
    assert reason.startswith("exploited trial %d at t=6" % r["donor"]), reason
    # The config shows the explored values.
    cfg = d.find_element("id", "config-table").text
    assert "0.012" in cfg and "0.72" in cfg, cfg
    h.screenshot(d, "decisions-trial-pbt.png")
    link = items[1].find_element("css selector", "a.donor")
    assert link.get_attribute("href").endswith("#/trials/%d" % r["donor"])
    link.click()
    h.wait("the donor's page", lambda: d.execute_script(
        "return location.hash === arguments[0] && window.__ctune.readyAt", "#/trials/%d" % r["donor"]))
    h.wait("the donor's empty history", lambda: "No decision about this trial yet." in
           d.find_element("id", "trial-events").text)
    # A paused trial: its badge, its reason, its one event.
    d.get(base + "/#/trials/%d" % r["paused"])
    h.wait_ready(d, "trial")
    h.wait("the paused badge", lambda: d.find_element("css selector", ".page-head .badge.s-paused"))
    ev = h.wait("one decision", lambda: d.find_elements("css selector", "#events-list li"))
    assert len(ev) == 1 and "paused at rung 1 (t=3)" in ev[0].text and ev[0].get_attribute("data-kind") == "paused", \
        [e.text for e in ev]


def main():
    args = parse_args()
    args.fake = True  # the contract's new fields, before every server part has landed
    h = Harness(args, "decisions")
    try:
        h.browser_soon()
        srv, port = h.start_server(extra=["--decisions"])
        line = srv.stdout.readline()
        assert line.startswith("decisions: "), line
        roles = json.loads(line[len("decisions: "):])
        base = "http://127.0.0.1:%d" % port
        d = h.browser()
        check_experiment(h, d, base, roles)
        check_trial(h, d, base, roles)
        # The experiments list: the PBT and HyperBand experiments both show.
        d.get(base + "/#/")
        h.wait_ready(d, "experiments")
        h.wait("both experiments", lambda: len(d.find_elements("css selector", "#experiments-table tbody tr")) == 2)
        errors = h.browser_errors(d)
        assert not errors, errors
        print("PASS: PAUSED, reasons and the decision history shown; screenshots in " + h.artifacts, flush=True)
        return 0
    finally:
        h.close()


if __name__ == "__main__":
    sys.exit(main())
