"""Shared helpers for ctune-worker's end-to-end tests: start the real
ctune-server (--port 0) and ctune-worker processes, talk to the REST API,
and always clean up processes (including orphaned trials) and temp dirs."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "lib"))
import ctune_harness  # noqa: E402
from ctune_harness import read_tokens  # noqa: E402,F401

TRAINABLE = os.path.join(HERE, "trainable.sh")
SKIP = 77

# A started server or worker: p (the Popen), log_path, name, pid, alive(),
# log(), kill9(). Tests that start a process themselves wrap it in one.
Proc = ctune_harness.Process


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
    def start_server(self, *args, port=0, db=None, env=None):
        db = db or os.path.join(self.tmp, "ctune.db")
        proc = ctune_harness.start_server(
            self.bin, db=db, port=port, bind="127.0.0.1", args=args,
            log_path=os.path.join(self.tmp, "server-%d.log" % len(self.procs)), text=True,
            new_session=True, wait=False, name="server", env=env)
        self.procs.append(proc)
        proc.await_listening()
        self.url = proc.url
        self.port = proc.port
        self.server_proc = proc
        if "--no-auth" not in args and "--token-file" not in args:
            self.token_file = db + ".tokens"
            self.admin_token = read_tokens(self.token_file).get("admin")
        return proc

    def start_worker(self, name, *args, env=None):
        proc = ctune_harness.start_worker(
            self.bin, self.url,
            ["--name", name, "--work-dir", self.work_dir(name), "--poll-ms", "200",
             "--stop-grace-s", "3"] +
            (["--token-file", self.token_file]
             if self.token_file and "--token-file" not in args else []) + list(args),
            log_path=os.path.join(self.tmp, "worker-%s-%d.log" % (name, len(self.procs))),
            env=env, new_session=True, name="worker " + name)
        self.procs.append(proc)
        return proc

    def work_dir(self, name):
        return os.path.join(self.tmp, "work-" + name)

    def trial_dir(self, worker, trial_id):
        return os.path.join(self.work_dir(worker), "trials", str(trial_id))

    def trial_processes(self, worker=None):
        """pids of live processes started for trials of this test (found by the
        CTUNE_CHECKPOINT_DIR the worker puts in their environment); with
        `worker`, only that worker's."""
        mark = b"CTUNE_CHECKPOINT_DIR=" + (
            (self.work_dir(worker) + "/") if worker else self.tmp).encode()
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
            if state != "Z" and mark in env:
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
        deadline = time.monotonic() + 8
        for proc in self.procs:
            if proc.name.startswith("worker"):
                try:
                    proc.p.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
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
        # one connection per call, as urllib made
        client = ctune_harness.JsonClient.for_url(self.url, token=self.admin_token, timeout=10,
                                                  keep_alive=False)
        status, text, _ = client.request(method, path, body,
                                         headers={"Content-Type": "application/json"})
        if ok and status not in ok:
            raise AssertionError("%s %s -> %d %s" % (method, path, status, text.decode()))
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


def wait_for(pred, timeout, what, step=0.05):
    """ctune_harness.wait_for in this suite's argument order. Trials are made
    at lease time: a list read before the first lease is empty, and indexing
    it (IndexError) means "not yet"."""
    return ctune_harness.wait_for(what, pred, timeout, step, ignore=(IndexError,))


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


def main(name, body, env_class=Env):
    env = env_class(name)
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
