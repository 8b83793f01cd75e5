#!/usr/bin/env python3
"""Browser test of the experiment page's progressive load (the target:
the page of a 100,000-trial experiment in under 2 s), in headless chromium
against tests/web/fake_server.py --demo N --page-delay S: the trial list
comes in pages (1000 first, then the rest after a delay), and the page must

  - show its header, counts and the first page of the table before the rest
    of the list has come, with a line "loaded 1,000 of N trials" and a note
    on the table that its sort and filter cover only the loaded trials;
  - follow live changes while the rest is still loading (a new best, in a
    trial whose page has not come yet, shows in the best-trial card);
  - once every page is in: no loading line, the table counts all N, and a
    sort and a filter are right over all of them (checked against the API);
  - close its event stream when left (a page in the back/forward cache kept
    it, and 6 such streams stalled the next page's requests).
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Client, Harness, parse_args  # noqa: E402

TRIALS = 3000
# Seconds the fake holds each later page at most: the checks while loading
# fit in it. They release the pages once done (GET /__fake/release-pages)
# instead of waiting the rest of it out.
DELAY = 6.0

ROWS_JS = "return [...document.querySelectorAll('#trials-table tbody tr')].filter((tr) => tr.dataset.id).length"
STATE_JS = """
const line = document.getElementById('trials-loaded');
const scope = document.getElementById('trials-scope');
return {all: window.__ctune.allTrialsAt ?? null,
        line: line && !line.hidden ? line.textContent : null,
        scope: scope && !scope.hidden ? scope.textContent : null,
        info: document.querySelector('.table-tools span.muted').textContent,
        progress: document.getElementById('experiment-progress') ? true : false,
        title: document.querySelector('.page-head h1').textContent};
"""


def main():
    args = parse_args()
    args.fake = True  # the fake's --page-delay makes the later pages slow
    h = Harness(args, "progressive")
    try:
        h.browser_soon()
        _srv, port = h.start_server(extra=["--demo", str(TRIALS), "--page-delay", str(DELAY)])
        base = "http://127.0.0.1:%d" % port
        api = Client(port)
        # The whole list, as the test's truth (one big page: no delay).
        trials = api.get("/experiments/1/trials?limit=10000")["trials"]
        assert len(trials) == TRIALS, len(trials)
        running = [t["id"] for t in trials if t["status"] == "RUNNING"]
        assert running and running[-1] > 1000, running  # in a later page

        d = h.browser()
        t0 = time.time()
        d.get(base + "/#/experiments/1")
        h.wait_ready(d, "experiment", timeout=DELAY - 1)
        shown = time.time() - t0
        s = d.execute_script(STATE_JS)
        print("first page shown after %.2f s: %s" % (shown, s), flush=True)
        assert s["all"] is None, "the whole list was read before the page was ready: %s" % s
        assert s["title"] == "fmnist-asha" and s["progress"], s
        rows = d.execute_script(ROWS_JS)
        assert 0 < rows <= 50, rows
        # The first page, and the best trial read on its own when it is not in it.
        best = api.get("/experiments/1")["best"]["trial_id"]
        n = format(1000 + (best > 1000), ",")
        s = h.wait("the best trial's card", lambda: (lambda x: x if x["line"].startswith("loaded " + n) else None)(
            d.execute_script(STATE_JS)), timeout=2)
        assert s["line"] == "loaded %s of 3,000 trials; the rest are on their way" % n, s
        assert s["info"].endswith("of " + n), s
        assert s["scope"] == "sort and filter cover the %s trials loaded so far" % n, s
        assert d.find_element("css selector", '#trials-table tr[data-id="%d"]' % best), best

        # Live while loading: a new best in a trial of a later page.
        tid = running[-1]
        api.post("/trials/%d/results" % tid, {"training_iteration": 1, "loss": 0.00123, "accuracy": 0.99})
        h.wait("the live best while loading", lambda: "0.00123" in d.find_element("id", "best-trial").text,
               timeout=DELAY - 2)
        s = d.execute_script(STATE_JS)
        assert s["all"] is None and s["line"] and s["line"].startswith("loaded "), s
        print("live best shown while loading: %s" % s["line"], flush=True)

        # Then the rest: every trial, no loading line, no partial note.
        api.call("GET", "/__fake/release-pages")
        h.wait("every page", lambda: d.execute_script("return window.__ctune.allTrialsAt"), timeout=DELAY + 10)
        s = h.wait("the table of all trials", lambda: (lambda x: x if x["info"].endswith("of 3,000") else None)(
            d.execute_script(STATE_JS)))
        assert s["line"] is None and s["scope"] is None, s
        # A sort over all of them: the smallest lr first, as the API says.
        d.execute_script("document.querySelector('#trials-table button.sort[data-key=\"c:lr\"]').click()")
        trials = api.get("/experiments/1/trials?limit=10000")["trials"]
        lo = min(trials, key=lambda t: t["config"]["lr"])
        first = d.execute_script("return document.querySelector('#trials-table tbody tr').dataset.id")
        assert int(first) == lo["id"], (first, lo["id"])
        # A filter over all of them.
        d.execute_script("const s = document.getElementById('trials-status'); s.value = 'TERMINATED';"
                         "s.dispatchEvent(new Event('change'));")
        n = sum(1 for t in trials if t["status"] == "TERMINATED")
        info = d.execute_script("return document.querySelector('.table-tools span.muted').textContent")
        assert info.endswith("of %s" % format(n, ",")), (info, n)
        h.screenshot(d, "experiment-progressive.png")
        errors = h.browser_errors(d)
        assert not errors, errors

        # Leaving the page closes its event stream, even where the browser
        # keeps the page in its back/forward cache: a stream left open holds
        # one of the 6 connections a browser allows a server, and a few
        # visits on the next page's list pages queued behind them.
        assert api.call("GET", "/__fake/streams")[1]["open"] == 1
        d.get("about:blank")
        h.wait("the event stream closed", lambda: api.call("GET", "/__fake/streams")[1]["open"] == 0, timeout=5)
        api.close()
        print("PASS: first page shown in %.2f s while later pages were held (up to %.0f s); "
              "live best while loading; sort and filter over all %d trials" % (shown, DELAY, TRIALS), flush=True)
        return 0
    finally:
        h.close()


if __name__ == "__main__":
    sys.exit(main())
