"""Helpers for the package's end-to-end tests: start the real ctune-server and
ctune-worker (binaries from CTUNE_BIN_DIR), read the port from the
`listening on http://ADDR:PORT` line, and stop everything afterwards."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
BIN = os.environ.get("CTUNE_BIN_DIR", "")


def free_port():
    """A TCP port nothing listens on now (the kernel's pick, then closed)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_procs(cond, what, procs=()):
    """Prints "ok: what", or "FAIL: what" with each finished process's
    exit status, stdout and the tail of its stderr, and exits 1."""
    if not cond:
        print("FAIL: " + what)
        for p in procs:
            print("exit %s\nstdout:\n%s\nstderr:\n%s" % (p.returncode, p.stdout,
                                                         p.stderr[-3000:]))
        sys.exit(1)
    print("ok: " + what)


def need_bins(*names):
    """Exit 77 (skip) when the binaries are not there to test against."""
    missing = [n for n in names if not os.access(os.path.join(BIN, n), os.X_OK)]
    if not BIN or missing:
        print(f"SKIP: set CTUNE_BIN_DIR to the folder of {', '.join(names)} "
              f"(missing: {', '.join(missing) or 'CTUNE_BIN_DIR'})", file=sys.stderr)
        sys.exit(77)


def need_torch_and_fmnist():
    """Exit 77 (skip) without Debian's torch or the Fashion-MNIST files."""
    if subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode:
        print("SKIP: /usr/bin/python3 has no torch (Debian's python3-torch)", file=sys.stderr)
        sys.exit(77)
    if not os.path.isfile("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"):
        print("SKIP: no Fashion-MNIST in /usr/share/datasets/fashion-mnist", file=sys.stderr)
        sys.exit(77)


def interrupt_when(path, timeout=60):
    """A thread that sends this process SIGINT (a Ctrl-C) once path exists
    (the trial made it), or after timeout seconds; join it afterwards."""
    def interrupt():
        deadline = time.monotonic() + timeout
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)
    t = threading.Thread(target=interrupt, daemon=True)
    t.start()
    return t


def read_tokens(path):
    out = {}
    with open(path) as f:
        for line in f:
            if "=" in line and not line.startswith("#"):
                k, v = line.strip().split("=", 1)
                out[k] = v
    return out


class Cluster:
    """One server on a fresh database, and the workers the test starts."""

    def __init__(self, prefix="ctune-py-"):
        self.tmp = tempfile.mkdtemp(prefix=prefix)
        self.procs = []
        self.db = os.path.join(self.tmp, "ctune.db")
        self.server = None
        self.url = None

    def start_server(self, extra=()):
        log = open(os.path.join(self.tmp, "server.log"), "ab")
        p = subprocess.Popen([os.path.join(BIN, "ctune-server"), "--db", self.db, "--port", "0",
                              "--bind", "127.0.0.1", "--lease-timeout", "10",
                              "--heartbeat-interval", "1", *extra],
                             stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        log.close()
        self.procs.append(p)
        self.server = p
        deadline = time.time() + 20
        while time.time() < deadline:
            line = p.stdout.readline().decode()
            m = re.match(r"listening on (https?://\S+)", line)
            if m:
                self.url = m.group(1).rstrip("/")
                self.tokens = read_tokens(self.db + ".tokens")
                return self
            if not line and p.poll() is not None:
                break
        raise AssertionError("ctune-server did not start:\n" + self.log("server.log"))

    def start_worker(self, name="w1", cpus=1):
        log = open(os.path.join(self.tmp, f"{name}.log"), "ab")
        p = subprocess.Popen([os.path.join(BIN, "ctune-worker"), "--server", self.url,
                              "--token-file", self.db + ".tokens", "--cpus", str(cpus),
                              "--gpus", "0", "--name", name, "--no-cgroup",
                              "--work-dir", os.path.join(self.tmp, name), "--poll-ms", "200",
                              "--stop-grace-s", "5"],
                             stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        log.close()
        self.procs.append(p)
        return p

    def log(self, name):
        try:
            with open(os.path.join(self.tmp, name), errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def stop(self, p, timeout=20):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        return p.returncode

    def close(self):
        # Workers first (they drain), then the server; each in its own
        # session, so a leftover trial goes with its group.
        for p in reversed(self.procs):
            self.stop(p)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if p.stdout:
                p.stdout.close()
        shutil.rmtree(self.tmp, True)


def command_trainable(script, *args):
    """A command trainable running /usr/bin/python3 SCRIPT with the package on
    PYTHONPATH (the worker builds a trial's environment from nothing)."""
    return {"type": "command", "argv": [sys.executable, script, *args],
            "env": {"PYTHONPATH": PKG}}


def script_cluster(source, *bins):
    """A started server (need_bins first) and a command trainable running
    source, written to train.py in the cluster's folder."""
    need_bins("ctune-server", "ctune-worker", *bins)
    c = Cluster().start_server()
    script = os.path.join(c.tmp, "train.py")
    with open(script, "w") as f:
        f.write(source)
    return c, command_trainable(script)


def run_to_end(cluster, client, experiments, cpus=2, timeout=60):
    """One worker until every experiment (ids) has finished, then stopped."""
    w = cluster.start_worker("w1", cpus=cpus)
    try:
        for e in experiments:
            client.wait(e, timeout=timeout, poll_s=0.2)
    finally:
        cluster.stop(w)
