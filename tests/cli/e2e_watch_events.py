#!/usr/bin/env python3
"""`ctune watch` follows GET /api/v1/events: against the real
ctune-server, a watch of a quiet RUNNING experiment asks the server far less
than the old once-a-second polling (CTUNE_WATCH_NO_EVENTS=1), a change still
shows within a second or two, and both modes print the same lines for the
same changes. Usage: e2e_watch_events.py BIN_DIR."""
import concurrent.futures
import os
import re
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server", "e2e"))
from ctune_e2e import BIN_DIR, Runner, Server, experiment, lease, register, report  # noqa: E402

if not all(os.path.exists(os.path.join(BIN_DIR, b)) for b in ("ctune", "ctune-server")):
    print("SKIP: ctune and ctune-server are needed in %r" % BIN_DIR)
    sys.exit(77)


def requests_served(s):
    b = s.ok("GET", "/metrics")
    text = b.decode() if isinstance(b, bytes) else str(b)
    return int(re.search(r"^ctune_http_request_duration_seconds_count (\d+)", text, re.M).group(1))


class Watch:
    def __init__(self, s, eid, polling, **extra_env):
        env = dict(os.environ, CTUNE_SERVER="http://%s:%d" % (s.host, s.port), CTUNE_TOKEN=s.token,
                   **extra_env)
        if polling:
            env["CTUNE_WATCH_NO_EVENTS"] = "1"
        self.p = subprocess.Popen([os.path.join(BIN_DIR, "ctune"), "watch", str(eid), "--interval",
                                   "60", "--width", "160"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=env, text=True)
        self.lines = []
        self.t = threading.Thread(target=self.read, daemon=True)
        self.t.start()

    def read(self):
        for line in self.p.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern, timeout):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if any(re.search(pattern, x) for x in self.lines):
                return time.time() - t0
            time.sleep(0.05)
        raise AssertionError("watch did not print %r in %gs: %r" % (pattern, timeout, self.lines[-5:]))

    def stop(self):
        self.p.terminate()
        self.p.wait(timeout=10)
        self.t.join(timeout=5)
        return [x for x in self.lines if x.startswith("Trial ")]


def run(polling):
    s = Server(args=["--durability", "normal"])
    eid = s.ok("POST", "/api/v1/experiments", experiment(n=2), status=201)["id"]
    w = Watch(s, eid, polling)
    w.wait_for(r"^== Status ==", 5)
    time.sleep(1.5)  # the stream opens, the watch settles
    if not polling:
        # Settled when half a second passes with no request but our own
        # /metrics read (a slow machine may take longer than 1.5 s).
        deadline, prev = time.time() + 5, requests_served(s)
        while time.time() < deadline:
            time.sleep(0.5)
            cur = requests_served(s)
            if cur - prev <= 1:
                break
            prev = cur
    before = requests_served(s)
    time.sleep(4)
    quiet = requests_served(s) - before - 1  # not counting the /metrics read itself
    wid = register(s)
    t = lease(s, wid)
    took = w.wait_for(r"^Trial .* started", 4)
    report(s, t["id"], training_iteration=1, loss=0.25)
    s.ok("POST", "/api/v1/trials/%d/complete" % t["id"], {})
    w.wait_for(r"^Trial .* completed|^Trial .* TERMINATED|^Trial .* finished", 4)
    lines = w.stop()
    s.kill()
    return quiet, took, lines


def test_watch_follows_events():
    # The two modes at once, each against a server of its own (the counts
    # are per server): the wall time of one, mostly waiting.
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        ev, poll = ex.submit(run, False), ex.submit(run, True)
        quiet_ev, took_ev, lines_ev = ev.result()
        quiet_poll, took_poll, lines_poll = poll.result()
    print("requests in 4 s of quiet: events %d, polling %d; a lease shown after %.2fs / %.2fs"
          % (quiet_ev, quiet_poll, took_ev, took_poll))
    assert quiet_poll >= 4, quiet_poll  # 3 GETs a second today (12); fewer when loaded
    assert quiet_ev <= 1, quiet_ev
    assert took_ev < 2.5, took_ev
    assert lines_ev == lines_poll, (lines_ev, lines_poll)


def test_watch_ends_with_the_experiment():
    # The pause between looks made 30 s (a test hook): the experiment's end,
    # told by the stream, ends the watch at once all the same (`ctune run`
    # exits milliseconds after its experiment, not at the next look).
    s = Server(args=["--durability", "normal"])
    eid = s.ok("POST", "/api/v1/experiments", experiment(n=2), status=201)["id"]
    w = Watch(s, eid, False, CTUNE_TEST_WATCH_PAUSE_S="30")
    w.wait_for(r"^== Status ==", 5)
    # Whether the stream is open yet or not: it looks again when it opens.
    t0 = time.time()
    s.ok("POST", "/api/v1/experiments/%d/cancel" % eid, {})
    w.p.wait(timeout=20)
    took = time.time() - t0
    w.t.join(timeout=5)
    s.kill()
    print("watch exited %.2fs after the experiment ended (pause 30 s)" % took)
    assert took < 5, took
    assert any("CANCELLED" in x for x in w.lines), w.lines[-5:]


if __name__ == "__main__":
    r = Runner()
    r.run(test_watch_follows_events)
    r.run(test_watch_ends_with_the_experiment)
    r.done()
