"""Shared helpers for ctune-worker's end-to-end tests: start the real
ctune-server (--port 0) and ctune-worker processes, talk to the REST API,
and always clean up processes (including orphaned trials) and temp dirs."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TRAINABLE = os.path.join(HERE, "trainable.sh")
SKIP = 77


class Proc:
    def __init__(self, popen, log_path, name):
        self.p = popen
        self.log_path = log_path
        self.name = name

    @property
    def pid(self):
        return self.p.pid

    def alive(self):
        return self.p.poll() is None

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def kill9(self):
        if self.alive():
            os.kill(self.p.pid, signal.SIGKILL)
            self.p.wait(10)


class Env:
    def __init__(self, name):
        self.bin = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CTUNE_BIN_DIR", "")
        self.args = sys.argv[2:]
        for prog in ("ctune-server", "ctune-worker"):
            if not os.access(os.path.join(self.bin, prog), os.X_OK):
                print("SKIP: %s not built in %r" % (prog, self.bin))
                sys.exit(SKIP)
        self.tmp = tempfile.mkdtemp(prefix="ctune-worker-%s-" % name)
        self.procs = []
        self.url = None
        self.server_proc = None
        # Tokens by default: the server's <db>.tokens, unless the test gave
        # --token-file or --no-auth (then it sets these itself).
        self.token_file = None
        self.admin_token = None

    # -- processes ---------------------------------------------------------
    def start_server(self, *args, port=0, db=None):
        db = db or os.path.join(self.tmp, "ctune.db")
        log_path = os.path.join(self.tmp, "server-%d.log" % len(self.procs))
        log = open(log_path, "w")
        p = subprocess.Popen([os.path.join(self.bin, "ctune-server"), "--db", db, "--port",
                              str(port), "--bind", "127.0.0.1"] + list(args),
                             stdout=subprocess.PIPE, stderr=log, text=True,
                             start_new_session=True)
        log.close()
        proc = Proc(p, log_path, "server")
        self.procs.append(proc)
        deadline = time.time() + 15
        while time.time() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            m = re.search(r"listening on (http://\S+:(\d+))", line)
            if m:
                self.url = m.group(1)
                self.port = int(m.group(2))
                self.server_proc = proc
                if "--no-auth" not in args and "--token-file" not in args:
                    self.token_file = db + ".tokens"
                    self.admin_token = read_tokens(self.token_file).get("admin")
                return proc
        raise AssertionError("ctune-server did not print its address:\n" + proc.log())

    def start_worker(self, name, *args, env=None):
        log_path = os.path.join(self.tmp, "worker-%s-%d.log" % (name, len(self.procs)))
        log = open(log_path, "w")
        p = subprocess.Popen([os.path.join(self.bin, "ctune-worker"), "--server", self.url,
                              "--name", name, "--work-dir", self.work_dir(name),
                              "--poll-ms", "200", "--stop-grace-s", "3"] +
                             (["--token-file", self.token_file]
                              if self.token_file and "--token-file" not in args else []) +
                             list(args),
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                             env=env)
        log.close()
        proc = Proc(p, log_path, "worker " + name)
        self.procs.append(proc)
        return proc

    def work_dir(self, name):
        return os.path.join(self.tmp, "work-" + name)

    def trial_dir(self, worker, trial_id):
        return os.path.join(self.work_dir(worker), "trials", str(trial_id))

    def trial_processes(self):
        """pids of live processes started for trials of this test (found by the
        CTUNE_CHECKPOINT_DIR the worker puts in their environment)."""
        found = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open("/proc/%s/environ" % d, "rb") as f:
                    env = f.read()
                with open("/proc/%s/stat" % d) as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z" and (b"CTUNE_CHECKPOINT_DIR=" + self.tmp.encode()) in env:
                found.append(int(d))
        return found

    def kill_trials(self):
        for pid in self.trial_processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def finish_workers(self):
        """SIGTERM every live worker; each must drain and exit 0, and no
        worker log may hold a sanitizer report (the suite also runs under
        ASan/UBSan, where leaks make the exit status non-zero)."""
        live = [p for p in self.procs if p.name.startswith("worker") and p.alive()]
        for proc in live:
            os.kill(proc.pid, signal.SIGTERM)
        for proc in live:
            rc = proc.p.wait(20)
            assert rc == 0, "%s exited %d after SIGTERM:\n%s" % (proc.name, rc, proc.log()[-3000:])
        for proc in self.procs:
            if proc.name.startswith("worker"):
                log = proc.log()
                for bad in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
                    assert bad not in log, "%s: %s report:\n%s" % (proc.name, bad, log[-5000:])

    def close(self):
        for proc in self.procs:
            if proc.alive() and proc.name.startswith("worker"):
                os.kill(proc.pid, signal.SIGTERM)
        deadline = time.time() + 8
        for proc in self.procs:
            if proc.name.startswith("worker"):
                while proc.alive() and time.time() < deadline:
                    time.sleep(0.05)
        for proc in self.procs:
            if proc.alive():
                os.kill(proc.pid, signal.SIGKILL)
            try:
                proc.p.wait(10)
            except subprocess.TimeoutExpired:
                pass
            if proc.p.stdout:
                proc.p.stdout.close()
        self.kill_trials()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- API ------------------------------------------------------------
    def api(self, method, path, body=None, ok=(200, 201, 204)):
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if self.admin_token:
            headers["Authorization"] = "Bearer " + self.admin_token
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                status, text = r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode()
        if ok and status not in ok:
            raise AssertionError("%s %s -> %d %s" % (method, path, status, text))
        return json.loads(text) if text else None

    def submit(self, config):
        return self.api("POST", "/api/v1/experiments", config)["id"]

    def trials(self, exp_id):
        return self.api("GET", "/api/v1/experiments/%d/trials" % exp_id)["trials"]

    def trial(self, trial_id):
        return self.api("GET", "/api/v1/trials/%d" % trial_id)

    def results(self, trial_id):
        r = self.api("GET", "/api/v1/trials/%d/results" % trial_id)
        return r["results"] if isinstance(r, dict) else r

    def experiment(self, exp_id):
        return self.api("GET", "/api/v1/experiments/%d" % exp_id)

    def wait_experiment(self, exp_id, timeout):
        return wait_for(lambda: self.experiment(exp_id)["status"] != "RUNNING" and
                        self.experiment(exp_id), timeout, "experiment %d to end" % exp_id)


def read_tokens(path):
    """{"admin": ..., "worker": ..., "viewer": ...} from a server's token file."""
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                k, v = line.split("=", 1)
                out[k] = v
    return out


def wait_for(pred, timeout, what, step=0.05):
    deadline = time.time() + timeout
    while True:
        try:
            v = pred()
        except IndexError:
            # trials are made at lease time: a list read before
            # the first lease is empty, which means "not yet"
            v = None
        if v:
            return v
        if time.time() > deadline:
            raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))
        time.sleep(step)


def cpus_allowed(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("Cpus_allowed_list:"):
                return line.split(":", 1)[1].strip()
    return None


def result_values(results, key="training_iteration"):
    out = []
    for r in results:
        r = r.get("result", r)
        out.append(r[key])
    return out


def command_config(name, argv, **kw):
    cfg = {"name": name, "metric": "loss", "mode": "min", "num_samples": 1,
           "param_space": {"x": {"type": "uniform", "lower": 0, "upper": 1}},
           "scheduler": {"type": "fifo", "time_attr": "training_iteration"},
           "resources_per_trial": {"cpu": 1},
           "trainable": {"type": "command", "argv": argv}}
    cfg.update(kw)
    return cfg


def main(name, body):
    env = Env(name)
    rc = 1
    try:
        body(env)
        env.finish_workers()
        print("PASS")
        rc = 0
    except Exception:
        traceback.print_exc()
        for proc in env.procs:
            print("---- last lines of %s (%s)" % (proc.name, proc.log_path))
            print("\n".join(proc.log().splitlines()[-30:]))
    finally:
        env.close()
    sys.exit(rc)
