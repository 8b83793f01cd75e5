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
"infeasible" tag in the trial table and on its page. Failures told apart
(docs/scheduling.md#failures-told-apart): the failure view groups the
failed trials by error signature (the largest group first, with its
attributions) and its lr histogram puts the config's failures in the
highest lr range, against all trials; choosing the other group redraws it;
the trial table's Failure filter keeps only that attribution; the workers
page shows the quarantined worker's reason and its Release button puts it
back (status alive, the POST sent). Screenshots land in the artifacts
folder.
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
    h.wait("the three experiments", lambda: len(d.find_elements("css selector", "#experiments-table tbody tr")) == 3)
    stray = d.execute_script(MAIN_TEXT_JS)
    assert stray.strip() == "", repr(stray)
    head = d.find_element("css selector", "#main h1").find_element("xpath", "following-sibling::*[1]")
    assert head.tag_name != "p" or "null" not in head.text, head.text
    # Read in one go: the list is redrawn at each poll (a stale element
    # reads as "not yet").
    def badges():
        failed, mixed = badge_of(d, r["all_error_exp"]), badge_of(d, r["mixed_exp"])
        best = d.find_element("css selector", '#experiments-table tr[data-id="%d"] td.num' % r["all_error_exp"])
        return (failed.text, failed.get_attribute("class"), failed.get_attribute("title"), mixed.text,
                d.execute_script(COLOR_JS, failed), d.execute_script(COLOR_JS, mixed), best.text)
    ftext, fclass, ftitle, mtext, fcolor, mcolor, best = h.wait("the badges", badges)
    assert ftext == "FAILED" and "s-failed" in fclass, (ftext, fclass)
    assert "every one of its 2 trials ended in ERROR" == ftitle, ftitle
    assert mtext == "TERMINATED", mtext
    assert fcolor != mcolor
    assert best.startswith("—"), best  # no best value from a failed trial
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


CFG_SIG = "internal: loss exploded at step N"
GPU_SIG = "trial_exit: RuntimeError: CUDA error: an illegal memory access (device 0xN)"


def bins(d, param):
    return [(int(b.get_attribute("data-failed")), int(b.get_attribute("data-all")))
            for b in d.find_elements("css selector", '#failure-hists .hist[data-param="%s"] .bin' % param)]


def check_failure_view(h, d, base, r):
    d.get(base + "/#/experiments/%d" % r["failures_exp"])
    h.wait_ready(d, "experiment")
    rows = h.wait("two signature groups", lambda: (lambda x: x if len(x) == 2 else None)(
        d.find_elements("css selector", "#failure-groups tbody tr")))
    assert [x.get_attribute("data-sig") for x in rows] == [CFG_SIG, GPU_SIG], [x.text for x in rows]
    assert rows[0].find_element("css selector", "td.num").text == "4", rows[0].text
    assert [a.get_attribute("data-attr") for a in rows[0].find_elements("css selector", ".tag.attr")] == ["config"]
    # The config's 4 failures are the 4 highest lr: all in the top bin(s),
    # every trial counted once.
    lr = bins(d, "lr")
    assert sum(a for _, a in lr) == 12 and sum(f for f, _ in lr) == 4, lr
    assert lr[-1][0] >= 1 and all(f == 0 for f, _ in lr[:len(lr) // 2]), lr
    assert sum(a for _, a in bins(d, "batch")) == 12
    h.screenshot(d, "failures-view.png")
    rows[1].find_element("css selector", "button").click()
    h.wait("the GPU group's histogram", lambda: sum(f for f, _ in bins(d, "lr")) == 3)
    lr = bins(d, "lr")
    assert lr[0][0] >= 1 and all(f == 0 for f, _ in lr[len(lr) // 2:]), lr
    # The table's Failure filter: only the config-blamed trials.
    sel = d.find_element("id", "trials-attribution")
    sel.find_element("css selector", 'option[value="config"]').click()
    shown = h.wait("4 rows", lambda: (lambda x: x if len(x) == 4 else None)(
        d.find_elements("css selector", "#trials-table tbody tr[data-id]")))
    ids = sorted(int(x.get_attribute("data-id")) for x in shown)
    assert ids == sorted(r["config_trials"]), (ids, r["config_trials"])
    assert all(x.find_element("css selector", ".tag.attr").text == "config" for x in shown)
    # The trial's page says it too, beside its error.
    d.get(base + "/#/trials/%d" % r["config_trials"][0])
    h.wait_ready(d, "trial")
    h.wait("the attribution on the trial page", lambda: d.find_element("id", "trial-attribution").text
           == "Attribution: config")


def check_workers(h, d, base, r):
    d.get(base + "/#/workers")
    h.wait_ready(d, "workers")
    row = h.wait("the quarantined worker", lambda: d.find_element(
        "css selector", '#workers-table tr[data-id="%d"]' % r["bad_worker"]))
    assert "quarantined" in row.find_element("css selector", ".badge").text, row.text
    assert "failed 3 trials in a row" in row.find_element("css selector", ".quarantine-reason").text
    h.screenshot(d, "failures-quarantined.png")
    row.find_element("css selector", "button.release-quarantine").click()
    h.wait("alive again", lambda: d.find_element(
        "css selector", '#workers-table tr[data-id="%d"] .badge' % r["bad_worker"]).text == "alive")
    assert not d.find_elements("css selector", "button.release-quarantine")
    sent = json.loads(d.execute_script(
        "return fetch('/__fake/requests').then((r) => r.text());"))["requests"]
    assert any(q["method"] == "POST" and q["path"] == "/api/v1/workers/%d/release-quarantine" % r["bad_worker"]
               for q in sent), sent


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
        check_failure_view(h, d, base, roles)
        check_workers(h, d, base, roles)
        errors = h.browser_errors(d)
        assert not errors, errors
        print("PASS: FAILED badge, honest best trial, attempts, no stray text, failures by signature "
              "with histograms, the Failure filter, a quarantined worker released; screenshots in "
              + h.artifacts, flush=True)
        return 0
    finally:
        h.close()


if __name__ == "__main__":
    sys.exit(main())
