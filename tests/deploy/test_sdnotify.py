#!/usr/bin/env python3
"""Readiness for systemd's Type=notify (common/sdnotify.c): with NOTIFY_SOCKET
set, ctune-server sends READY=1 once it listens and ctune-worker once it has
registered (not before: a worker whose server is not up stays silent), and
each sends STOPPING=1 on SIGTERM. The server is given a socket path, the
worker an abstract name ("@..."), the two forms systemd uses.
usage: test_sdnotify.py BIN_DIR"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

BIN = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CTUNE_BIN_DIR", "")


def recv(sock, timeout):
    sock.settimeout(timeout)
    try:
        return sock.recv(4096).decode()
    except socket.timeout:
        return None


def main():
    tmp = tempfile.mkdtemp(prefix="ctune-sdnotify-")
    procs = []
    try:
        srv_sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        srv_path = os.path.join(tmp, "notify")
        srv_sock.bind(srv_path)
        wrk_sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        wrk_name = "ctune-sdnotify-%d" % os.getpid()
        wrk_sock.bind("\0" + wrk_name)

        # A worker pointed at a port nobody listens on: it keeps retrying
        # to register and must not say READY=1 meanwhile.
        idle = socket.socket()
        idle.bind(("127.0.0.1", 0))
        dead_port = idle.getsockname()[1]
        idle.close()
        env = dict(os.environ, NOTIFY_SOCKET="@" + wrk_name)
        early_log = open(os.path.join(tmp, "early.log"), "w")
        early = subprocess.Popen(
            [os.path.join(BIN, "ctune-worker"), "--server", "http://127.0.0.1:%d" % dead_port,
             "--name", "early", "--work-dir", os.path.join(tmp, "work-early"), "--no-cgroup",
             "--poll-ms", "200", "--stop-grace-s", "1"],
            stdout=early_log, stderr=subprocess.STDOUT, env=env)
        procs.append(early)

        env = dict(os.environ, NOTIFY_SOCKET=srv_path)
        server = subprocess.Popen(
            [os.path.join(BIN, "ctune-server"), "--db", os.path.join(tmp, "ctune.db"),
             "--port", "0", "--no-auth"],
            stdout=subprocess.PIPE, stderr=open(os.path.join(tmp, "server.log"), "w"),
            text=True, env=env)
        procs.append(server)
        line = server.stdout.readline()
        m = re.search(r"listening on (http://\S+:(\d+))", line)
        assert m, "no listening line: %r" % line
        url, port = m.group(1), int(m.group(2))
        msg = recv(srv_sock, 10)
        assert msg == "READY=1", "server sent %r, not READY=1" % msg
        # READY=1 means it accepts connections now.
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        print("server: READY=1 after 'listening on %s'" % url)

        msg = recv(wrk_sock, 1.5)
        assert msg is None, "a worker that never registered sent %r" % msg
        print("worker without a server: no READY=1 in 1.5 s (it has not registered)")
        early.send_signal(signal.SIGTERM)
        msg = recv(wrk_sock, 10)
        assert msg == "STOPPING=1", "the unregistered worker sent %r on SIGTERM" % msg
        early.wait(15)

        env = dict(os.environ, NOTIFY_SOCKET="@" + wrk_name)
        wlog_path = os.path.join(tmp, "worker.log")
        worker = subprocess.Popen(
            [os.path.join(BIN, "ctune-worker"), "--server", url, "--name", "w1",
             "--work-dir", os.path.join(tmp, "work-w1"), "--no-cgroup", "--poll-ms", "200",
             "--stop-grace-s", "1"],
            stdout=open(wlog_path, "w"), stderr=subprocess.STDOUT, env=env)
        procs.append(worker)
        msg = recv(wrk_sock, 15)
        assert msg == "READY=1", "worker sent %r, not READY=1" % msg
        log = open(wlog_path).read()
        assert "registered with" in log, "READY=1 came before registration:\n" + log
        print("worker: READY=1 after registering")

        worker.send_signal(signal.SIGTERM)
        msg = recv(wrk_sock, 10)
        assert msg == "STOPPING=1", "worker sent %r on SIGTERM" % msg
        assert worker.wait(20) == 0, open(wlog_path).read()
        print("worker: STOPPING=1 on SIGTERM, exit 0")

        server.send_signal(signal.SIGTERM)
        msg = recv(srv_sock, 10)
        assert msg == "STOPPING=1", "server sent %r on SIGTERM" % msg
        assert server.wait(20) == 0
        print("server: STOPPING=1 on SIGTERM, exit 0")

        # A NOTIFY_SOCKET that is neither a path nor an abstract name: the
        # server says so and runs anyway.
        env = dict(os.environ, NOTIFY_SOCKET="relative/notify")
        slog = os.path.join(tmp, "server2.log")
        server = subprocess.Popen(
            [os.path.join(BIN, "ctune-server"), "--db", os.path.join(tmp, "c2.db"),
             "--port", "0", "--no-auth"],
            stdout=subprocess.PIPE, stderr=open(slog, "w"), text=True, env=env)
        procs.append(server)
        assert "listening on" in server.stdout.readline()
        deadline = time.time() + 5
        while "NOTIFY_SOCKET" not in open(slog).read() and time.time() < deadline:
            time.sleep(0.05)
        assert "cannot tell READY=1 to NOTIFY_SOCKET relative/notify" in open(slog).read(), \
            open(slog).read()
        server.send_signal(signal.SIGTERM)
        assert server.wait(20) == 0
        print("server with a bad NOTIFY_SOCKET: warned, served, exit 0")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")


if __name__ == "__main__":
    main()
