"""ctune.open(db): the results in a database file (what `ctune run` leaves
in ctune-results/), read through a private read-only ctune-server
(--read-only: it changes nothing in the file) that lives as long as the
ResultGrid. SQL stays in the server's store layer; Python only speaks its
REST API."""
import fcntl
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import weakref

from . import _bin
from ._client import Client
from ._errors import CtuneError
from ._results import ResultGrid

START_TIMEOUT_S = 30


def _stop(proc, tmp):
    """SIGTERM the private server (its own process group), SIGKILL after
    10 s; remove its folder. Idempotent (weakref.finalize calls it once)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc.stdout:
        proc.stdout.close()
    shutil.rmtree(tmp, True)


class LocalServer:
    """A read-only ctune-server on db, on a free loopback port, with tokens
    of its own (a fresh token file in a private folder, not <db>.tokens).
    stop() ends it; so does the end of the program."""

    def __init__(self, db):
        db = os.fspath(db)
        if not os.path.isfile(db):
            raise CtuneError(f"{db}: no such database file (ctune run writes them in "
                             f"ctune-results/)", code="not_found", path=db)
        prog = _bin.need("ctune-server")
        self.db = db
        self.tmp = tempfile.mkdtemp(prefix="ctune-open-")
        token = secrets.token_urlsafe(32)
        tokens = os.path.join(self.tmp, "tokens")
        fd = os.open(tokens, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"admin={token}\nworker={secrets.token_urlsafe(32)}\n")
        log_path = os.path.join(self.tmp, "server.log")
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [prog, "--db", db, "--read-only", "--bind", "127.0.0.1", "--port", "0",
                 "--token-file", tokens],
                stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                start_new_session=True)
        self._finalizer = weakref.finalize(self, _stop, self.proc, self.tmp)
        url = self._wait_listening(log_path)
        self.client = Client(url, token=token)

    def _wait_listening(self, log_path):
        # The first stdout line a starting server prints is "listening on
        # URL"; a refused one prints nothing and exits. readline returns at
        # either, and the deadline bounds a server that hangs before both.
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline().decode("utf-8", "replace")
            m = re.match(r"listening on (https?://\S+)", line)
            if m:
                return m.group(1).rstrip("/")
            if not line:
                break
        try:
            with open(log_path, errors="replace") as f:
                log = f.read()
        except OSError:
            log = ""
        self.stop()
        errors = [re.sub(r"^\S+ ctune-server error ", "", ln) for ln in log.splitlines()
                  if " error " in ln]
        why = (errors[-1] if errors else log.strip()[-500:]) or "it printed nothing"
        raise CtuneError(f"cannot open {self.db}: ctune-server did not start: {why}",
                         code="server_failed", path=self.db)

    def stop(self):
        self._finalizer()

    @property
    def running(self):
        return self.proc.poll() is None


class OpenResultGrid(ResultGrid):
    """The ResultGrid of ctune.open: close() (or leaving the `with` block)
    also stops its private server."""

    def __init__(self, server, experiment, storage_path=None):
        self.server = server
        super().__init__(experiment, client=server.client, storage_path=storage_path)

    def close(self):
        super().close()
        self.server.stop()


def _held(db):
    """Whether a (writing) ctune-server holds db: the flock it takes on the
    database file, probed with a shared lock that is dropped at once."""
    try:
        fd = os.open(os.fspath(db), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False  # LocalServer names what is wrong with the file
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # drops the shared lock, if taken


def _served_by(db):
    """A Client of the ctune-server that holds db, from the login URL it
    wrote beside it (<db>.login-url, 0600: its address and admin token),
    or None when there is none to read."""
    path = os.path.realpath(os.fspath(db)) + ".login-url"
    try:
        with open(path, encoding="utf-8") as f:
            line = f.readline().strip()
    except OSError:
        return None
    m = re.match(r"(https?://[^/?#\s]+)/?\?token=(\S+)$", line)
    return Client(m.group(1), token=m.group(2)) if m else None


def _newest(client, db):
    exps = client.experiments()
    if not exps:
        raise CtuneError(f"{db} holds no experiment", code="not_found", path=os.fspath(db))
    return max(e["id"] for e in exps)


def open_db(db, experiment=None, storage_path=None):
    """ctune.open: the ResultGrid of an experiment in the database file db: experiment
    is an id or a name (default: the newest). Starts a private read-only
    ctune-server on db (--read-only, a free loopback port, fresh tokens)
    that close() or the end of the `with` block stops:

        with ctune.open("ctune-results/fmnist.db") as grid:
            print(grid.get_best_result().config)

    A database another ctune-server holds (a run still going) is read
    through that server, found by the login URL it wrote beside the
    database (live results); closing the grid leaves it running. Without
    that file, a private read-only server reads it beside the writer (the
    results as they were when it started)."""
    client = _served_by(db) if _held(db) else None
    if client is not None:
        return ResultGrid(experiment if experiment is not None else _newest(client, db),
                          client=client, storage_path=storage_path)
    server = LocalServer(db)
    try:
        if experiment is None:
            experiment = _newest(server.client, db)
        return OpenResultGrid(server, experiment, storage_path=storage_path)
    except BaseException:
        server.stop()
        raise
