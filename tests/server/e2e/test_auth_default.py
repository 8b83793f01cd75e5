#!/usr/bin/env python3
"""Secure by default: a server started without --token-file makes
<db>.tokens (0600) and answers 401 to every API route without a token; a token
file others may read is refused; --no-auth only on loopback; the Host, Origin
and Content-Type checks against cross-site requests and DNS rebinding; the
dashboard login by URL (cookie, redirect, login page)."""
import os
import re
import stat
import time

from ctune_e2e import Server, Runner, experiment, tmpdir
import ctune_e2e


def api_routes():
    """Every non-public route of the routing table, ids filled in."""
    src = open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "server", "api",
                            "routes.c")).read()
    out = [(m, p.replace("{id}", "1")) for m, p, acc in
           re.findall(r'\{RM_([A-Z]+), "([^"]+)", (RA_[A-Z]+)', src) if acc != "RA_PUBLIC"]
    assert len(out) >= 20, out
    return out


def test_fresh_server_401_everywhere_and_token_file_0600():
    s = Server()
    st = os.stat(s.db + ".tokens")
    assert stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)
    toks = s.tokens
    assert set(toks) == {"admin", "worker", "viewer"} and len(set(toks.values())) == 3
    for t in toks.values():
        assert len(t) == 43 and re.fullmatch(r"[A-Za-z0-9_-]+", t), t
    # stdout is a pipe here (a journal, a log file): the login URL is not
    # printed, only the dashboard's address and the 0600 file that holds it.
    line = s.proc.stdout.readline().decode()
    login = s.db + ".login-url"
    assert line == "dashboard: http://127.0.0.1:%d/ (log in with the URL in %s)\n" % (
        s.port, login), line
    assert stat.S_IMODE(os.stat(login).st_mode) == 0o600, oct(os.stat(login).st_mode)
    assert open(login).read() == "http://127.0.0.1:%d/?token=%s\n" % (s.port, toks["admin"])
    assert s.db + ".tokens" in s.stderr() and toks["admin"] not in s.stderr()
    for method, path in api_routes():
        body = {} if method in ("POST", "PUT") else None
        st_, b, h = s.request(method, path, body, token="")
        assert st_ == 401, (method, path, st_, b)
        assert b["error"]["code"] == "unauthorized"
    assert s.get("/healthz", token="")[0] == 200
    # restarted: the same tokens
    s.restart()
    assert s.tokens == toks
    assert s.ok("GET", "/api/v1/experiments")["experiments"] == []
    s.stop()


def test_token_file_readable_by_others_refused():
    s = Server()
    s.kill()
    os.chmod(s.db + ".tokens", 0o644)
    rc = s.start(expect_fail=True)
    s.kill()
    err = s.stderr()
    assert rc == 2 and "chmod 600" in err and s.db + ".tokens" in err, (rc, err)


def test_no_auth_only_on_loopback():
    s = Server(args=["--no-auth"])
    assert not os.path.exists(s.db + ".tokens")
    assert "NO AUTHENTICATION" in s.stderr()
    assert s.get("/api/v1/experiments")[0] == 200
    s.kill()
    s.args = ["--no-auth", "--bind", "0.0.0.0"]
    rc = s.start(expect_fail=True)
    s.kill()
    assert rc == 2 and "--no-auth" in s.stderr()
    # :memory: has no place for a token file
    import subprocess
    r = subprocess.run([os.path.join(ctune_e2e.BIN_DIR, "ctune-server"), "--db", ":memory:",
                        "--port", "0"], cwd=tmpdir(), capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "--token-file" in r.stderr, (r.returncode, r.stderr)


def test_cross_site_text_plain_post_refused_nothing_stored():
    # --no-auth: the checks hold even on an open server; with the admin
    # token too (a browser sending it is not the attack, but the type is).
    for args in (["--no-auth"], []):
        s = Server(args=args)
        body = '{"name":"csrf","num_samples":1,"trainable":{"type":"command","argv":["sh","-c","id"]}}'
        st, b, _ = s.request("POST", "/api/v1/experiments", body,
                             headers={"Content-Type": "text/plain;charset=UTF-8"})
        assert st == 415 and b["error"]["code"] == "unsupported_media_type", (st, b)
        st, b, _ = s.request("POST", "/api/v1/experiments", body,
                             headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert st == 415, (st, b)
        st, b, _ = s.request("POST", "/api/v1/experiments", body,
                             headers={"Content-Type": "application/json",
                                      "Origin": "https://evil.example"})
        assert st == 403 and b["error"]["code"] == "bad_origin", (st, b)
        st, b, _ = s.request("POST", "/api/v1/experiments", body,
                             headers={"Content-Type": "application/json",
                                      "Sec-Fetch-Site": "cross-site"})
        assert st == 403 and b["error"]["code"] == "bad_origin", (st, b)
        assert s.ok("GET", "/api/v1/experiments")["experiments"] == []
        # same origin passes; cancel from a foreign origin is refused
        st, b, _ = s.request("POST", "/api/v1/experiments", experiment(n=1),
                             headers={"Origin": "http://127.0.0.1:%d" % s.port})
        assert st == 201, (st, b)
        st, b, _ = s.request("POST", "/api/v1/experiments/1/cancel", None,
                             headers={"Origin": "http://evil.example"})
        assert st == 403, (st, b)
        assert s.ok("GET", "/api/v1/experiments/1")["status"] == "RUNNING"
        s.stop()


def test_foreign_host_refused():
    s = Server(args=["--allowed-host", "ctune.example"])
    for host in ("rebind.attacker.example:%d" % s.port, "evil.example", "localhost:1"):
        st, b, _ = s.request("GET", "/api/v1/experiments", headers={"Host": host})
        assert st == 421 and b["error"]["code"] == "bad_host", (host, st, b)
        st, b, _ = s.request("GET", "/", headers={"Host": host}, raw=True)
        assert st == 421, (host, st)
    for host in ("127.0.0.1:%d" % s.port, "localhost:%d" % s.port, "[::1]:%d" % s.port,
                 "ctune.example:%d" % s.port, "CTUNE.example"):
        assert s.request("GET", "/api/v1/experiments", headers={"Host": host})[0] == 200, host
    # A port forwarder (ssh -L 9000:..., docker -p) changes the port: an IP
    # literal is served on any port; a name's refusal names the flag that fixes it.
    assert s.request("GET", "/api/v1/experiments", headers={"Host": "127.0.0.1:1"})[0] == 200
    st, b, _ = s.request("GET", "/api/v1/experiments", headers={"Host": "localhost:1"})
    assert st == 421 and "--allowed-host localhost:1" in b["error"]["message"], (st, b)
    s.stop()
    s = Server(args=["--allowed-host", "localhost:1"])
    assert s.request("GET", "/api/v1/experiments", headers={"Host": "localhost:1"})[0] == 200
    assert s.request("GET", "/api/v1/experiments", headers={"Host": "localhost:2"})[0] == 421
    s.stop()


def test_login_flow():
    s = Server()
    admin = s.tokens["admin"]
    # no cookie, no token: the login page (no data), and the API says 401
    st, b, h = s.request("GET", "/", token="", raw=True)
    assert st == 401 and b"URL the server printed" in b and "set-cookie" not in h, (st, b[:200])
    st, b, h = s.request("GET", "/?token=wrong-token-0123456789", token="", raw=True)
    assert st == 401 and "set-cookie" not in h
    st, b, h = s.request("GET", "/?token=" + admin, token="", raw=True)
    assert st == 303 and h["location"] == "/", (st, h)
    cookie = h["set-cookie"]
    assert re.fullmatch(r"ctune_%d=[A-Za-z0-9_-]{43}; HttpOnly; SameSite=Strict; Path=/" % s.port,
                        cookie), cookie
    assert admin not in cookie and admin not in h["location"]
    jar = cookie.split(";")[0]
    st, b, _ = s.request("GET", "/", token="", headers={"Cookie": jar}, raw=True)
    assert st == 200 and b"URL the server printed" not in b
    assert s.request("GET", "/api/v1/experiments", token="", headers={"Cookie": jar})[0] == 200
    # a state change with the cookie needs the Origin (browsers send it)
    st, b, _ = s.request("POST", "/api/v1/experiments", experiment(n=1), token="",
                         headers={"Cookie": jar})
    assert st == 403 and b["error"]["code"] == "bad_origin", (st, b)
    st, b, _ = s.request("POST", "/api/v1/experiments", experiment(n=1), token="",
                         headers={"Cookie": jar, "Origin": "http://127.0.0.1:%d" % s.port})
    assert st == 201, (st, b)
    # a made-up cookie is nothing
    st, b, _ = s.request("GET", "/api/v1/experiments", token="",
                         headers={"Cookie": "ctune_%d=%s" % (s.port, "A" * 43)})
    assert st == 401
    # the viewer reads, and changes nothing
    v = s.tokens["viewer"]
    assert s.request("GET", "/api/v1/experiments", token=v)[0] == 200
    assert s.request("POST", "/api/v1/experiments/1/cancel", token=v)[0] == 403
    st, b, h = s.request("GET", "/?token=" + v, token="", raw=True)
    assert st == 303
    vjar = h["set-cookie"].split(";")[0]
    st, b, _ = s.request("POST", "/api/v1/experiments/1/cancel", None, token="",
                         headers={"Cookie": vjar, "Origin": "http://127.0.0.1:%d" % s.port})
    assert st == 403, (st, b)
    # sessions live in memory: a restart logs everyone out
    s.restart()
    assert s.request("GET", "/api/v1/experiments", token="", headers={"Cookie": jar})[0] == 401
    s.stop()


def test_login_url_on_a_terminal_only():
    """The admin token reaches stdout only when it is a terminal: on a pty
    the server prints the login URL itself; through a pipe (above) and in
    its log never."""
    import pty
    import select
    import subprocess
    d = tmpdir()
    db = os.path.join(d, "ctune.db")
    master, slave = pty.openpty()
    with open(os.path.join(d, "stderr.log"), "wb") as log:
        p = subprocess.Popen([os.path.join(ctune_e2e.BIN_DIR, "ctune-server"), "--db", db,
                              "--port", "0"], stdin=subprocess.DEVNULL, stdout=slave, stderr=log)
    os.close(slave)
    out, deadline = b"", time.time() + 30
    try:
        while b"dashboard: " not in out or not out.endswith(b"\n"):
            assert time.time() < deadline and p.poll() is None, out
            if select.select([master], [], [], 0.5)[0]:
                out += os.read(master, 4096)
    finally:
        p.terminate()
        p.wait(timeout=10)
        os.close(master)
    admin = ctune_e2e.read_tokens(db + ".tokens")["admin"]
    port = int(re.search(rb"listening on http://127.0.0.1:(\d+)", out).group(1))
    want = "dashboard: http://127.0.0.1:%d/?token=%s" % (port, admin)
    assert want in out.decode(), out
    assert p.returncode == 0, p.returncode
    assert admin not in open(os.path.join(d, "stderr.log")).read()


def test_listen_fd_serves_the_inherited_socket_bound_to_bind():
    """--listen-fd: the server serves on a listening socket its parent made
    (ctune run, to know the URL before the server is ready); one bound to
    another address than --bind, or an fd that is no listening socket, is
    refused by name."""
    import socket
    import subprocess
    import urllib.request
    exe = os.path.join(ctune_e2e.BIN_DIR, "ctune-server")
    d = tmpdir()

    def start(fd, **kw):
        return subprocess.Popen([exe, "--db", os.path.join(d, "l.db"), "--port", "0",
                                 "--listen-fd", str(fd)], pass_fds=(fd,), text=True,
                                stdin=subprocess.DEVNULL, **kw)

    other = socket.socket()
    other.bind(("127.0.0.2", 0))
    other.listen(1)
    rd, wr = os.pipe()
    for fd, want in ((other.fileno(), "the socket is not bound to --bind 127.0.0.1"),
                     (rd, "not a listening TCP socket")):
        p = start(fd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _, err = p.communicate(timeout=10)
        finally:  # a server that started anyway is not left behind
            if p.poll() is None:
                p.kill()
                p.wait()
        assert p.returncode != 0 and "--listen-fd %d: %s" % (fd, want) in err, (p.returncode, err)
    other.close()
    os.close(rd)
    os.close(wr)
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    port = ls.getsockname()[1]
    p = start(ls.fileno(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    ls.close()  # the server's now
    try:
        line = p.stdout.readline()
        assert line.strip() == "listening on http://127.0.0.1:%d" % port, line
        with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % port, timeout=10) as r:
            assert r.status == 200
    finally:
        p.terminate()
        p.wait(timeout=10)


if __name__ == "__main__":
    r = Runner()
    for name, fn in list(globals().items()):
        if name.startswith("test_"):
            r.run(fn)
    r.done()
