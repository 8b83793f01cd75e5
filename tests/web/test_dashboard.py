#!/usr/bin/env python3
"""Browser test of every dashboard page against a real ctune-server, with a small
experiment that this script drives through the worker protocol while chromium
watches: list, experiment (table, charts, live result, sort/filter, cancel),
trial (results, log, error), workers, dark and phone layouts, and no Chart.js.
Screenshots of each page land in the artifacts folder.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Client, Harness, fresh, parse_args  # noqa: E402

CONFIG = {
    "name": "browser-test",
    "metric": "loss", "mode": "min",
    "num_samples": 4, "max_concurrent_trials": 4, "seed": 7,
    "param_space": {
        "lr": {"type": "loguniform", "lower": 1e-4, "upper": 1e-1},
        "batch_size": {"type": "choice", "values": [16, 32, 64]},
        "momentum": 0.9,
    },
    "scheduler": {"type": "asha", "time_attr": "training_iteration", "max_t": 8,
                  "grace_period": 1, "reduction_factor": 2, "brackets": 1},
    "resources_per_trial": {"cpu": 1, "gpu": 0},
    "trainable": {"type": "command", "argv": ["true"]},
}
LOG_TEXT = "epoch 1 loss 0.50\nepoch 2 loss 0.40\n"
ERROR_TEXT = "ValueError: loss became NaN at iteration 1"
ADMIN_TOKEN = "browser-admin-token-0123456789"
WORKER_TOKEN = "browser-worker-token-0123456789"

INK_JS = """
const c = document.querySelector(arguments[0]);
if (!c || !c.width || !c.height) return false;
const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
let n = 0;
for (let i = 3; i < d.length; i += 4) if (d[i] !== 0) n++;
return n;
"""
ROWS_JS = """
return [...document.querySelectorAll(arguments[0] + ' tbody tr')]
  .filter((tr) => tr.dataset.id).map((tr) => tr.dataset.id);
"""


def result(it, loss):
    return {"training_iteration": it, "loss": loss, "accuracy": 1.0 - loss / 2}


def drive_experiment(api):
    """Submits the experiment and plays one worker: four leases, results, a
    stop, a failure and a log. Returns (experiment id, trials by role)."""
    eid = api.post("/experiments", CONFIG)["id"]
    wid = api.post("/workers", {"name": "browser-worker",
                                "resources": {"cpu": 4, "gpu": 0, "memory_mb": 4000}})["id"]
    leased = []
    for i in range(4):
        lease = api.post("/workers/%d/lease" % wid, {"free": {"cpu": 4 - i, "gpu": 0, "memory_mb": 4000}})
        assert lease and "trial" in lease, "lease %d gave no trial: %r" % (i, lease)
        leased.append(lease["trial"]["id"])
    a, b, c, d = leased
    # a and b survive milestone 1; c is far worse there, so ASHA stops it.
    assert api.post("/trials/%d/results" % a, result(1, 0.50))["decision"] == "continue"
    assert api.post("/trials/%d/results" % b, result(1, 0.45))["decision"] == "continue"
    assert api.post("/trials/%d/results" % c, result(1, 0.90))["decision"] == "stop"
    api.post("/trials/%d/complete" % c, {})
    api.post("/trials/%d/results" % a, result(2, 0.40))
    api.post("/trials/%d/results" % b, result(2, 0.35))
    api.post("/trials/%d/fail" % d, {"error": ERROR_TEXT, "exit_code": 5, "reason": "diverged"})
    api.call("PUT", "/api/v1/trials/%d/logs" % a, raw=LOG_TEXT.encode(), ctype="text/plain")
    api.post("/workers/%d/heartbeat" % wid, {"running": api.running(a, b)})
    return eid, wid, {"a": a, "b": b, "c": c, "d": d}


def check_list(h, d, base, eid):
    """Returns the selector of the experiment's link (the list redraws its
    rows at its updates: each use finds it anew)."""
    d.get(base + "/#/")
    h.wait_ready(d, "experiments")
    sel = '#experiments-table a[href="#/experiments/%d"]' % eid
    h.wait("the experiment in the list", lambda: d.find_element("css selector", sel))
    name = fresh(lambda: d.find_element("css selector", sel).text)
    assert name == "browser-test", name
    row = fresh(lambda: d.find_element("css selector", sel).find_element("xpath", "./ancestor::tr").text)
    assert "RUNNING" in row and "2 / 4" in row, row  # c stopped and d failed
    cells = fresh(lambda: [c.text for c in d.find_element("css selector", sel).find_elements(
        "xpath", "./ancestor::tr/td")])
    assert cells[2].startswith("0.35") and "loss (min)" in cells[2], cells  # best so far
    assert cells[3] != "—" and cells[4].endswith(" s"), cells  # started, duration
    return sel


def check_experiment(h, d, api, eid, t):
    h.wait_ready(d, "experiment")
    names = {tr["id"]: tr["name"] for tr in api.get("/experiments/%d/trials" % eid)["trials"]}
    rows = h.wait("four trial rows", lambda: (lambda r: r if len(r) == 4 else None)(
        d.execute_script(ROWS_JS, "#trials-table")))
    assert sorted(int(r) for r in rows) == sorted(names), (rows, names)
    table_text = fresh(lambda: d.find_element("css selector", "#trials-table").text)
    for name in names.values():
        assert name in table_text, name
    # Hyperparameter and metric columns.
    head = fresh(lambda: d.find_element("css selector", "#trials-table thead").text)
    for col in ("lr", "batch_size", "loss", "accuracy", "HYPERPARAMETERS", "LAST RESULT"):
        assert col in head, (col, head)
    # Sorted by loss ascending: b (0.35) first; the best card names b.
    assert rows[0] == str(t["b"]), rows
    best = fresh(lambda: d.find_element("css selector", "#best-trial").text)
    assert names[t["b"]] in best and "0.35" in best, best
    assert "2 of 4 trials done" in fresh(lambda: d.find_element("css selector", "main").text)
    bar = fresh(lambda: (lambda b: (b.get_attribute("value"), b.get_attribute("max")))(
        d.find_element("id", "experiment-progress")))
    assert bar == ("2", "4"), bar
    brief = fresh(lambda: d.find_element("css selector", "#h-config").find_element("xpath", "..").text)
    for part in ("loss (min)", "ASHA on training_iteration: max_t 8", "lr: loguniform", "command: true"):
        assert part in brief, (part, brief)
    # Charts drawn: the learning curves (Chart.js) and the parallel coordinates.
    ink = h.wait("ink on the learning curves", lambda: d.execute_script(INK_JS, "#curves"))
    assert ink > 500, ink
    assert d.execute_script(INK_JS, "#parcoords") > 500
    curves = d.execute_script(
        "const ch = Chart.getChart(document.getElementById('curves'));"
        "return ch.data.datasets.map(ds => [ds.trialId, ds.data.length, ds.borderWidth]);")
    by_id = {c[0]: c for c in curves}
    assert by_id[t["a"]][1] == 2 and by_id[t["b"]][1] == 2 and by_id[t["c"]][1] == 1, curves
    assert by_id[t["b"]][2] > by_id[t["a"]][2], "the best curve is not highlighted: %r" % curves
    marks = d.execute_script("return Chart.getChart(document.getElementById('curves'))"
                             ".options.plugins.ctuneMilestones.milestones.map(m => [m.t, m.cutoff]);")
    assert [m[0] for m in marks] == [1, 2, 4, 8] and marks[0][1] == 0.5, marks  # ASHA's milestones drawn
    # ASHA state: milestone 1 holds three values, and a cutoff.
    asha = fresh(lambda: d.find_element("css selector", "#asha-table").text)
    assert "Milestone" in asha and "Cutoff" in asha, asha
    first = fresh(lambda: d.find_elements("css selector", "#asha-table tbody tr")[0].text.split())
    assert first[-3:-1] == ["1", "3"], first


def check_live(h, d, api, eid, t):
    loads = d.execute_script("return window.__ctune.loads")
    t0 = time.time()
    assert api.post("/trials/%d/results" % t["a"], result(3, 0.123456))["decision"] == "continue"
    h.wait("the new result in the trial table", lambda: "0.1235" in d.find_element(
        "css selector", '#trials-table tr[data-id="%d"]' % t["a"]).text, timeout=5)
    latency = time.time() - t0
    h.wait("the new point on the curve", lambda: d.execute_script(
        "const ch = Chart.getChart(document.getElementById('curves'));"
        "const ds = ch.data.datasets.find(x => x.trialId === arguments[0]);"
        "return ds && ds.data.length === 3 && ds.data[2].x === 3;", t["a"]), timeout=3)
    print("live update: new result visible after %.2f s" % latency, flush=True)
    # Typically 0.3-1 s (the event stream, then at most one poll interval);
    # without the stream it would wait for the 5 s safety poll.
    assert latency < 3.5, "the new result took %.2f s to show (limit 3.5 s)" % latency
    assert d.execute_script("return window.__ctune.loads") == loads, "the page reloaded"
    # Incremental polling: one full trial list at load, then only ?since= requests.
    urls = d.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    # (the full list is read page by page: ?limit=&cursor=; the
    # page asks for the first 1,000 alone, to show them at once)
    full = [u for u in urls if u.endswith("/api/v1/experiments/%d/trials" % eid) or
            u.endswith("/api/v1/experiments/%d/trials?limit=1000" % eid)]
    since = [u for u in urls if "/experiments/%d/trials?since=" % eid in u]
    rsince = [u for u in urls if "/experiments/%d/results?since=" % eid in u]
    assert len(full) == 1 and since and rsince, (len(full), len(since), len(rsince))


def check_curve_hover_click(h, d, t):
    """Hovering a curve's point shows its trial and value; clicking opens the trial."""
    from selenium.webdriver.common.action_chains import ActionChains
    canvas = d.find_element("id", "curves")
    d.execute_script("arguments[0].scrollIntoView({block: 'center'})", canvas)
    x, y, w, hh = d.execute_script(
        "const ch = Chart.getChart(arguments[0]);"
        "const i = ch.data.datasets.findIndex(ds => ds.trialId === arguments[1]);"
        "const p = ch.getDatasetMeta(i).data[1];"
        "const r = arguments[0].getBoundingClientRect();"
        "return [p.x, p.y, r.width, r.height];", canvas, t["b"])
    ActionChains(d).move_to_element_with_offset(canvas, int(x - w / 2), int(y - hh / 2)).perform()
    tip = h.wait("the tooltip", lambda: d.execute_script(
        "const tt = Chart.getChart(arguments[0]).tooltip;"
        "return tt.opacity > 0 && tt.title.concat(tt.body.flatMap(b => b.lines)).join(' | ');", canvas))
    assert "browser-test_" in tip and "0.35" in tip, tip
    h.screenshot(d, "experiment-hover.png", full=False)
    ActionChains(d).click().perform()
    h.wait("the trial page after a click on its curve",
           lambda: d.current_url.endswith("#/trials/%d" % t["b"]))
    h.wait_ready(d, "trial")
    d.back()
    h.wait_ready(d, "experiment")


def check_table_controls(h, d, t):
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select
    # Keyboard: the Trial header's sort button, pressed with Enter.
    btn = d.find_element("css selector", '#trials-table button.sort[data-key="name"]')
    btn.send_keys(Keys.ENTER)
    th = h.wait("sort by trial name", lambda: d.find_element("css selector", '#trials-table th[aria-sort]'))
    assert th.text.startswith("Trial") and th.get_attribute("aria-sort") == "ascending", th.text
    # The re-rendered header keeps the keyboard focus on the same button.
    assert d.execute_script("return document.activeElement.dataset.key") == "name"
    rows = d.execute_script(ROWS_JS, "#trials-table")
    assert rows == sorted(rows, key=lambda r: int(r)), rows  # names follow creation order
    # By loss, then reversed: the trial without a loss stays last both ways.
    loss_btn = '#trials-table button.sort[data-key="m:loss"]'
    d.find_element("css selector", loss_btn).click()
    rows = d.execute_script(ROWS_JS, "#trials-table")
    assert rows == [str(t[k]) for k in ("a", "b", "c", "d")], rows
    d.find_element("css selector", loss_btn).click()
    rows = d.execute_script(ROWS_JS, "#trials-table")
    assert rows == [str(t[k]) for k in ("c", "b", "a", "d")], rows
    Select(d.find_element("id", "trials-status")).select_by_value("ERROR")
    rows = d.execute_script(ROWS_JS, "#trials-table")
    assert rows == [str(t["d"])], rows
    Select(d.find_element("id", "trials-status")).select_by_value("")
    assert len(d.execute_script(ROWS_JS, "#trials-table")) == 4


def check_trials(h, d, base, api, t):
    d.get(base + "/#/trials/%d" % t["a"])
    h.wait_ready(d, "trial")
    h.wait("three results", lambda: len(d.find_elements("css selector", "#results-table tbody tr")) == 3)
    res = fresh(lambda: d.find_element("css selector", "#results-table").text)
    assert "0.1235" in res and "training_iteration" in res, res
    h.wait("the log", lambda: "epoch 2 loss 0.40" in d.find_element("id", "trial-log").text)
    assert h.wait("ink on the trial chart", lambda: d.execute_script(INK_JS, "#trial-chart")) > 300
    cfg = fresh(lambda: d.find_element("id", "config-table").text)
    assert "lr" in cfg and "batch_size" in cfg, cfg
    assert "RUNNING" in fresh(lambda: d.find_element("id", "trial-status").text)
    # Live here too: a fourth result shows up in the table and on the chart.
    t0 = time.time()
    api.post("/trials/%d/results" % t["a"], result(4, 0.111))
    h.wait("the live result on the trial page", lambda: len(
        d.find_elements("css selector", "#results-table tbody tr")) == 4, timeout=5)
    took = time.time() - t0
    print("trial page: new result visible after %.2f s" % took, flush=True)
    assert took < 3.5, took  # as above: the stream, not the 5 s safety poll
    assert d.execute_script("return Chart.getChart(document.getElementById('trial-chart'))"
                            ".data.datasets[0].data.length") == 4
    h.screenshot(d, "trial.png")
    d.get(base + "/#/trials/%d" % t["d"])
    h.wait_ready(d, "trial")
    err = h.wait("the error", lambda: d.find_element("id", "trial-error").text)
    status = fresh(lambda: d.find_element("id", "trial-status").text)
    assert ERROR_TEXT in err and "ERROR" in status, err
    assert "Exit code\n5" in status, status
    h.screenshot(d, "trial-error.png")


def check_workers(h, d, base, t):
    d.get(base + "/#/")
    h.wait_ready(d, "experiments")
    d.find_element("css selector", 'nav a[data-nav="workers"]').click()
    h.wait_ready(d, "workers")
    row = h.wait("the worker row", lambda: d.find_element("css selector", "#workers-table tbody tr[data-id]").text)
    assert "browser-worker" in row and "4 cpu" in row and "ago" in row, row
    links = fresh(lambda: [a.get_attribute("href") for a in d.find_elements("css selector", "#workers-table a")])
    assert any(h_.endswith("#/trials/%d" % t["a"]) for h_ in links), links
    h.screenshot(d, "workers.png")
    # Keyboard: the first Tab reaches "Skip to content", which moves focus to
    # the page's content without changing the address.
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.common.action_chains import ActionChains
    url = d.current_url
    d.refresh()
    h.wait_ready(d, "workers")
    ActionChains(d).send_keys(Keys.TAB).perform()
    assert d.execute_script("return document.activeElement.id") == "skip-link"
    d.switch_to.active_element.send_keys(Keys.ENTER)
    assert d.execute_script("return document.activeElement.id") == "main"
    assert d.current_url == url, d.current_url


def check_cancel(h, d, base, api, eid):
    d.get(base + "/#/experiments/%d" % eid)
    h.wait_ready(d, "experiment")
    btn = d.find_element("id", "cancel-experiment")
    assert btn.is_displayed()
    btn.click()
    h.wait("the confirm dialog", lambda: d.find_element("id", "confirm-dialog").get_attribute("open") is not None)
    h.screenshot(d, "cancel-confirm.png", full=False)
    d.find_element("id", "confirm-yes").click()
    h.wait("CANCELLED on the page", lambda: "CANCELLED" in d.find_element("css selector", ".page-head").text)
    assert api.get("/experiments/%d" % eid)["status"] == "CANCELLED"
    assert not fresh(lambda: d.find_element("id", "cancel-experiment").is_displayed())
    h.screenshot(d, "experiment-cancelled.png")


def check_token(h, args, d):
    """Tokens by default, logged in as Jupyter does: without a session the
    page is the static login page (no data); the URL the server printed sets
    an HttpOnly session cookie and leaves the address bar without the token;
    then a page served from another origin that POSTs to the API (fetch with a
    text/plain body, a form, a JSON fetch) while the browser holds that cookie
    changes nothing. In the browser of the other checks, without its cookies:
    a new server's origin has no storage of its own yet."""
    if args.fake:
        return
    srv, port = h.start_server(db=os.path.join(h.tmp, "tokens.db"))
    base = "http://127.0.0.1:%d" % port
    api = Client(port)
    api.post("/experiments", dict(CONFIG, name="token-test"))
    login = h.login_urls[port]
    assert login.startswith(base + "/?token="), login
    d.execute_cdp_cmd("Network.clearBrowserCookies", {})
    d.get(base + "/")
    h.wait("the login page", lambda: "URL the server printed" in d.find_element("tag name", "h1").text)
    assert "token-test" not in d.page_source
    h.screenshot(d, "login-page.png", full=False)
    d.get(login)
    h.wait("the list after login", lambda: "token-test" in d.find_element("id", "experiments-table").text)
    assert "token" not in d.current_url, d.current_url
    cookies = d.get_cookies()
    assert len(cookies) == 1 and cookies[0]["httpOnly"] and cookies[0]["sameSite"] == "Strict", cookies
    assert d.execute_script("return document.cookie") == ""
    d.refresh()
    h.wait_ready(d, "experiments")

    # The attack page, on another origin (another port), with the session
    # cookie in the browser.
    import http.server
    import threading
    evil_cfg = json.dumps(dict(CONFIG, name="evil"))
    page = ("""<!doctype html><html><body><form id="f" method="POST" action="%(base)s/api/v1/experiments"
 enctype="text/plain"><input name='{"a":"' value='"}'></form><script>
const body = %(cfg)s;
Promise.allSettled([
  fetch("%(base)s/api/v1/experiments", {method: "POST", mode: "no-cors", credentials: "include",
        headers: {"Content-Type": "text/plain"}, body: JSON.stringify(body)}),
  fetch("%(base)s/api/v1/experiments/1/cancel", {method: "POST", mode: "no-cors", credentials: "include"}),
  fetch("%(base)s/api/v1/experiments", {method: "POST", credentials: "include",
        headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)}),
]).then(() => { document.title = "sent"; document.getElementById("f").submit(); });
</script></body></html>""" % {"base": base, "cfg": evil_cfg}).encode()

    class Evil(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *a):
            pass

    # A thread per connection, none waited for: Chrome may open a
    # connection it never sends on (a preconnect), which held a
    # one-at-a-time server, and its shutdown() here, for up to a minute.
    evil = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Evil)
    evil.daemon_threads = True
    threading.Thread(target=evil.serve_forever, args=(0.05,), daemon=True).start()
    try:
        evil_url = "http://localhost:%d/" % evil.server_address[1]
        d.get(evil_url)
        # The page submits its form once every fetch has settled: when the
        # browser has left it, the server has answered all four requests.
        h.wait("the attack page's requests", lambda: not d.current_url.startswith(evil_url))
    finally:
        evil.shutdown()
        evil.server_close()
    names = [e["name"] for e in api.get("/experiments")["experiments"]]
    assert names == ["token-test"], names
    assert api.get("/experiments/1")["status"] == "RUNNING"
    api.close()
    h.stop_server(srv)


def main():
    args = parse_args()
    h = Harness(args, "dashboard")
    try:
        h.browser_soon()
        srv, port = h.start_server()
        base = "http://127.0.0.1:%d" % port
        api = Client(port)
        eid, _wid, t = drive_experiment(api)

        d = h.browser()
        t0 = time.time()
        link = check_list(h, d, base, eid)
        h.screenshot(d, "experiments.png")
        fresh(lambda: d.find_element("css selector", link).click())
        check_experiment(h, d, api, eid, t)
        print("experiment page ready %.2f s after opening the list" % (time.time() - t0), flush=True)
        h.screenshot(d, "experiment.png")
        check_live(h, d, api, eid, t)
        check_curve_hover_click(h, d, t)
        check_table_controls(h, d, t)
        check_trials(h, d, base, api, t)
        check_workers(h, d, base, t)

        # Dark scheme and a phone-sized window, for the eye (screenshots) and a sanity check.
        d.execute_cdp_cmd("Emulation.setEmulatedMedia",
                          {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        d.get(base + "/#/experiments/%d" % eid)
        h.wait_ready(d, "experiment")
        bg = d.execute_script("return getComputedStyle(document.body).backgroundColor")
        assert bg == "rgb(17, 21, 28)", "dark scheme not applied: " + bg
        h.screenshot(d, "experiment-dark.png")
        d.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        # Headless windows are at least 500 px wide: emulate the phone's
        # viewport (in the same browser, then back to the window's).
        phone = d
        phone.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                              {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True})
        phone.get(base + "/#/experiments/%d" % eid)
        h.wait_ready(phone, "experiment")
        inner, wide = phone.execute_script(
            "return [window.innerWidth, document.documentElement.scrollWidth]")
        if inner != 390 or wide > inner:
            # Name what sticks out: the deepest elements wider than the phone.
            culprits = phone.execute_script(
                "return [...document.querySelectorAll('body *')].filter(e => "
                "e.getBoundingClientRect().right > 391 && ![...e.children].some(c => "
                "c.getBoundingClientRect().right > 391)).slice(0, 5).map(e => "
                "e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))")
            raise AssertionError("the phone layout scrolls sideways (%d px in %d): %s"
                                 % (wide, inner, culprits))
        hgt = phone.execute_script("return document.documentElement.scrollHeight")
        phone.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                              {"width": 390, "height": min(hgt, 6000), "deviceScaleFactor": 1, "mobile": True})
        h.screenshot(phone, "experiment-phone.png", full=False)
        phone.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})

        check_cancel(h, d, base, api, eid)
        errors = h.browser_errors(d)
        assert not errors, errors

        # Without Chart.js (vendor 404): same data, tables, and a note.
        # Bad addresses get a clear message, not a blank page.
        d.get(base + "/#/experiments/99999")
        h.wait_ready(d, "experiment")
        assert "There is no experiment 99999." in d.find_element("id", "main").text
        d.get(base + "/#/nonsense")
        h.wait("the not-found page", lambda: "Page not found" in d.find_element("id", "main").text)

        # The server goes away: the page says so instead of going stale silently.
        d.get(base + "/#/workers")
        h.wait_ready(d, "workers")
        api.close()
        h.stop_server(srv)
        h.wait("the connection-lost indicator", lambda: d.find_element("css selector", "#live.lost").text, timeout=6)
        empty = os.path.join(h.tmp, "no-vendor")
        os.makedirs(empty)
        srv, port = h.start_server(vendor_dir=empty)
        base = "http://127.0.0.1:%d" % port
        if args.fake:
            eid, _w, t = drive_experiment(Client(port))
        else:
            h.login(d, port)  # a new port: a new session cookie
        d.get(base + "/#/experiments/%d" % eid)
        h.wait_ready(d, "experiment")
        txt = fresh(lambda: d.find_element("css selector", "main").text)
        assert "Charts are off" in txt and "libjs-chart.js" in txt, txt[:400]
        assert len(d.execute_script(ROWS_JS, "#trials-table")) == 4
        assert d.execute_script(INK_JS, "#parcoords") > 500
        h.screenshot(d, "experiment-no-chartjs.png")
        d.get(base + "/#/trials/%d" % t["a"])
        h.wait_ready(d, "trial")
        txt = fresh(lambda: d.find_element("css selector", "main").text)
        assert "Charts are off" in txt, txt[:400]
        assert len(d.find_elements("css selector", "#results-table tbody tr")) >= 2
        h.stop_server(srv)
        check_token(h, args, d)
        print("PASS: every dashboard page checked; screenshots in " + h.artifacts, flush=True)
        return 0
    finally:
        h.close()


if __name__ == "__main__":
    sys.exit(main())
