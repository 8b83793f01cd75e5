#!/usr/bin/env python3
"""The HTTP layer's limits against the real daemon:
- a held reply (waiting for its commit) whose client hung up is not counted
  as held for ever: SIGTERM then exits 0 at once;
- a checkpoint upload the server cannot spool is a 503 that says why (the
  errno's text), whether creating or writing the spool file failed;
"""
import errno
import json
import os
import signal
import socket
import time
import zlib

from ctune_e2e import Server, Runner, experiment, register, lease, report
from ctune_harness import wait_for


def raw_request(s, method, path, body=b"", token=None, headers=()):
    tok = s.token if token is None else token
    head = "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % (method, path, s.port)
    if tok:
        head += "Authorization: Bearer %s\r\n" % tok
    for h in headers:
        head += h + "\r\n"
    if body or method in ("POST", "PUT", "PATCH"):
        head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    return head.encode() + b"\r\n" + body


def test_held_replies_of_clients_gone_do_not_block_the_stop():
    s = Server()
    n = 8
    s.proc.send_signal(signal.SIGSTOP)
    try:
        # Written to a stopped server (the kernel takes them), then the
        # clients hang up before any reply, as a worker's timeout does.
        for i in range(n):
            c = socket.create_connection((s.host, s.port), timeout=5)
            c.sendall(raw_request(s, "POST", "/api/v1/experiments",
                                  json.dumps(experiment(name="held%d" % i, n=1)).encode()))
            c.close()
    finally:
        s.proc.send_signal(signal.SIGCONT)
    wait_for("the %d writes to be stored" % n,
             lambda: len(s.ok("GET", "/api/v1/experiments")["experiments"]) == n, 10)
    t0 = time.time()
    s.proc.send_signal(signal.SIGTERM)
    rc = s.proc.wait(timeout=15)
    took = time.time() - t0
    assert rc == 0 and took < 3, (rc, took, s.stderr()[-2000:])
    assert "still held" not in s.stderr(), s.stderr()[-2000:]
    s.kill()


def test_spool_failures_name_their_cause():
    for fault, code, text in (("open=%d" % errno.EACCES, "spool_unavailable", "Permission denied"),
                              ("write=%d" % errno.ENOSPC, "spool_error", "No space left on device")):
        s = Server(env={"CTUNE_TEST_SPOOL_FAULT": fault})
        s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)
        t = lease(s, register(s))
        report(s, t["id"], training_iteration=1, loss=1.0)
        data = os.urandom(5000)
        h = {"X-Ctune-Iteration": "1", "X-Ctune-Crc32": "%08x" % zlib.crc32(data),
             "Content-Type": "application/octet-stream"}
        st, b, hd = s.request("PUT", "/api/v1/trials/%d/checkpoint" % t["id"], data, headers=h)
        assert st == 503 and b["error"]["code"] == code, (fault, st, b)
        msg = b["error"]["message"]
        assert text in msg and s.dir in msg and "nothing was stored" in msg, (fault, msg)
        assert hd.get("retry-after") == "5", hd
        assert s.request("GET", "/api/v1/trials/%d/checkpoint" % t["id"])[0] == 404
        s.stop()


if __name__ == "__main__":
    r = Runner()
    for name, fn in list(globals().items()):
        if name.startswith("test_"):
            r.run(fn)
    r.done()
