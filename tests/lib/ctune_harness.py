"""The one harness of the end-to-end suites: start and stop the real
ctune-server and ctune-worker, wait for what a test can observe, read token
files, talk JSON over HTTP. Python 3 standard library only (the suites run
under Debian's /usr/bin/python3).

A suite finds this folder by a path relative to its own file:

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "lib"))      # "..", "..", "lib" one level deeper
    import ctune_harness

What it offers:

  wait_for(what, predicate, timeout, step)  polls until predicate() is truthy;
                              WaitTimeout names `what` and the last value seen
  read_tokens(path)           {"admin": ..., "worker": ..., "viewer": ...}
  start_server(...)  -> Server     ctune-server on --port 0 (or a given port),
                              once it printed "listening on SCHEME://HOST:PORT";
                              StartError names the command and the log file
  start_worker(...)  -> Process    ctune-worker --server URL ...
  Process.stop(timeout)       SIGTERM, wait, SIGKILL when it does not exit
  JsonClient(host, port)      a small HTTP client (keep-alive or one
                              connection per request), JSON bodies

Nothing here sleeps a fixed time to let something happen: a test waits for
the thing itself (a log line, a file, a state over HTTP) with wait_for.
"""
import http.client
import json
import os
import re
import select
import signal
import socket
import subprocess
import time

# How long a server may take to print its address. Generous: a loaded 2-core
# box running sanitizer builds; this only bounds how long a broken start takes
# to be reported.
START_TIMEOUT = 60.0
# How long a process may take to exit after SIGTERM before it gets SIGKILL.
STOP_TIMEOUT = 10.0

LISTENING = re.compile(r"listening on (https?)://(\S+):(\d+)")


class HarnessError(AssertionError):
    """A failure of the harness's own expectations (a test failure, not a bug
    in the test)."""


class WaitTimeout(HarnessError):
    pass


class StartError(HarnessError):
    """The program did not come up. `exited` is its exit status when it ended,
    None when it was still running at the deadline (then it was killed)."""

    def __init__(self, msg, exited=None):
        HarnessError.__init__(self, msg)
        self.exited = exited


# -- waiting -----------------------------------------------------------------

def _short(v, n=300):
    r = repr(v)
    return r if len(r) <= n else r[:n] + "..."


def wait_for(what, predicate, timeout, step=0.1, ignore=()):
    """Calls predicate() every `step` seconds until it returns something
    truthy, and returns that. Checks once more at the deadline, then raises
    WaitTimeout naming `what` and the last value seen. Exceptions of the
    classes in `ignore` count as "not yet" (the last one is reported)."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = predicate()
        except ignore as e:
            last = e
        else:
            if last:
                return last
        if time.monotonic() >= deadline:
            raise WaitTimeout("timed out after %.1f s waiting for %s (last value: %s)"
                              % (timeout, what, _short(last)))
        time.sleep(step)


# -- files ---------------------------------------------------------------------

def read_tokens(path):
    """{"admin": ..., "worker": ..., "viewer": ...} from a token file (the
    server's <db>.tokens or a --token-file): NAME=VALUE lines, # comments."""
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                k, v = line.split("=", 1)
                out[k] = v
    return out


def read_text(path, tail=None):
    """The file's text ("" when it cannot be read); its last `tail` characters
    when given."""
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return ""
    return text[-tail:] if tail else text


def port_free(port, host="127.0.0.1"):
    """Whether a listening socket could bind host:port now (SO_REUSEADDR, as
    the server's own socket: a port in TIME_WAIT counts as free)."""
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


# -- processes -------------------------------------------------------------------

def stop_popen(p, timeout=STOP_TIMEOUT, sig=signal.SIGTERM):
    """Sends `sig` (SIGTERM) to a running process, waits up to `timeout`
    seconds, then SIGKILLs it. Returns its exit status (negative: the signal
    that ended it)."""
    if p.poll() is None:
        try:
            p.send_signal(sig)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return p.returncode


def read_line(stream, timeout):
    """One line from a pipe, waiting at most `timeout` seconds: (text,
    complete). Reads the descriptor a byte at a time, so nothing past the line
    is taken from the pipe: the caller may go on with stream.readline()."""
    fd = stream.fileno()
    deadline = time.monotonic() + timeout
    buf = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return buf.decode(errors="replace"), False
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        b = os.read(fd, 1)
        if not b:  # end of file: the program closed its output (exited)
            return buf.decode(errors="replace"), False
        buf += b
        if b == b"\n":
            return buf.decode(errors="replace"), True


_SIGTERM = signal.SIGTERM  # (Process.signal hides the module in the class body)


class Process:
    """A started program: `p` (the Popen), `log_path` (its stderr, and its
    stdout too unless that is a pipe or a file of its own), `name`, `cmd`."""

    def __init__(self, popen, log_path, name, cmd=None):
        self.p = popen
        self.log_path = log_path
        self.name = name
        self.cmd = cmd

    @property
    def pid(self):
        return self.p.pid

    @property
    def returncode(self):
        return self.p.returncode

    def alive(self):
        return self.p.poll() is None

    def log(self, tail=None):
        return read_text(self.log_path, tail) if self.log_path else ""

    def signal(self, sig):
        if self.alive():
            try:
                os.kill(self.p.pid, sig)
            except ProcessLookupError:
                pass

    def wait(self, timeout=None):
        return self.p.wait(timeout)

    def stop(self, timeout=STOP_TIMEOUT, sig=_SIGTERM):
        """SIGTERM, wait up to `timeout` s, SIGKILL; the exit status."""
        rc = stop_popen(self.p, timeout, sig)
        self.close_pipes()
        return rc

    def kill(self, timeout=STOP_TIMEOUT):
        """SIGKILL and wait for it (a stopped process dies too)."""
        if self.alive():
            self.signal(signal.SIGKILL)
            self.p.wait(timeout)

    kill9 = kill

    def readline(self, timeout=START_TIMEOUT):
        """The next line of its stdout pipe ("" at end of file or timeout)."""
        return read_line(self.p.stdout, timeout)[0]

    def close_pipes(self):
        if self.p.stdout:
            self.p.stdout.close()


def spawn(cmd, log_path, name=None, output="pipe", log_mode="w", env=None,
          new_session=False, text=False, cls=Process):
    """Starts cmd with its stderr to log_path (opened with log_mode: "w" or
    "a"). Its stdout: "pipe" (read it with Process.readline), "log" (into
    the log too), "null", or a file path of its own."""
    own_file = output not in ("pipe", "log", "null")
    mode = "ab" if log_mode.startswith("a") else "wb"
    with open(log_path, mode) as log:
        out = {"pipe": subprocess.PIPE, "log": log,
               "null": subprocess.DEVNULL}.get(output) or open(output, "w")
        try:
            p = subprocess.Popen(cmd, stdout=out,
                                 stderr=subprocess.STDOUT if output == "log" else log,
                                 env=env, start_new_session=new_session, text=text)
        finally:
            if own_file:
                out.close()
    proc = cls(p, log_path, name or os.path.basename(cmd[0]), list(cmd))
    if own_file:
        proc.out_path = output
    return proc


# -- the server ------------------------------------------------------------------

class Server(Process):
    """A ctune-server process. Once listening: scheme, host (as printed:
    127.0.0.1 or [::1]), port, url; token_file (its --token-file, else
    <db>.tokens; None with --no-auth or no --db) and, where that file exists,
    tokens and admin_token."""

    def __init__(self, popen, log_path, name, cmd=None):
        super().__init__(popen, log_path, name, cmd)
        self.db = None
        self.url = self.host = self.port = self.scheme = None
        self.token_file = None
        self.tokens = {}
        self.admin_token = None

    def await_listening(self, timeout=START_TIMEOUT):
        """Waits for the "listening on" line (on its stdout pipe, or in the
        file its stdout goes to). Raises StartError naming the command, the
        log file and the exit status when it does not come."""
        out_path = getattr(self, "out_path", None)
        m = None
        deadline = time.monotonic() + timeout
        if out_path:
            def listening():
                found = LISTENING.search(read_text(out_path))
                return found or not self.alive()
            try:
                got = wait_for("%s to print its address" % self.name, listening, timeout, step=0.02)
            except WaitTimeout:
                got = None
            m = got if got is not True and got else None
        else:
            while m is None:
                line, complete = read_line(self.p.stdout, max(0.0, deadline - time.monotonic()))
                m = LISTENING.search(line)
                if not complete and m is None:
                    break
        if m is None:
            # Its output ended before the deadline: it is exiting; its status.
            eof = not out_path and time.monotonic() < deadline
            try:
                exited = self.p.wait(STOP_TIMEOUT if eof else 0)
            except subprocess.TimeoutExpired:
                exited = None
            if exited is None:
                self.kill()
                why = "did not print 'listening on' within %.0f s (killed)" % timeout
            else:
                why = "exited with status %d before printing 'listening on'" % exited
            raise StartError("%s %s\n  command: %s\n  log: %s\n%s"
                             % (self.name, why, " ".join(self.cmd), self.log_path,
                                self.log(tail=3000)), exited)
        self.scheme, self.host, self.port = m.group(1), m.group(2), int(m.group(3))
        self.url = "%s://%s:%d" % (self.scheme, self.host, self.port)
        return self

    def read_tokens(self):
        """Reads token_file when it exists (else tokens stay {})."""
        self.tokens = {}
        if self.token_file and os.path.exists(self.token_file):
            self.tokens = read_tokens(self.token_file)
        self.admin_token = self.tokens.get("admin")
        return self.tokens


def _flag_value(args, flag):
    args = list(args)
    if flag in args and args.index(flag) + 1 < len(args):
        return args[args.index(flag) + 1]
    for a in args:
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def start_server(bin_dir=None, db=None, args=(), port=0, bind=None, log_path=None,
                 output="pipe", log_mode="w", env=None, new_session=False, text=False,
                 timeout=START_TIMEOUT, wait=True, cmd=None, name="ctune-server"):
    """Starts `bin_dir`/ctune-server (or the program `cmd`, a list) as
        PROGRAM [--db DB] --port PORT [--bind BIND] ARGS...
    and, unless wait=False, waits for its "listening on" line and reads its
    token file. log_path: its stderr (default: beside the database)."""
    cmd = list(cmd) if cmd else [os.path.join(bin_dir or "", "ctune-server")]
    if db:
        cmd += ["--db", db]
    cmd += ["--port", str(port)]
    if bind:
        cmd += ["--bind", bind]
    cmd += [str(a) for a in args]
    if log_path is None:
        if not db:
            raise ValueError("start_server: name a log_path or a db")
        log_path = db + ".server.log"
    srv = spawn(cmd, log_path, name, output=output, log_mode=log_mode, env=env,
                new_session=new_session, text=text, cls=Server)
    srv.db = db
    if "--no-auth" not in args:
        srv.token_file = _flag_value(args, "--token-file") or (db + ".tokens" if db else None)
    if wait:
        srv.await_listening(timeout)
        srv.read_tokens()
    return srv


# -- the worker ------------------------------------------------------------------

def start_worker(bin_dir, server_url, args=(), log_path=None, output="log", log_mode="w",
                 env=None, new_session=False, name=None):
    """Starts `bin_dir`/ctune-worker --server URL ARGS... with its output in
    log_path (output="null": only its stderr there). Returns the Process
    (stop it with .stop())."""
    cmd = [os.path.join(bin_dir or "", "ctune-worker"), "--server", server_url]
    cmd += [str(a) for a in args]
    return spawn(cmd, log_path, name or "ctune-worker", output=output, log_mode=log_mode,
                 env=env, new_session=new_session)


# -- HTTP ------------------------------------------------------------------------

def encode_body(body):
    """bytes as they are, str as UTF-8, anything else as JSON; None: no body."""
    if body is None or isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body).encode()


class JsonClient:
    """HTTP to one server. keep_alive: one connection reused (reconnected once
    when the server closed it); otherwise a fresh connection per request with
    Connection: close. Sends `Authorization: Bearer TOKEN` when it has a
    token. request() returns (status, body bytes, {lower-case name: value})."""

    def __init__(self, host, port, token=None, timeout=30, keep_alive=True):
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        self.host, self.port = host, port
        self.token = token
        self.timeout = timeout
        self.keep_alive = keep_alive
        self.conn = None

    @classmethod
    def for_url(cls, url, **kw):
        m = re.match(r"^http://(\[[^\]]+\]|[^:/]+):(\d+)/?$", url)
        if not m:
            raise ValueError("not an http://HOST:PORT URL: %r" % url)
        return cls(m.group(1), int(m.group(2)), **kw)

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def request(self, method, path, body=None, headers=None, token=None, timeout=None):
        h = {}
        tok = token if token is not None else self.token
        if tok:
            h["Authorization"] = "Bearer " + tok
        if not self.keep_alive:
            h["Connection"] = "close"
        h.update(headers or {})
        data = encode_body(body)
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(
                    self.host, self.port, timeout=timeout or self.timeout)
            elif self.conn.sock is not None:
                self.conn.sock.settimeout(timeout or self.timeout)
            try:
                self.conn.request(method, path, body=data, headers=h)
                r = self.conn.getresponse()
                payload = r.read()
                break
            except (ConnectionError, http.client.HTTPException):
                self.close()
                if attempt or not self.keep_alive:
                    raise
            except OSError:
                self.close()
                raise
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        if not self.keep_alive or hdrs.get("connection", "").lower() == "close":
            self.close()
        return r.status, payload, hdrs

    def call(self, method, path, body=None, ok=(200, 201, 204), **kw):
        """The parsed JSON answer (None when empty); AssertionError when the
        status is not in `ok`."""
        status, payload, _ = self.request(method, path, body, **kw)
        if ok and status not in ok:
            raise AssertionError("%s %s -> %d %s" % (method, path, status, payload[:500]))
        return json.loads(payload) if payload else None
