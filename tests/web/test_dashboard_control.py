#!/usr/bin/env python3
"""Browser test of the controls on the dashboard, in headless chromium.

Against tests/web/fake_server.py --control (docs/protocol.md#experiment-control):
pause, resume, extend, edit (max concurrent, priority, notes, tags), stop a
trial from its row and from its page, delete (a confirm dialog naming the
experiment; Close deletes nothing; 409 while trials run, then force), the
list's tags, notes and search box; each control's request (method, path,
body, JSON Content-Type, same-site Origin) and the page's new state; the
server's errors shown by the control (a field's by the field); a viewer
sees no control; a 403 from a server that does not name the role is shown.
Then a real ctune-server and ctune-worker with two slow trials: a viewer
session sees no control; the admin session stops a trial, pauses, resumes,
edits, extends and force-deletes from the page, and the server's state
follows. Screenshots land in the artifacts folder.
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Client, Harness, parse_args, read_tokens  # noqa: E402

ADMIN = "control-admin-token-0123456789"
VIEWER = "control-viewer-token-0123456789"
CONTROL_IDS = ("pause-experiment", "resume-experiment", "extend-experiment", "edit-experiment",
               "delete-experiment", "cancel-experiment")
VISIBLE_JS = """
return [...document.querySelectorAll(arguments[0])].filter((e) => e.offsetParent !== null)
  .map((e) => e.id || e.className);
"""


def visible(d, css):
    return d.execute_script(VISIBLE_JS, css)


def texts(d, css):
    """innerText of each match, read at once (the page redraws its head at every update)."""
    return d.execute_script("return [...document.querySelectorAll(arguments[0])].map((e) => e.innerText)", css)


def click(h, d, css, what):
    """Clicks the element in one script: rows are redrawn at every update."""
    h.wait(what, lambda: d.execute_script(
        "const e = document.querySelector(arguments[0]); if (!e || e.offsetParent === null) return false;"
        "e.click(); return true;", css))


def list_ids(d):
    return d.execute_script("return [...document.querySelectorAll('#experiments-table tbody tr[data-id]')]"
                            ".map((tr) => tr.dataset.id)")


def brief(d):
    return d.execute_script("return document.getElementById('h-config').parentElement.innerText")


def requests_since(port, n):
    c = Client(port, token="")
    try:
        # The test's own worker calls (leases) are not the dashboard's.
        return [r for r in c.call("GET", "/__fake/requests")[1]["requests"]
                if not r["path"].startswith("/api/v1/workers")][n:]
    finally:
        c.close()


class Fake:
    """The fake server of one test part, and what its controls were sent."""

    def __init__(self, h, extra=()):
        self.h = h
        self.srv, self.port = h.start_server(extra=["--control", "--token", ADMIN, "--viewer-token", VIEWER]
                                             + list(extra))
        line = self.srv.stdout.readline()
        assert line.startswith("control: "), line
        self.ids = json.loads(line[len("control: "):])
        self.base = "http://127.0.0.1:%d" % self.port
        self.seen = 0

    def sent(self, n=1, timeout=5.0):
        """The next n state-changing requests the dashboard sent."""
        got = self.h.wait("%d request(s)" % n, lambda: (lambda r: r if len(r) >= n else None)(
            requests_since(self.port, self.seen)), timeout)
        self.seen += len(got)
        assert len(got) == n, got
        for r in got:  # the server's cross-site rules hold for each
            assert r["origin"] == self.base, r
            assert r["body"] is None or r["content_type"] == "application/json", r
        return got

    def nothing_sent(self):
        assert requests_since(self.port, self.seen) == [], requests_since(self.port, self.seen)

    def api(self, token=ADMIN):
        return Client(self.port, token=token)


def open_as(h, d, base, token, path):
    """Logs this tab in with a token (the dialog's sessionStorage) and opens
    path. The token is set on a small page of the fake's own (same origin,
    no dashboard to boot); path ("/#/...") is then a new document."""
    d.get(base + "/__fake/streams")
    d.execute_script("sessionStorage.setItem('ctune-token', arguments[0])", token)
    d.get(base + path)


def page_status(d):
    return texts(d, ".page-head .badge")[0]


def row_text(d, tid):
    return texts(d, '#trials-table tr[data-id="%d"]' % tid)[0]


def check_list(h, d, f):
    open_as(h, d, f.base, ADMIN, "/#/")
    h.wait_ready(d, "experiments")
    h.wait("two experiments", lambda: (lambda r: r if len(r) == 2 else None)(
        d.find_elements("css selector", "#experiments-table tbody tr[data-id]")))
    text = d.find_element("id", "experiments-table").text
    for part in ("first try with the CNN", "a sweep over the learning rate", "baseline", "cnn", "lr-sweep", "Tags"):
        assert part in text, (part, text)
    h.screenshot(d, "control-list.png")
    # The search box: ?q= matches notes, the list shows only the match.
    d.find_element("id", "experiments-q").send_keys("learning rate")
    h.wait("only the sweep", lambda: list_ids(d) == [str(f.ids["finished_exp"])])
    urls = d.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert any("/api/v1/experiments?q=learning+rate" in u for u in urls), urls[-5:]
    d.find_element("id", "experiments-clear").click()
    h.wait("both again", lambda: len(d.find_elements("css selector", "#experiments-table tbody tr[data-id]")) == 2)
    # A tag chip filters by that tag (?tag=).
    h.wait("the baseline chip", lambda: d.execute_script(
        "const c = [...document.querySelectorAll('#experiments-table button.chip')]"
        ".find((x) => x.textContent === 'baseline'); if (c) c.click(); return Boolean(c);"))
    h.wait("only the tagged one", lambda: list_ids(d) == [str(f.ids["running_exp"])])
    assert d.find_element("id", "experiments-tag").get_attribute("value") == "baseline"
    d.find_element("id", "experiments-q").send_keys("no such thing")
    h.wait("no match", lambda: "No experiment matches this search." in d.find_element("id", "main").text)
    d.find_element("id", "experiments-clear").click()
    h.wait("both again", lambda: len(d.find_elements("css selector", "#experiments-table tbody tr[data-id]")) == 2)


def check_pause_resume(h, d, f):
    eid, ids = f.ids["running_exp"], f.ids
    d.get(f.base + "/#/experiments/%d" % eid)
    h.wait_ready(d, "experiment")
    shown = visible(d, "#experiment-controls button, #cancel-experiment")
    assert shown == ["pause-experiment", "extend-experiment", "edit-experiment", "delete-experiment",
                     "cancel-experiment"], shown
    meta = texts(d, "#experiment-meta")[0]
    assert "first try with the CNN" in meta and "baseline" in meta and "cnn" in meta, meta
    stops = visible(d, "#trials-table button.stop-trial")
    assert len(stops) == 2, stops  # the two running trials' rows
    h.screenshot(d, "control-experiment.png")
    d.find_element("id", "pause-experiment").click()
    r = f.sent()[0]
    assert (r["method"], r["path"], r["body"]) == ("POST", "/api/v1/experiments/%d/pause" % eid, {}), r
    h.wait("PAUSED on the page", lambda: page_status(d) == "PAUSED")
    h.wait("the trials paused", lambda: "PAUSED" in row_text(d, ids["run1"]) and "PAUSED" in row_text(d, ids["run2"]))
    shown = visible(d, "#experiment-controls button")
    assert shown == ["resume-experiment", "extend-experiment", "edit-experiment", "delete-experiment"], shown
    assert visible(d, "#trials-table button.stop-trial") == []  # no running row left
    d.find_element("id", "resume-experiment").click()
    r = f.sent()[0]
    assert (r["method"], r["path"]) == ("POST", "/api/v1/experiments/%d/resume" % eid), r
    h.wait("RUNNING again", lambda: page_status(d) == "RUNNING")
    h.wait("the trials pending", lambda: "PENDING" in row_text(d, ids["run1"]))
    assert visible(d, "#experiment-controls button")[0] == "pause-experiment"


def check_stop(h, d, f):
    ids = f.ids
    api = f.api()
    for tid in (ids["run1"], ids["run2"]):  # a worker takes both again
        assert api.post("/workers/1/lease", {})["trial"]["id"] == tid
    click(h, d, '#trials-table tr[data-id="%d"] button.stop-trial' % ids["run1"], "Stop on the running row")
    r = f.sent()[0]
    assert (r["method"], r["path"]) == ("POST", "/api/v1/trials/%d/stop" % ids["run1"]), r
    h.wait("the row TERMINATED", lambda: "TERMINATED" in row_text(d, ids["run1"]) and
           "stopped by user" in row_text(d, ids["run1"]))
    assert not d.find_elements("css selector", '#trials-table tr[data-id="%d"] button.stop-trial' % ids["run1"])
    # The trial page's Stop.
    d.get(f.base + "/#/trials/%d" % ids["run2"])
    h.wait_ready(d, "trial")
    click(h, d, "#stop-trial", "Stop on the trial page")
    r = f.sent()[0]
    assert (r["method"], r["path"]) == ("POST", "/api/v1/trials/%d/stop" % ids["run2"]), r
    h.wait("TERMINATED on the trial page", lambda: page_status(d) == "TERMINATED")
    assert not d.find_elements("id", "stop-trial")
    assert "stopped by user" in d.find_element("id", "trial-status").text
    api.close()


def check_extend(h, d, f):
    eid = f.ids["running_exp"]
    d.get(f.base + "/#/experiments/%d" % eid)
    h.wait_ready(d, "experiment")
    d.find_element("id", "extend-experiment").click()
    h.wait("the extend dialog", lambda: d.find_element("id", "extend-dialog").get_attribute("open") is not None)
    assert d.find_element("id", "extend-dialog-title").text == "Extend ctl-asha"
    # max_t down: the server's 400 shows by that field; the dialog stays open.
    d.find_element("id", "extend-dialog-max_t").send_keys("4")
    d.find_element("id", "extend-dialog-ok").click()
    r = f.sent()[0]
    assert (r["method"], r["path"], r["body"]) == ("PATCH", "/api/v1/experiments/%d" % eid,
                                                   {"scheduler": {"max_t": 4}}), r
    err = h.wait("the field's error", lambda: d.find_element("id", "extend-dialog-max_t-error").text)
    assert "scheduler.max_t must be a number >= 8" in err, err
    assert d.find_element("id", "extend-dialog").get_attribute("open") is not None
    h.screenshot(d, "control-extend-error.png", full=False)
    d.find_element("id", "extend-dialog-max_t").clear()
    d.find_element("id", "extend-dialog-max_t").send_keys("16")
    d.find_element("id", "extend-dialog-num_samples").send_keys("6")
    d.find_element("id", "extend-dialog-ok").click()
    r = f.sent()[0]
    assert (r["method"], r["body"]) == ("PATCH", {"num_samples": 6, "scheduler": {"max_t": 16}}), r
    h.wait("the dialog closed", lambda: not d.find_elements("id", "extend-dialog"))
    h.wait("six trials", lambda: "of 6 trials done" in d.find_element("id", "main").text)
    assert "null" not in d.find_element("id", "main").text  # no stray null child drawn
    b = brief(d)
    assert "max_t 16" in b and "Samples\n6" in b, b
    h.wait("six rows", lambda: len(d.find_elements("css selector", "#trials-table tbody tr[data-id]")) == 6)


def check_edit(h, d, f):
    eid = f.ids["running_exp"]
    d.find_element("id", "edit-experiment").click()
    h.wait("the edit dialog", lambda: d.find_element("id", "edit-dialog").get_attribute("open") is not None)
    assert d.find_element("id", "edit-dialog-tags").get_attribute("value") == "baseline, cnn"
    assert d.find_element("id", "edit-dialog-notes").get_attribute("value") == "first try with the CNN"
    assert d.find_element("id", "edit-dialog-max_concurrent_trials").get_attribute("value") == "4"
    pr = d.find_element("id", "edit-dialog-priority")
    assert pr.get_attribute("value") == "1"
    pr.clear()
    pr.send_keys("0")
    d.find_element("id", "edit-dialog-ok").click()
    r = f.sent()[0]
    assert (r["method"], r["path"], r["body"]) == ("PATCH", "/api/v1/experiments/%d" % eid, {"priority": 0}), r
    err = h.wait("the priority error", lambda: d.find_element("id", "edit-dialog-priority-error").text)
    assert err == "priority must be a number > 0", err
    pr.clear()
    pr.send_keys("2.5")
    mc = d.find_element("id", "edit-dialog-max_concurrent_trials")
    mc.clear()
    mc.send_keys("2")
    notes = d.find_element("id", "edit-dialog-notes")
    notes.clear()
    notes.send_keys("second try: lower lr")
    tags = d.find_element("id", "edit-dialog-tags")
    tags.clear()
    tags.send_keys("baseline, tuned")
    d.find_element("id", "edit-dialog-ok").click()
    r = f.sent()[0]
    assert r["body"] == {"priority": 2.5, "max_concurrent_trials": 2, "notes": "second try: lower lr",
                         "tags": ["baseline", "tuned"]}, r
    h.wait("the dialog closed", lambda: not d.find_elements("id", "edit-dialog"))
    h.wait("the new notes", lambda: d.find_element("id", "experiment-notes").text == "second try: lower lr")
    assert texts(d, "#experiment-tags .chip") == ["baseline", "tuned"]
    assert texts(d, "#experiment-priority") == ["2.5"]
    b = brief(d)
    assert "at most 2 at once" in b, b
    h.screenshot(d, "control-edited.png")


def check_delete(h, d, f):
    eid = f.ids["running_exp"]
    api = f.api()
    tid = api.post("/workers/1/lease", {})["trial"]["id"]  # one trial runs
    h.wait("a running row", lambda: "RUNNING" in row_text(d, tid))
    d.find_element("id", "delete-experiment").click()
    h.wait("the delete dialog", lambda: d.find_element("id", "delete-dialog").get_attribute("open") is not None)
    assert d.find_element("id", "delete-dialog-title").text == "Delete ctl-asha?"
    text = d.find_element("id", "delete-dialog-text").text
    assert "ctl-asha" in text and "6 trials" in text and "cannot be undone" in text, text
    force = d.find_element("id", "delete-dialog-force")
    assert force.is_displayed() and not force.is_selected()
    assert "Stop its 1 running trial first" in d.find_element("id", "delete-dialog").text
    h.screenshot(d, "control-delete-confirm.png", full=False)
    # Close: nothing is sent, nothing deleted.
    d.find_element("id", "delete-dialog-no").click()
    h.wait("the dialog closed", lambda: not d.find_elements("id", "delete-dialog"))
    time.sleep(0.3)
    f.nothing_sent()
    assert api.get("/experiments/%d" % eid)["name"] == "ctl-asha"
    # Confirmed without force while a trial runs: the server's 409 in the dialog.
    d.find_element("id", "delete-experiment").click()
    h.wait("the delete dialog", lambda: d.find_element("id", "delete-dialog").get_attribute("open") is not None)
    d.find_element("id", "delete-dialog-ok").click()
    r = f.sent()[0]
    assert (r["method"], r["path"], r["query"]) == ("DELETE", "/api/v1/experiments/%d" % eid, ""), r
    assert r["body"] is None and r["content_type"] is None, r
    err = h.wait("the 409", lambda: d.find_element("id", "delete-dialog-error").text)
    assert "1 running trial" in err and "force=1" in err, err
    d.find_element("id", "delete-dialog-force").click()
    d.find_element("id", "delete-dialog-ok").click()
    r = f.sent()[0]
    assert (r["method"], r["path"], r["query"]) == ("DELETE", "/api/v1/experiments/%d" % eid, "force=1"), r
    h.wait("back on the list", lambda: d.execute_script(
        "return location.hash === '#/' && window.__ctune.page === 'experiments' && window.__ctune.readyAt"))
    assert "Deleted ctl-asha." in d.find_element("id", "main").text
    h.wait("one experiment left", lambda: list_ids(d) == [str(f.ids["finished_exp"])])
    assert [e["id"] for e in api.get("/experiments")["experiments"]] == [f.ids["finished_exp"]]
    api.close()


def check_viewer(h, d, f):
    """A viewer session: no control anywhere (a new fake's origin: the tab
    holds no token for it yet)."""
    open_as(h, d, f.base, VIEWER, "/#/experiments/%d" % f.ids["running_exp"])
    h.wait_ready(d, "experiment")
    h.wait("the trial rows", lambda: len(d.find_elements("css selector", "#trials-table tbody tr[data-id]")) == 4)
    assert page_status(d) == "RUNNING"
    assert visible(d, "#experiment-controls button, #cancel-experiment, button.stop-trial") == []
    assert "Actions" not in d.find_element("css selector", "#trials-table thead").text
    d.get(f.base + "/#/trials/%d" % f.ids["run1"])
    h.wait_ready(d, "trial")
    assert page_status(d) == "RUNNING"
    assert not d.find_elements("id", "stop-trial")
    h.screenshot(d, "control-viewer.png")
    assert requests_since(f.port, f.seen) == []


def check_forbidden(h, d, f):
    """A server that does not name the role (--no-role-header): the viewer
    sees the buttons, the server refuses, its 403 message shows by the
    button, and the other controls go away."""
    open_as(h, d, f.base, VIEWER, "/#/experiments/%d" % f.ids["running_exp"])
    h.wait_ready(d, "experiment")
    d.find_element("id", "pause-experiment").click()
    err = h.wait("the 403 by Pause", lambda: d.find_element("id", "pause-experiment-error").text)
    assert err == "a viewer token cannot call POST /api/v1/experiments/%d/pause" % f.ids["running_exp"], err
    h.wait("the controls hidden", lambda: visible(d, "#experiment-controls button") == [])
    assert d.find_element("id", "pause-experiment-error").is_displayed()
    assert page_status(d) == "RUNNING"
    h.screenshot(d, "control-forbidden.png", full=False)


def js_errors(h, d):
    """Console errors other than the 4xx replies this test provokes."""
    return [m for m in h.browser_errors(d) if "the server responded with a status of 4" not in m]


def fake_part(args):
    """Returns its browser, for the real part (a start costs seconds)."""
    args.fake = True
    h = Harness(args, "control")
    try:
        h.browser_soon()
        f = Fake(h)
        d = h.browser()
        check_list(h, d, f)
        check_pause_resume(h, d, f)
        check_stop(h, d, f)
        check_extend(h, d, f)
        check_edit(h, d, f)
        check_delete(h, d, f)
        errors = js_errors(h, d)
        assert not errors, errors
        h.stop_server(f.srv)
        f = Fake(h)
        check_viewer(h, d, f)
        h.stop_server(f.srv)
        check_forbidden(h, d, Fake(h, ["--no-role-header"]))
        print("PASS (fake server): pause, resume, extend, edit, stop, delete, search, viewer", flush=True)
        # Off the fake's page before it stops; the console of the viewer and
        # 403 pages was never checked (the 403 is provoked), so it is dropped.
        d.get("about:blank")
        d.get_log("browser")
        h.drivers.remove(d)
        return d
    finally:
        h.close()


TRAINABLE = """#!/bin/sh
# A slow trial: one result every 0.1 s for 60 s.
i=0
while [ "$i" -lt 600 ]; do
  sleep 0.1
  i=$((i + 1))
  echo "{\\"training_iteration\\": $i, \\"loss\\": $(awk "BEGIN { print 1 / $i }")}"
done
"""


def real_part(args, d):
    """A real ctune-server and ctune-worker running two slow trials: a
    viewer session sees no control, an admin session drives Stop, Pause,
    Resume, Edit, Extend and a forced Delete from the page, and the
    server's state follows. In the fake part's browser `d` (quit here)."""
    exe = os.path.join(args.bin_dir or "", "ctune-server")
    worker = os.path.join(args.bin_dir or "", "ctune-worker")
    if not args.bin_dir or not os.access(exe, os.X_OK) or not os.access(worker, os.X_OK):
        d.quit()
        print("real-server part skipped: no ctune-server and ctune-worker in %s" % args.bin_dir, flush=True)
        return
    args.fake = False
    h = Harness(args, "control-real")
    h.drivers.append(d)  # quit by close()
    try:
        srv, port = h.start_server()
        base = "http://127.0.0.1:%d" % port
        api = Client(port)
        tokens = os.path.join(h.tmp, "ctune.db.tokens")
        script = os.path.join(h.tmp, "slow.sh")
        with open(script, "w") as f:
            f.write(TRAINABLE)
        os.chmod(script, 0o755)
        cfg = {"name": "real-control", "metric": "loss", "mode": "min", "num_samples": 2,
               "max_concurrent_trials": 2, "param_space": {"lr": {"type": "uniform", "lower": 0.001, "upper": 0.1}},
               "resources_per_trial": {"cpu": 1, "gpu": 0},
               "trainable": {"type": "command", "argv": ["/bin/sh", script]}}
        eid = api.post("/experiments", cfg)["id"]
        log = open(os.path.join(h.tmp, "worker.log"), "w")
        h.procs.append(subprocess.Popen(
            [worker, "--server", base, "--name", "web", "--work-dir", os.path.join(h.tmp, "work"),
             "--poll-ms", "200", "--stop-grace-s", "2", "--cpus", "2", "--token-file", tokens],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        log.close()
        viewer = read_tokens(tokens)["viewer"]
        h.login_all(d)  # the admin, through the printed URL
        d.get(base + "/#/experiments/%d" % eid)
        h.wait_ready(d, "experiment")
        running = lambda: [t["id"] for t in api.get("/experiments/%d/trials" % eid)["trials"]  # noqa: E731
                           if t["status"] == "RUNNING"]
        t1, t2 = sorted(h.wait("two running trials", lambda: (lambda r: r if len(r) == 2 else None)(running()), 20))
        h.wait("two Stop buttons", lambda: len(visible(d, "#trials-table button.stop-trial")) == 2)
        shown = visible(d, "#experiment-controls button")
        assert shown == ["pause-experiment", "extend-experiment", "edit-experiment", "delete-experiment"], shown
        # A viewer session: the same page without a control (then the
        # admin's again, through the printed URL).
        v = d
        v.execute_cdp_cmd("Network.clearBrowserCookies", {})
        v.get(base + "/?token=" + viewer)
        v.get(base + "/#/experiments/%d" % eid)
        h.wait_ready(v, "experiment")
        h.wait("the running rows", lambda: "RUNNING" in row_text(v, t1))
        assert visible(v, "#experiment-controls button, #cancel-experiment, button.stop-trial") == []
        errors = js_errors(h, v)  # the admin's so far and the viewer's
        assert not errors, errors
        d.execute_cdp_cmd("Network.clearBrowserCookies", {})
        h.login(d, port)
        d.get(base + "/#/experiments/%d" % eid)
        h.wait_ready(d, "experiment")
        h.wait("two Stop buttons again", lambda: len(visible(d, "#trials-table button.stop-trial")) == 2)
        # Stop one trial from its row.
        click(h, d, '#trials-table tr[data-id="%d"] button.stop-trial' % t1, "Stop on the row")
        h.wait("the row TERMINATED", lambda: "TERMINATED" in row_text(d, t1), 15)
        t = api.get("/trials/%d" % t1)
        assert t["status"] == "TERMINATED" and t["reason"] == "stopped by user", t
        # Pause: the other trial ends PAUSED; Resume: it runs again.
        d.find_element("id", "pause-experiment").click()
        h.wait("PAUSED", lambda: page_status(d) == "PAUSED")
        h.wait("the trial PAUSED", lambda: "PAUSED" in row_text(d, t2), 15)
        assert api.get("/experiments/%d" % eid)["status"] == "PAUSED"
        d.find_element("id", "resume-experiment").click()
        h.wait("RUNNING", lambda: page_status(d) == "RUNNING")
        h.wait("the trial running again", lambda: api.get("/trials/%d" % t2)["status"] == "RUNNING", 15)
        # Edit: priority, notes, tags.
        d.find_element("id", "edit-experiment").click()
        h.wait("the edit dialog", lambda: d.find_element("id", "edit-dialog").get_attribute("open") is not None)
        pr = d.find_element("id", "edit-dialog-priority")
        pr.clear()
        pr.send_keys("3")
        d.find_element("id", "edit-dialog-notes").send_keys("from the browser")
        d.find_element("id", "edit-dialog-tags").send_keys("real, e2e")
        d.find_element("id", "edit-dialog-ok").click()
        h.wait("the dialog closed", lambda: not d.find_elements("id", "edit-dialog"))
        e = api.get("/experiments/%d" % eid)
        assert (e["priority"], e["notes"], e["tags"]) == (3, "from the browser", ["real", "e2e"]), e
        h.wait("the tags on the page", lambda: texts(d, "#experiment-tags .chip") == ["real", "e2e"])
        # Extend by one sample.
        d.find_element("id", "extend-experiment").click()
        h.wait("the extend dialog", lambda: d.find_element("id", "extend-dialog").get_attribute("open") is not None)
        d.find_element("id", "extend-dialog-num_samples").send_keys("3")
        d.find_element("id", "extend-dialog-ok").click()
        h.wait("the dialog closed", lambda: not d.find_elements("id", "extend-dialog"))
        assert api.get("/experiments/%d" % eid)["num_trials"] == 3
        h.wait("3 planned", lambda: "of 3 trials done" in d.find_element("id", "main").text)
        # Delete: refused while a trial runs (the server's 409 in the dialog), then forced.
        d.find_element("id", "delete-experiment").click()
        h.wait("the delete dialog", lambda: d.find_element("id", "delete-dialog").get_attribute("open") is not None)
        d.find_element("id", "delete-dialog-ok").click()
        err = h.wait("the 409", lambda: d.find_element("id", "delete-dialog-error").text)
        assert api.get("/experiments/%d" % eid)["id"] == eid, err
        d.find_element("id", "delete-dialog-force").click()
        d.find_element("id", "delete-dialog-ok").click()
        h.wait("back on the list", lambda: d.execute_script(
            "return location.hash === '#/' && window.__ctune.page === 'experiments' && window.__ctune.readyAt"))
        assert "Deleted real-control." in d.find_element("id", "main").text
        api.call("GET", "/api/v1/experiments/%d" % eid, expect=(404,))
        h.screenshot(d, "control-real-deleted.png", full=False)
        errors = js_errors(h, d)
        assert not errors, errors
        api.close()
        print("PASS (ctune-server + ctune-worker): viewer sees no control; stop, pause, resume, edit, "
              "extend and a forced delete from the page", flush=True)
    finally:
        h.close()


def main():
    args = parse_args()
    d = fake_part(parse_args(sys.argv[1:]))
    real_part(args, d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
