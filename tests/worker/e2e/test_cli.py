#!/usr/bin/env python3
"""ctune-worker's command line: bad input exits 2 with a message naming the
flag and the value, and creates nothing; --help and --version work; the
--exec-trial stage refuses a bad cpu list and an unknown program clearly;
SIGTERM while a request hangs ends the worker at once, cleanly."""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

SKIP = 77


def run(exe, *args, cwd=None):
    p = subprocess.run([exe] + list(args), capture_output=True, text=True, timeout=10, cwd=cwd)
    return p.returncode, p.stdout + p.stderr


def main():
    bin_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CTUNE_BIN_DIR", "")
    exe = os.path.abspath(os.path.join(bin_dir, "ctune-worker"))
    if not os.access(exe, os.X_OK):
        print("SKIP: no ctune-worker in %r" % bin_dir)
        return SKIP
    with tempfile.TemporaryDirectory(prefix="ctune-worker-cli-") as tmp:
        cases = [
            ((), "--server URL is required"),
            (("--server", "localhost:1"), "--server URL is required"),
            (("--server", "http://x", "--cpus", "0-99999"), "--cpus '0-99999'"),
            (("--server", "http://x", "--cpus", "64"), "--cpus 64: only"),
            (("--server", "http://x", "--cpus", "abc"), "--cpus: 'abc' is not an integer"),
            (("--server", "http://x", "--memory-mb", "-5"), "--memory-mb: '-5'"),
            (("--server", "http://x", "--poll-ms", "0"), "--poll-ms: '0'"),
            (("--server", "http://x", "--bogus"), "unknown or incomplete option '--bogus'"),
            (("--server", "http://x", "--token-file", "/nonexistent/t"),
             "--token-file /nonexistent/t: No such file"),
            (("--server", "http://x", "extra"), "unexpected argument 'extra'"),
        ]
        for args, want in cases:
            rc, out = run(exe, *args, "--work-dir", os.path.join(tmp, "w"), cwd=tmp)
            print("%-50s -> %d %s" % (" ".join(args), rc, out.strip().splitlines()[0]))
            assert rc == 2, (args, rc, out)
            assert want in out, (args, out)
        assert os.listdir(tmp) == [], "a rejected command line created %r" % os.listdir(tmp)
        rc, out = run(exe, "--help")
        assert rc == 0 and "--server URL" in out, out
        rc, out = run(exe, "--version")
        assert rc == 0 and out.startswith("ctune-worker "), out
        rc, out = run(exe, "--exec-trial", "--cpus", "9999", "--", "true")
        assert rc == 127 and "bad cpu list" in out, out
        rc, out = run(exe, "--exec-trial", "--", "/nonexistent/prog")
        assert rc == 127 and "cannot run '/nonexistent/prog'" in out, out
        rc, out = run(exe, "--exec-trial", "--cpus", "0", "--", "sh", "-c",
                      "grep Cpus_allowed_list /proc/self/status")
        assert rc == 0 and out.split()[-1] == "0", out
        # SIGTERM while a request hangs (a server that accepts and never
        # answers): the worker cancels it and exits 0 promptly (it awaits a
        # registration reply 0.5 s, to deregister), without leaks.
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        url = "http://127.0.0.1:%d" % srv.getsockname()[1]
        w = subprocess.Popen([exe, "--server", url, "--work-dir", os.path.join(tmp, "hang")],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        conn, _ = srv.accept()  # the registration request, never answered
        time.sleep(0.3)
        t0 = time.time()
        w.send_signal(signal.SIGTERM)
        out = w.communicate(timeout=10)[0]
        print("hung server: exit %d %.2f s after SIGTERM" % (w.returncode, time.time() - t0))
        assert w.returncode == 0 and time.time() - t0 < 3, out
        for bad in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
            assert bad not in out, out
        conn.close()
        srv.close()
    print("PASS")
    return 0


sys.exit(main())
