#!/usr/bin/env python3
"""Browser test of honest outcomes on the dashboard, in headless chromium
against tests/web/fake_server.py --outcomes: the experiments list has no
stray text under its heading; an experiment whose every trial ended in ERROR
shows a red FAILED badge (list and page), not a green TERMINATED, and its
"Best trial" card names no trial; where the lowest loss is an ERROR
trial's, the card names the best trial that did not fail; a trial's page
shows its attempts (a lost worker, the lease that resumed it) with its
decisions, in order; an experiment's preemptions and the work they lost
show under its counts; a trial that violates an outcome constraint has a red
"infeasible" tag in the trial table and on its page. Screenshots land in
the artifacts folder.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Harness, parse_args  # noqa: E402

COLOR_JS = "return getComputedStyle(arguments[0]).color;"
# The text <main> holds itself, outside any element (what a null appended
# to it would become).
MAIN_TEXT_JS = """
return [...document.getElementById('main').childNodes]
  .filter((n) => n.nodeType === Node.TEXT_NODE).map((n) => n.textContent).join('|');
"""


def badge_of(d, eid):
    return d.find_element("css selector", '#experiments-table tr[data-id="%d"] .badge' % eid)


def check_list(h, d, base, r):
    d.get(base + "/#/")
    h.wait_ready(d, "experiments")
    h.wait("both experiments", lambda: len(d.find_elements("css selector", "#experiments-table tbody tr")) == 2)
    stray = d.execute_script(MAIN_TEXT_JS)
    assert stray.strip() == "", repr(stray)
    head = d.find_element("css selector", "#main h1").find_element("xpath", "following-sibling::*[1]")
    assert head.tag_name != "p" or "null" not in head.text, head.text
    failed, mixed = badge_of(d, r["all_error_exp"]), badge_of(d, r["mixed_exp"])
    assert failed.text == "FAILED" and "s-failed" in failed.get_attribute("class"), failed.get_attribute("outerHTML")
    assert "every one of its 2 trials ended in ERROR" == failed.get_attribute("title"), failed.get_attribute("title")
    assert mixed.text == "TERMINATED", mixed.text
    assert d.execute_script(COLOR_JS, failed) != d.execute_script(COLOR_JS, mixed)
    best = d.find_element("css selector", '#experiments-table tr[data-id="%d"] td.num' % r["all_error_exp"])
    assert best.text.startswith("—"), best.text  # no best value from a failed trial
    h.screenshot(d, "outcomes-list.png")


def check_all_error(h, d, base, r):
    d.get(base + "/#/experiments/%d" % r["all_error_exp"])
    h.wait_ready(d, "experiment")
    badge = h.wait("the FAILED badge", lambda: d.find_element("css selector", ".page-head .badge.s-failed"))
    assert badge.text == "FAILED", badge.text
    best = h.wait("the best card's note", lambda: (lambda el: el if "ERROR" in el.text else None)(
        d.find_element("id", "best-trial")))
    assert "Every trial ended in ERROR" in best.text, best.text
    assert not d.find_elements("id", "preemptions")
    assert not best.find_elements("css selector", "a"), best.get_attribute("innerHTML")
    h.screenshot(d, "outcomes-all-error.png")


def check_mixed(h, d, base, r):
    d.get(base + "/#/experiments/%d" % r["mixed_exp"])
    h.wait_ready(d, "experiment")
    # The card is redrawn at each update: the link is found again each time.
    h.wait("the good trial named best", lambda: d.find_element("css selector", "#best-trial a")
           .get_attribute("href").endswith("#/trials/%d" % r["good_trial"]))
    badge = d.find_element("css selector", ".page-head .badge")
    assert badge.text == "TERMINATED", badge.text
    pre = h.wait("the preemptions note", lambda: d.find_element("id", "preemptions"))
    assert pre.text == "Preempted 2 times (not failures): 3 iterations and 4.5 s of work lost", \
        pre.text
    # The experiment with none shows no such note (checked on its page above).
    # Outcome constraints: the infeasible trial's row has the red tag, the
    # feasible one's none.
    tag = h.wait("the infeasible tag", lambda: d.find_element(
        "css selector", '#trials-table tr[data-id="%d"] .tag.infeasible' % r["error_trial"]))
    assert tag.text == "infeasible" and "total violation 400" in tag.get_attribute("title"), \
        tag.get_attribute("outerHTML")
    assert not d.find_elements("css selector", '#trials-table tr[data-id="%d"] .tag.infeasible'
                               % r["good_trial"])
    d.get(base + "/#/trials/%d" % r["error_trial"])
    h.wait_ready(d, "trial")
    h.wait("the infeasible tag on the trial page",
           lambda: d.find_element("css selector", ".page-head .tag.infeasible"))


def check_attempts(h, d, base, r):
    d.get(base + "/#/trials/%d" % r["good_trial"])
    h.wait_ready(d, "trial")
    items = h.wait("four history rows", lambda: (lambda x: x if len(x) == 4 else None)(
        d.find_elements("css selector", "#events-list li")))
    kinds = [i.get_attribute("data-kind") for i in items]
    assert kinds == ["leased", "lease_lost", "stop_rule", "leased"], kinds
    assert "attempt 1 leased to worker 1 (w1), from the start" in items[0].text, items[0].text
    assert "its worker was lost" in items[1].text, items[1].text
    assert "resuming from its checkpoint at iteration 3" in items[3].text, items[3].text
    h.screenshot(d, "outcomes-attempts.png")


def main():
    args = parse_args()
    args.fake = True  # the shapes the contract states, served by the fake
    h = Harness(args, "outcomes")
    try:
        h.browser_soon()
        srv, port = h.start_server(extra=["--outcomes"])
        line = srv.stdout.readline()
        assert line.startswith("outcomes: "), line
        roles = json.loads(line[len("outcomes: "):])
        base = "http://127.0.0.1:%d" % port
        d = h.browser()
        check_list(h, d, base, roles)
        check_all_error(h, d, base, roles)
        check_mixed(h, d, base, roles)
        check_attempts(h, d, base, roles)
        errors = h.browser_errors(d)
        assert not errors, errors
        print("PASS: FAILED badge, honest best trial, attempts and no stray text; screenshots in "
              + h.artifacts, flush=True)
        return 0
    finally:
        h.close()


if __name__ == "__main__":
    sys.exit(main())
