"""Strict JSON in and safe headers out, against the real daemon:
- a string holding \\u0000 (cJSON would cut it at the NUL), a duplicate key or
  data after the body's value is a 400 invalid_json naming the path, and
  nothing is stored;
- every reply carries the CSP / framing / nosniff / referrer headers, the
  dashboard's own files need nothing the CSP forbids, and /vendor/ serves
  only the files the dashboard loads."""
import json
import os
import re

from ctune_e2e import Server, Runner, experiment, register, lease, tmpdir

WEB = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "..", "..", "web"))


def refused(s, method, path, raw, want_path):
    st, b, _ = s.request(method, path, raw, headers={"Content-Type": "application/json"})
    assert st == 400, (path, raw, st, b)
    assert b["error"]["code"] == "invalid_json", b
    assert b["error"]["path"] == want_path, (want_path, b)
    return b


def test_nul_in_name_is_refused_and_nothing_stored():
    s = Server()
    body = json.dumps(experiment(name="a\u0000b"))
    assert "\\u0000" in body
    b = refused(s, "POST", "/api/v1/experiments", body, "name")
    assert "NUL" in b["error"]["message"] and "name" in b["error"]["message"]
    assert s.ok("GET", "/api/v1/experiments")["experiments"] == []
    s.stop()


def test_nul_anywhere_in_a_config_names_the_field():
    s = Server()
    cfg = experiment()
    cfg["trainable"] = {"type": "command", "argv": ["sh", "-c", "x\u0000; rm -rf /"]}
    refused(s, "POST", "/api/v1/experiments", json.dumps(cfg), "trainable.argv[2]")
    cfg["trainable"] = {"type": "command", "argv": ["true"], "env": {"K": "v\u0000"}}
    refused(s, "POST", "/api/v1/experiments", json.dumps(cfg), "trainable.env.K")
    cfg = experiment()
    cfg["param_space"] = {"a\u0000": {"type": "choice", "values": [1]}}
    refused(s, "POST", "/api/v1/experiments", json.dumps(cfg), "param_space.a\\u0000")
    st, b, _ = s.post("/api/v1/workers", {"name": "w\u0000x", "resources": {"cpu": 1}})
    assert st == 400 and b["error"]["path"] == "name", (st, b)
    assert s.ok("GET", "/api/v1/experiments")["experiments"] == []
    assert s.ok("GET", "/api/v1/workers")["workers"] == []
    s.stop()


def test_duplicate_key_and_trailing_data_in_a_config():
    s = Server()
    body = json.dumps(experiment())
    refused(s, "POST", "/api/v1/experiments", body[:-1] + ', "name": "other"}', "name")
    refused(s, "POST", "/api/v1/experiments", body + ' {"x": 1}', "")
    refused(s, "POST", "/api/v1/experiments", body + ' garbage', "")
    assert s.ok("GET", "/api/v1/experiments")["experiments"] == []
    s.ok("POST", "/api/v1/experiments", body, status=201)  # the same body, clean
    s.stop()


def test_duplicate_key_in_a_result_is_refused_and_not_stored():
    s = Server()
    s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)
    w = register(s)
    t = lease(s, w)
    path = "/api/v1/trials/%d/results" % t["id"]
    lh = s.leases[t["id"]]
    # The server would read loss 9, the dashboard (JSON.parse: last wins) 0.1.
    st, b, _ = s.request("POST", path, '{"training_iteration": 1, "loss": 9, "loss": 0.1}',
                         headers={"Content-Type": "application/json", "X-Ctune-Lease": lh})
    assert st == 400 and b["error"]["code"] == "invalid_json" and b["error"]["path"] == "loss", b
    st, b, _ = s.request("POST", path, '{"training_iteration": 1, "loss": 1}{"loss": 0}',
                         headers={"Content-Type": "application/json", "X-Ctune-Lease": lh})
    assert st == 400 and b["error"]["code"] == "invalid_json", b
    st, b, _ = s.request("POST", path,
                         '[{"training_iteration": 1, "loss": 1},'
                         ' {"training_iteration": 2, "loss": 1, "loss": 2}]',
                         headers={"Content-Type": "application/json", "X-Ctune-Lease": lh})
    assert st == 400 and b["error"]["path"] == "[1].loss", b
    tr = s.ok("GET", "/api/v1/trials/%d" % t["id"])
    assert tr["iteration"] in (0, None) and not tr["last_result"], tr
    res = s.ok("GET", "/api/v1/experiments/1/results")
    assert res["results"] == [], res
    s.stop()


CSP_NEEDS = ["default-src 'self'", "script-src 'self'", "frame-ancestors 'none'",
             "object-src 'none'"]


def check_security_headers(h, what):
    csp = h.get("content-security-policy", "")
    for need in CSP_NEEDS:
        assert need in csp, (what, need, csp)
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp, (what, csp)
    assert h.get("x-frame-options") == "DENY", (what, h)
    assert h.get("x-content-type-options") == "nosniff", (what, h)
    assert h.get("referrer-policy") == "no-referrer", (what, h)


def test_security_headers_on_dashboard_and_api():
    vendor = tmpdir()
    os.makedirs(os.path.join(vendor, "chart.js"))
    os.makedirs(os.path.join(vendor, "jquery"))
    for f in ["chart.js/chart.min.js", "chart.js/chart.umd.js", "chart.js/chart.esm.js",
              "chart.js/Chart.js", "jquery/jquery.js"]:
        with open(os.path.join(vendor, f), "w") as fh:
            fh.write("/* %s */" % f)
    s = Server(args=["--web-dir", WEB, "--vendor-dir", vendor])
    st, body, h = s.get("/", raw=True)
    assert st == 200 and h["content-type"].startswith("text/html"), (st, h)
    check_security_headers(h, "/")
    st, _, h304 = s.get("/", raw=True, headers={"If-None-Match": h["etag"]})
    assert st == 304
    check_security_headers(h304, "/ (304)")  # a revalidated page keeps its policy
    st, _, h = s.get("/js/app.js", raw=True)
    assert st == 200 and h["content-type"].startswith("text/javascript")
    check_security_headers(h, "/js/app.js")
    st, _, h = s.get("/css/style.css", raw=True)
    assert st == 200 and h["content-type"].startswith("text/css")
    check_security_headers(h, "/css/style.css")
    st, _, h = s.get("/api/v1/experiments", raw=True)
    assert st == 200 and h.get("x-content-type-options") == "nosniff", h
    st, _, h = s.get("/api/v1/nothing", raw=True)
    assert st == 404 and h.get("x-content-type-options") == "nosniff", h
    # /vendor/: what charts.js loads, nothing else of the system folder.
    for ok in ["/vendor/chart.js/chart.min.js", "/vendor/chart.js/chart.umd.js"]:
        st, body, h = s.get(ok, raw=True)
        assert st == 200 and body.startswith(b"/* chart.js/"), (ok, st)
        check_security_headers(h, ok)
    for no in ["/vendor/jquery/jquery.js", "/vendor/chart.js/chart.esm.js",
               "/vendor/chart.js/Chart.js", "/vendor/chart.js/", "/vendor/chart.js",
               "/vendor/chart.js/chart.min.js/", "/vendor/chart.js//chart.min.js",
               "/vendor/chart.js/./chart.min.js", "/vendor/x/../chart.js/chart.min.js"]:
        st, _, _ = s.get(no, raw=True)
        assert st in (400, 404), (no, st)
    s.stop()


def test_dashboard_files_need_nothing_the_csp_forbids():
    """No inline script or style, no event-handler attribute, no eval: the
    CSP above would block them and the page would silently break."""
    html = open(os.path.join(WEB, "index.html"), encoding="utf-8").read()
    for m in re.finditer(r"<script\b([^>]*)>(.*?)</script>", html, re.S | re.I):
        assert "src=" in m.group(1) and not m.group(2).strip(), m.group(0)
    assert not re.search(r"<style\b", html, re.I)
    assert not re.search(r"\sstyle\s*=", html, re.I)
    assert not re.search(r"\son[a-z]+\s*=", html, re.I)
    assert not re.search(r"(href|src)\s*=\s*[\"']?javascript:", html, re.I)
    for root, _, files in os.walk(os.path.join(WEB, "js")):
        for f in files:
            src = open(os.path.join(root, f), encoding="utf-8").read()
            for bad in [r"\beval\(", r"new Function\(", r"\.innerHTML\s*=",
                        r"setAttribute\(\s*['\"](style|on[a-z]+)['\"]",
                        r"document\.write\("]:
                assert not re.search(bad, src), (f, bad)


if __name__ == "__main__":
    r = Runner()
    for name, fn in list(globals().items()):
        if name.startswith("test_"):
            r.run(fn)
    r.done()
