"""ctune over TLS, end to end: ctune-server --tls-cert/--tls-key with a
certificate this test makes (its own CA, the server's certificate for
127.0.0.1 and localhost), a real ctune-worker and the CLI against
https://127.0.0.1:PORT with --ca-file. Also: a worker or CLI without the CA
fails with a certificate error (no fallback to http), and the server names
the file when the certificate or key is wrong.

Usage: test_tls.py BIN_DIR (or CTUNE_BIN_DIR). Skips (77) without openssl."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
import ctune_harness  # noqa: E402
from ctune_harness import wait_for  # noqa: E402

BIN = os.environ.get("CTUNE_BIN_DIR") or (sys.argv[1] if len(sys.argv) > 1 else "")
OPENSSL = shutil.which("openssl")
TOKENS = {"admin": "tls-e2e-admin-token-0123456789abcdef",
          "worker": "tls-e2e-worker-token-0123456789abcdef"}

TRAINABLE = r"""
import json, os
cfg = json.loads(os.environ["CTUNE_CONFIG"])
for i in range(1, 4):
    print(json.dumps({"training_iteration": i, "loss": abs(cfg["x"] - 3) + 1.0 / i}), flush=True)
"""

procs = []


def run(cmd, timeout=60, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                          **kw)


def openssl(d, *args):
    r = run([OPENSSL] + list(args), cwd=d)
    assert r.returncode == 0, (args, r.stderr.decode(errors="replace"))


def make_certs(d):
    """A CA, and a server certificate it signs for IP:127.0.0.1 and localhost."""
    openssl(d, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=ctune e2e test CA", "-keyout", "ca.key", "-out", "ca.pem",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    openssl(d, "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
            "-keyout", "server.key", "-out", "server.csr")
    with open(os.path.join(d, "ext.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                "extendedKeyUsage=serverAuth\n")
    openssl(d, "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-out", "server.pem", "-extfile", "ext.cnf")
    # Another CA, which did not sign the server's certificate.
    openssl(d, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=some other CA", "-keyout", "other.key", "-out", "other.pem")
    os.chmod(os.path.join(d, "server.key"), 0o600)


def start_server(d, extra=()):
    tokens = os.path.join(d, "tokens")
    with open(tokens, "w") as f:
        f.write("admin=%s\nworker=%s\n" % (TOKENS["admin"], TOKENS["worker"]))
    os.chmod(tokens, 0o600)
    srv = ctune_harness.start_server(
        BIN, db=os.path.join(d, "t.db"),
        args=["--token-file", tokens, "--tls-cert", os.path.join(d, "server.pem"),
              "--tls-key", os.path.join(d, "server.key"), "--lease-timeout", "10"] + list(extra),
        log_path=os.path.join(d, "server.log"), wait=False)
    procs.append(srv.p)
    # Other lines (a dashboard URL) may come first; the listening line names the scheme.
    srv.await_listening()
    assert srv.scheme == "https", srv.url
    return srv.p, srv.port, tokens


def start_worker(d, url, tokens, name, ca=None):
    args = ["--token-file", tokens, "--cpus", "2", "--memory-mb", "1024",
            "--work-dir", os.path.join(d, name), "--poll-ms", "100", "--no-cgroup", "--name", name]
    if ca:
        args += ["--ca-file", ca]
    log = os.path.join(d, name + ".log")
    w = ctune_harness.start_worker(BIN, url, args, log_path=log, output="null")
    procs.append(w.p)
    return w.p, log


def stop(p):
    ctune_harness.stop_popen(p, timeout=20)


def cli(*args, timeout=60):
    r = run([os.path.join(BIN, "ctune")] + list(args), timeout=timeout)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def test_bad_files(d):
    """Wrong --tls-cert/--tls-key: the server exits 2 naming the file."""
    exe = os.path.join(BIN, "ctune-server")
    db = os.path.join(d, "bad.db")
    cert, key = os.path.join(d, "server.pem"), os.path.join(d, "server.key")
    cases = [
        (["--tls-cert", cert], "--tls-key"),
        (["--tls-key", key], "--tls-cert"),
        (["--tls-cert", os.path.join(d, "missing.pem"), "--tls-key", key], "missing.pem"),
        (["--tls-cert", os.path.join(d, "server.csr"), "--tls-key", key], "server.csr"),
        (["--tls-cert", cert, "--tls-key", cert], "not a PEM private key"),
    ]
    for args, word in cases:
        r = run([exe, "--db", db, "--port", "0"] + args, timeout=20)
        msg = r.stderr.decode(errors="replace")
        assert r.returncode == 2, (args, r.returncode, msg)
        assert word in msg, (args, msg)
    # A key that is PEM but not the certificate's: GnuTLS's words, no listening line.
    r = run([exe, "--db", db, "--port", "0", "--tls-cert", cert,
             "--tls-key", os.path.join(d, "other.key")], timeout=20)
    msg = r.stderr.decode(errors="replace")
    assert r.returncode != 0 and b"listening" not in r.stdout, (r.returncode, msg)
    assert "--tls-key" in msg and "other.key" in msg, msg


def test_clear_text_warning(d):
    """A non-loopback bind without TLS warns that tokens travel in clear text;
    with TLS it does not."""
    tokens = os.path.join(d, "tokens")
    for name, extra, warned in (
            ("plain", [], True),
            ("tls", ["--tls-cert", os.path.join(d, "server.pem"),
                     "--tls-key", os.path.join(d, "server.key")], False)):
        log = os.path.join(d, "bind-%s.log" % name)
        srv = ctune_harness.start_server(BIN, db=os.path.join(d, "bind-%s.db" % name),
                                         bind="0.0.0.0", args=["--token-file", tokens] + extra,
                                         log_path=log, wait=False)
        procs.append(srv.p)
        srv.await_listening()
        stop(srv.p)
        text = open(log).read()
        assert ("clear text" in text) == warned, (name, text)
        assert srv.scheme == ("https" if extra else "http"), srv.url


def main():
    if not BIN or not os.path.exists(os.path.join(BIN, "ctune-server")):
        print("usage: test_tls.py BIN_DIR", file=sys.stderr)
        return 2
    if not OPENSSL:
        print("SKIP: openssl not installed (scripts/install-deps --test installs it)")
        return 77
    d = tempfile.mkdtemp(prefix="ctune-tls-")
    ok = False
    try:
        make_certs(d)
        test_bad_files(d)
        print("ok  bad certificate/key files are named")

        server, port, tokens = start_server(d)
        test_clear_text_warning(d)
        print("ok  a non-loopback bind warns without TLS, not with it")
        url = "https://127.0.0.1:%d" % port
        ca = os.path.join(d, "ca.pem")

        # Plain http to the TLS port is not served.
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            c.request("GET", "/healthz")
            st = c.getresponse().status
        except (OSError, http.client.HTTPException):
            st = None
        assert st is None, st
        c.close()
        print("ok  plain http on the TLS port gets no answer")

        # The dashboard's session cookie is Secure under TLS: a browser never
        # sends it to a plain-http service on the same host name.
        import ssl
        tls_ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.pem"))
        c = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=tls_ctx)
        c.request("GET", "/?token=" + TOKENS["admin"])
        r = c.getresponse()
        r.read()
        cookie = r.getheader("Set-Cookie") or ""
        c.close()
        assert r.status == 303, r.status
        attrs = [a.strip() for a in cookie.split(";")]
        assert "Secure" in attrs and "HttpOnly" in attrs, cookie
        print("ok  the session cookie is Secure under TLS")

        # A worker without the CA (system store only) or with another CA never
        # registers, and says why: the certificate.
        for name, wca in (("w-noca", None), ("w-otherca", os.path.join(d, "other.pem"))):
            w, log = start_worker(d, url, tokens, name, wca)
            wait_for("%s to report a certificate error" % name,
                     lambda: "certificate" in open(log).read() or w.poll() is not None, 20)
            text = open(log).read()
            assert "TLS" in text and "--ca-file" in text, text
            assert "registered" not in text, text
            stop(w)
            assert w.returncode == 0, (w.returncode, open(log).read()[-3000:])
        print("ok  a worker without the CA fails with a certificate error")

        # The CLI likewise; with a wrong URL scheme (http://) it cannot talk either.
        rc, out, err = cli("status", "--server", url, "--token-file", tokens)
        assert rc == 3 and "certificate" in err and "--ca-file" in err, (rc, out, err)
        rc, out, err = cli("status", "--server", "http://127.0.0.1:%d" % port,
                           "--token-file", tokens)
        assert rc == 3, (rc, out, err)
        print("ok  the CLI without the CA fails with a certificate error")

        # The real thing: a worker and the CLI over https with --ca-file.
        w, wlog = start_worker(d, url, tokens, "w-good", ca)
        script = os.path.join(d, "trainable.py")
        with open(script, "w") as f:
            f.write(TRAINABLE)
        cfg = {"name": "tls", "metric": "loss", "mode": "min", "num_samples": 1, "seed": 7,
               "param_space": {"x": {"grid_search": [1, 3, 5]}},
               "resources_per_trial": {"cpu": 1, "gpu": 0},
               "trainable": {"type": "command", "argv": [sys.executable, script]}}
        cfg_path = os.path.join(d, "exp.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        rc, out, err = cli("submit", cfg_path, "--server", url, "--ca-file", ca,
                           "--token-file", tokens, "--json")
        assert rc == 0, (rc, out, err)
        exp = json.loads(out)["id"]
        rc, out, err = cli("watch", str(exp), "--server", url, "--ca-file", ca,
                           "--token-file", tokens, "--json", "--interval", "0.5", timeout=90)
        assert rc == 0, (rc, out[-2000:], err, open(wlog).read()[-3000:])
        rc, out, err = cli("best", str(exp), "--server", url, "--ca-file", ca,
                           "--token-file", tokens, "--json")
        assert rc == 0, (rc, out, err)
        best = json.loads(out)["best_trial"]
        assert best["config"]["x"] == 3, best
        assert abs(best["value"] - 1.0 / 3) < 1e-9, best
        # CTUNE_CA_FILE works as --ca-file does.
        r = run([os.path.join(BIN, "ctune"), "status", "--server", url, "--token-file", tokens,
                 "--json"], env=dict(os.environ, CTUNE_CA_FILE=ca))
        assert r.returncode == 0, r.stderr
        stop(w)
        assert w.returncode == 0, (w.returncode, open(wlog).read()[-3000:])  # ASan builds too
        assert "registered with https://" in open(wlog).read(), open(wlog).read()[-2000:]
        print("ok  worker and CLI over https: experiment %d ended, best x=3" % exp)

        stop(server)
        assert server.returncode == 0, server.returncode
        ok = True
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            if p.stdout:
                p.stdout.close()
        if ok:
            shutil.rmtree(d, ignore_errors=True)
        else:
            for name in ("server.log", "w-good.log", "w-noca.log", "w-otherca.log"):
                path = os.path.join(d, name)
                if os.path.exists(path):
                    print("--- %s\n%s" % (name, open(path).read()[-3000:]), file=sys.stderr)
            shutil.rmtree(d, ignore_errors=True)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
