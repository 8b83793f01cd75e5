"""Shared pieces of the dashboard's browser tests: a real ctune-server on a free
port, a small JSON client for its REST API, and headless chromium via Selenium.

Everything started here is stopped by Harness.close(), which the tests call in
a finally block, so a failing test leaves no process or temp dir behind.
"""
import argparse
import concurrent.futures
import json
import re
import os
import shutil
import signal
import sys
import tempfile

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import ctune_harness  # noqa: E402
from ctune_harness import read_tokens  # noqa: E402,F401  (test_dashboard_control imports it from here)
CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-dev-shm-usage"]


def parse_args(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default=os.environ.get("CTUNE_BIN_DIR"))
    ap.add_argument("--web-dir", default=os.path.join(HERE, "..", "..", "web"))
    ap.add_argument("--artifacts", default=os.path.join(os.getcwd(), "tests", "artifacts"))
    ap.add_argument("--fake", action="store_true",
                    help="develop against tests/web/fake_server.py instead of ctune-server")
    return ap.parse_args(argv)


def skip(why):
    print("SKIP: " + why, flush=True)
    sys.exit(SKIP)


TRIAL_WRITE = re.compile(r"^/api/v1/trials/(\d+)/(results|complete|fail|release|checkpoint|logs)$")
LEASE_PATH = re.compile(r"^/api/v1/workers/(\d+)/lease$")


# port -> the admin token of the server started there (read from its
# <db>.tokens): a Client without a token of its own uses it.
ADMIN_TOKENS = {}


class Client:
    """Keep-alive JSON client; raises on statuses other than the expected ones."""

    def __init__(self, port, token=None):
        self.port = port
        self.token = token if token is not None else ADMIN_TOKENS.get(port)
        self.conn = ctune_harness.JsonClient("127.0.0.1", port, token=self.token, timeout=30)
        # Plays a worker too: the fence of each trial it leased, sent with
        # every trial-scoped write as protocol v2 requires
        # (docs/protocol.md#leases-and-fencing).
        self.leases = {}

    def fence(self, trial_id):
        return self.leases[trial_id]

    def call(self, method, path, body=None, expect=(200, 201, 204), raw=None, ctype=None):
        headers = {}
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        elif raw is not None:
            headers["Content-Type"] = ctype or "text/plain"
        m = TRIAL_WRITE.match(path)
        if m and method in ("POST", "PUT") and int(m.group(1)) in self.leases:
            headers["X-Ctune-Lease"] = "%d:%d" % self.leases[int(m.group(1))]
        # The server may close an idle keep-alive connection: the client
        # reconnects once.
        status, text, _ = self.conn.request(method, path, data, headers=headers, token=self.token or "")
        if status not in expect:
            raise AssertionError("%s %s -> %d %s" % (method, path, status, text[:500]))
        if not text:
            return status, None
        try:
            out = json.loads(text)
        except ValueError:
            return status, text
        m = LEASE_PATH.match(path)
        if m and status == 200 and isinstance(out, dict) and "trial" in out:
            self.leases[out["trial"]["id"]] = (int(m.group(1)), out["trial"]["attempt"])
        return status, out

    def running(self, *trial_ids):
        """The heartbeat v2 list for these leased trials."""
        return [{"id": t, "attempt": self.leases[t][1]} for t in trial_ids]

    def get(self, path):
        return self.call("GET", "/api/v1" + path)[1]

    def post(self, path, body=None, expect=(200, 201, 204)):
        return self.call("POST", "/api/v1" + path, body if body is not None else {}, expect=expect)[1]

    def close(self):
        self.conn.close()


def fresh(fn, tries=5):
    """fn() again when the page redrew an element between finding it and
    reading it (StaleElementReferenceException): a live page redraws at its
    updates, which a loaded machine can land between two WebDriver calls."""
    from selenium.common.exceptions import StaleElementReferenceException
    for i in range(tries):
        try:
            return fn()
        except StaleElementReferenceException:
            if i == tries - 1:
                raise


class Harness:
    def __init__(self, args, name):
        self.args = args
        self.name = name
        self.tmp = tempfile.mkdtemp(prefix="ctune-web-%s-" % name)
        self.procs = []
        self.drivers = []
        self.login_urls = {}  # port -> the login URL (?token=) it wrote
        self.artifacts = args.artifacts
        os.makedirs(self.artifacts, exist_ok=True)
        # ctest's timeout sends SIGTERM: unwind through close() all the same.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        if args.fake:
            self.server_cmd = [sys.executable, os.path.join(HERE, "fake_server.py")]
        else:
            exe = os.path.join(args.bin_dir or "", "ctune-server")
            if not args.bin_dir or not os.access(exe, os.X_OK):
                skip("no ctune-server in %s (build the ctune-server target first)" % args.bin_dir)
            self.server_cmd = [exe]
        for tool in ("/usr/bin/chromium", "/usr/bin/chromedriver"):
            if not os.access(tool, os.X_OK):
                skip(tool + " is not installed (scripts/install-deps --test installs it)")
        try:
            import selenium  # noqa: F401
        except ImportError:
            skip("python3-selenium is missing for " + sys.executable)

    def start_server(self, db=None, vendor_dir=None, extra=()):
        """Starts a server on a free port; returns (process, port)."""
        db = db or os.path.join(self.tmp, "ctune.db")
        args = ["--web-dir", os.path.abspath(self.args.web_dir)]
        if vendor_dir:
            args += ["--vendor-dir", vendor_dir]
        args += list(extra)
        srv = ctune_harness.start_server(
            cmd=self.server_cmd, db=None if self.args.fake else db, args=args,
            log_path=os.path.join(self.tmp, "server-%d.log" % len(self.procs)), text=True,
            wait=False, name="the fake server" if self.args.fake else "ctune-server")
        self.procs.append(srv.p)
        srv.await_listening()
        port = srv.port
        # Tokens by default: the next line is the login URL.
        if not self.args.fake and "--no-auth" not in extra:
            nxt = srv.readline()
            if nxt.startswith("dashboard: "):
                # Not a terminal: the address, and the 0600 file that holds
                # the login URL (the token stays out of logs and pipes).
                m = re.search(r"\(log in with the URL in (.+)\)$", nxt.strip())
                self.login_urls[port] = (open(m.group(1)).read() if m else
                                         nxt[len("dashboard: "):]).strip()
            ADMIN_TOKENS[port] = read_tokens(srv.token_file).get("admin")
        return srv.p, port

    def stop_server(self, p):
        ctune_harness.stop_popen(p, timeout=10)
        if p.stdout:
            p.stdout.close()

    def _chrome(self, width, height):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        opts = webdriver.ChromeOptions()
        opts.binary_location = "/usr/bin/chromium"
        profile = tempfile.mkdtemp(prefix="profile-", dir=self.tmp)
        for f in CHROME_FLAGS + ["--user-data-dir=" + profile, "--window-size=%d,%d" % (width, height)]:
            opts.add_argument(f)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        d = webdriver.Chrome(options=opts, service=Service("/usr/bin/chromedriver"))
        d.set_script_timeout(30)
        return d

    def browser_soon(self, width=1400, height=1000):
        """Starts a browser in the background (seconds of work that the
        servers' start or a fixture can overlap); the next browser() call
        returns it, logged in to the servers started by then."""
        self._starting = concurrent.futures.ThreadPoolExecutor(1)
        self._soon = self._starting.submit(self._chrome, width, height)

    def browser(self, width=1400, height=1000):
        soon = getattr(self, "_soon", None)
        if soon is None:
            return self.adopt(self._chrome(width, height))
        self._soon = None
        self._starting.shutdown()
        return self.adopt(soon.result())

    def adopt(self, d):
        """Makes a browser this harness's (close() quits it), logged in to
        every server this harness started. (A test file can share one
        browser between two harnesses, a start costing seconds: the first
        drops it from its `drivers`, the second appends it.)"""
        self.drivers.append(d)
        return self.login_all(d)

    def login_all(self, d):
        """Logs in as a person does: opens the URL each running server
        printed (it sets the session cookie and redirects to the dashboard)."""
        from selenium.common.exceptions import WebDriverException
        for port, url in self.login_urls.items():
            try:
                d.get(url)
            except WebDriverException:
                pass  # that server was stopped
        return d

    def login(self, d, port):
        d.get(self.login_urls[port])

    def wait(self, what, fn, timeout=10.0, poll=0.05):
        """Polls fn until it returns something truthy; fails naming `what`.
        An exception counts as "not yet": the DOM may be mid-update."""
        return ctune_harness.wait_for(what, fn, timeout, step=poll, ignore=(Exception,))

    def wait_ready(self, d, page, timeout=15.0):
        return self.wait("the %s page to render" % page, lambda: d.execute_script(
            "return window.__ctune && window.__ctune.page === arguments[0] && window.__ctune.readyAt",
            page), timeout)

    def screenshot(self, d, name, full=True):
        """Saves the whole page (the window grown to the document's height)."""
        w = d.execute_script("return window.innerWidth")
        if full:
            hgt = d.execute_script("return Math.ceil(document.documentElement.scrollHeight)")
            d.set_window_size(w, min(max(hgt, 600), 6000))
            d.execute_script("window.scrollTo(0, 0)")
            # Two frames: the resize's layout, then the charts' redraw (they
            # follow their size in an animation frame).
            d.execute_async_script("const done = arguments[arguments.length - 1];"
                                   "requestAnimationFrame(() => requestAnimationFrame(() => done()));")
        path = os.path.join(self.artifacts, name)
        d.save_screenshot(path)
        print("screenshot: " + path, flush=True)

    def browser_errors(self, d):
        """Console errors other than the expected 404 of a missing vendor file."""
        out = []
        for entry in d.get_log("browser"):
            if entry.get("level") == "SEVERE" and "/vendor/" not in entry.get("message", ""):
                out.append(entry["message"])
        return out

    def close(self):
        if getattr(self, "_soon", None) is not None:  # started, never taken
            try:
                self.drivers.append(self._soon.result())
            except Exception:
                pass
            self._starting.shutdown()
        for d in self.drivers:
            try:
                d.quit()
            except Exception:
                pass
        # The last started first: a worker stops while its server still
        # answers (against a server already gone, it retries its last
        # messages until its drain deadline).
        for p in reversed(self.procs):
            try:
                self.stop_server(p)
            except Exception:
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)
