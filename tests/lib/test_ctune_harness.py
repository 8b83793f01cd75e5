"""The shared e2e harness (ctune_harness.py) on its own: stand-in programs
(small Python scripts) play the server, so this needs no build. Checks what
the suites rely on: the address is parsed from the "listening on" line and
nothing after it is taken from the pipe, a start that fails names the
command and the log file, stop() escalates to SIGKILL, wait_for names what it
waited for and the last value, read_tokens, the JSON client."""
import http.server
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ctune_harness as h  # noqa: E402

PY = sys.executable
TMP = tempfile.mkdtemp(prefix="ctune-harness-test-")


def script(name, body):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write("import os, signal, sys, time\n" + body)
    return path


def test_listening_and_next_line():
    s = script("srv.py", "print('starting', flush=True)\n"
                         "print('listening on http://127.0.0.1:4321', flush=True)\n"
                         "print('dashboard: http://127.0.0.1:4321/?token=abc', flush=True)\n"
                         "sys.stderr.write('args %s\\n' % sys.argv[1:]); sys.stderr.flush()\n"
                         "time.sleep(60)\n")
    db = os.path.join(TMP, "a.db")
    with open(db + ".tokens", "w") as f:
        f.write("# made by the server\nadmin=adm=1\nworker=wrk\n")
    srv = h.start_server(cmd=[PY, s], db=db, args=["--lease-timeout", "3"],
                         log_path=os.path.join(TMP, "srv.log"), text=True)
    try:
        assert (srv.scheme, srv.host, srv.port) == ("http", "127.0.0.1", 4321), srv.url
        assert srv.url == "http://127.0.0.1:4321"
        assert srv.token_file == db + ".tokens" and srv.admin_token == "adm=1", srv.tokens
        # The line after "listening on" is still in the pipe, for the caller.
        assert srv.p.stdout.readline() == "dashboard: http://127.0.0.1:4321/?token=abc\n"
        h.wait_for("the server's stderr", lambda: "args" in srv.log(), 10)
        assert "'--db', '%s', '--port', '0', '--lease-timeout', '3'" % db in srv.log(), srv.log()
        t0 = time.monotonic()
        assert srv.stop() == -signal.SIGTERM
        assert time.monotonic() - t0 < 5
    finally:
        srv.kill()


def test_ipv6_and_https():
    s = script("v6.py", "print('listening on https://[::1]:9', flush=True)\ntime.sleep(60)\n")
    srv = h.start_server(cmd=[PY, s], log_path=os.path.join(TMP, "v6.log"),
                         args=["--no-auth"])
    try:
        assert (srv.scheme, srv.host, srv.port) == ("https", "[::1]", 9)
        assert srv.token_file is None and srv.tokens == {}
    finally:
        srv.stop()


def test_exit_names_command_and_log():
    s = script("bad.py", "sys.stderr.write('cannot open the database\\n'); sys.exit(3)\n")
    log = os.path.join(TMP, "bad.log")
    try:
        h.start_server(cmd=[PY, s], log_path=log)
    except h.StartError as e:
        msg = str(e)
        assert e.exited == 3, e.exited
        assert "exited with status 3" in msg and s in msg and log in msg, msg
        assert "cannot open the database" in msg, msg
    else:
        raise AssertionError("no StartError")


def test_silence_times_out_and_kills():
    s = script("mute.py", "time.sleep(60)\n")
    t0 = time.monotonic()
    try:
        h.start_server(cmd=[PY, s], log_path=os.path.join(TMP, "mute.log"), timeout=1)
    except h.StartError as e:
        assert e.exited is None and "within 1 s" in str(e) and s in str(e), str(e)
    else:
        raise AssertionError("no StartError")
    assert time.monotonic() - t0 < 10


def test_output_to_a_file():
    s = script("file.py", "print('listening on http://127.0.0.1:77', flush=True)\ntime.sleep(60)\n")
    out = os.path.join(TMP, "file.out")
    srv = h.spawn([PY, s], os.path.join(TMP, "file.log"), "file server", output=out,
                  cls=h.Server)
    try:
        srv.await_listening(10)
        assert srv.port == 77
    finally:
        srv.stop()


def test_stop_escalates_to_sigkill():
    s = script("stubborn.py", "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                              "print('ready', flush=True)\ntime.sleep(60)\n")
    w = h.spawn([PY, s], os.path.join(TMP, "stubborn.log"), output="pipe")
    assert w.readline(10) == "ready\n"
    assert w.stop(timeout=0.5) == -signal.SIGKILL
    assert not w.alive()


def test_worker_output_in_its_log():
    s = script("worker.py", "print('worker argv', sys.argv[1:], flush=True)\n")
    bindir = os.path.join(TMP, "bin")
    os.makedirs(bindir, exist_ok=True)
    exe = os.path.join(bindir, "ctune-worker")
    shutil.copy(s, exe)
    with open(exe) as f:
        text = f.read()
    with open(exe, "w") as f:
        f.write("#!%s\n%s" % (PY, text))
    os.chmod(exe, 0o755)
    log = os.path.join(TMP, "worker.log")
    w = h.start_worker(bindir, "http://127.0.0.1:1", ["--name", "w1"], log_path=log)
    assert w.wait(10) == 0
    assert "worker argv ['--server', 'http://127.0.0.1:1', '--name', 'w1']" in w.log(), w.log()


def test_wait_for():
    n = [0]

    def count():
        n[0] += 1
        return n[0] >= 3 and n[0]
    assert h.wait_for("three calls", count, 5, step=0.01) == 3
    try:
        h.wait_for("the impossible", lambda: [], 0.2, step=0.05)
    except h.WaitTimeout as e:
        assert "the impossible" in str(e) and "last value: []" in str(e), str(e)
    else:
        raise AssertionError("no WaitTimeout")

    def flaky():
        raise IndexError("not yet")
    try:
        h.wait_for("a list", flaky, 0.2, step=0.05, ignore=(IndexError,))
    except h.WaitTimeout as e:
        assert "not yet" in str(e), str(e)
    try:
        h.wait_for("a list", flaky, 0.2, step=0.05)
    except IndexError:
        pass
    else:
        raise AssertionError("an exception not ignored must propagate")


def test_json_client():
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            seen.append((self.command, self.path, self.headers.get("Authorization"),
                         self.headers.get("Content-Type"), json.loads(body)))
            out = json.dumps({"ok": True}).encode()
            self.send_response(201)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.send_header("X-Ctune-Iteration", "4")
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *a):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    th = threading.Thread(target=httpd.serve_forever, daemon=True)
    th.start()
    try:
        for keep_alive in (True, False):
            c = h.JsonClient.for_url("http://127.0.0.1:%d" % httpd.server_address[1],
                                     token="tok", keep_alive=keep_alive)
            st, body, hdrs = c.request("POST", "/x", {"a": 1},
                                       headers={"Content-Type": "application/json"})
            assert st == 201 and json.loads(body) == {"ok": True}, (st, body)
            assert hdrs["x-ctune-iteration"] == "4", hdrs
            assert c.call("POST", "/y", [1], token="") == {"ok": True}
            assert (c.conn is None) != keep_alive
        assert seen[0] == ("POST", "/x", "Bearer tok", "application/json", {"a": 1}), seen
        assert seen[1][2] is None, seen  # token="": no Authorization
    finally:
        httpd.shutdown()


def test_read_tokens():
    p = os.path.join(TMP, "tokens")
    with open(p, "w") as f:
        f.write("# comment\n\nadmin=a-b=c\n  viewer=v  \nnonsense\n")
    assert h.read_tokens(p) == {"admin": "a-b=c", "viewer": "v"}


def main():
    failed = 0
    try:
        for name, fn in sorted(globals().items()):
            if name.startswith("test_") and callable(fn):
                t0 = time.monotonic()
                try:
                    fn()
                    print("ok   %-36s %.2fs" % (name, time.monotonic() - t0), flush=True)
                except Exception:
                    import traceback
                    failed += 1
                    print("FAIL %s" % name, flush=True)
                    traceback.print_exc()
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
