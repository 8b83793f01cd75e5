#!/usr/bin/env python3
"""Browser test of failures told apart on the dashboard, in headless
chromium against tests/web/fake_server.py --failures
(docs/scheduling.md#failures-told-apart): the experiment page's failure view
groups the failed trials by error signature (the largest group first, with
its attributions) and its lr histogram puts the config's failures in the
highest lr range, against all trials; choosing the other group redraws it;
the trial table's Failure filter keeps only that attribution; the workers
page shows the quarantined worker's reason and its Release button puts it
back (status alive, the POST sent). Screenshots land in the artifacts folder.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Harness, parse_args  # noqa: E402

CFG_SIG = "internal: loss exploded at step N"
GPU_SIG = "trial_exit: RuntimeError: CUDA error: an illegal memory access (device 0xN)"


def bins(d, param):
    return [(int(b.get_attribute("data-failed")), int(b.get_attribute("data-all")))
            for b in d.find_elements("css selector", '#failure-hists .hist[data-param="%s"] .bin' % param)]


def check_failure_view(h, d, base, r):
    d.get(base + "/#/experiments/%d" % r["exp"])
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
    args.fake = True  # the contract's shapes, served by the fake
    h = Harness(args, "failures")
    try:
        h.browser_soon()
        srv, port = h.start_server(extra=["--failures"])
        line = srv.stdout.readline()
        assert line.startswith("failures: "), line
        roles = json.loads(line[len("failures: "):])
        base = "http://127.0.0.1:%d" % port
        d = h.browser()
        check_failure_view(h, d, base, roles)
        check_workers(h, d, base, roles)
        errors = h.browser_errors(d)
        assert not errors, errors
        print("PASS: failures by signature with histograms, the Failure filter, release of a "
              "quarantined worker; screenshots in " + h.artifacts, flush=True)
        return 0
    finally:
        h.close()


if __name__ == "__main__":
    sys.exit(main())
