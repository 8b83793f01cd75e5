#!/usr/bin/env python3
"""End-to-end tests of the ctune CLI against the real ctune-server, ctune-worker
and ctune-train (docs/protocol.md contracts). Usage: e2e_cli.py BIN_DIR CASE, CASE one
of remote, run, sigint, resume, hide. Every process started here, and any process
they leave behind, is stopped before the test returns (this process becomes a
child subreaper, so orphans become our children and are visible in /proc)."""
import ctypes
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

BIN = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.environ.get("CTUNE_BIN_DIR", "")
CASE = sys.argv[2] if len(sys.argv) > 2 else "remote"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import ctune_harness  # noqa: E402
from ctune_harness import read_tokens, wait_for  # noqa: E402,F401  (e2e_early, e2e_examples)
EXAMPLES = os.path.join(HERE, "..", "..", "examples")
DATA = "/usr/share/datasets/fashion-mnist"
PR_SET_CHILD_SUBREAPER = 36

procs = []


def fail(msg):
    raise AssertionError(msg)


def check(cond, msg):
    if not cond:
        fail(msg)


def descendants():
    """Pids whose parent is this process (with the subreaper, every leftover)."""
    me, out = os.getpid(), []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == me and fields[0] != "Z":
            out.append(int(d))
    return out


def reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def cleanup():
    # The last started first, each gone before the next is told: a worker
    # stops while its server still answers (told at once, it would retry
    # its last messages against a dead server until its drain deadline).
    deadline = time.time() + 10
    for p in reversed(procs):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        try:
            p.wait(max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    killed = descendants()
    for pid in killed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:  # SIGKILLed: they die at once; then reap them
        wait_for("the leftover processes %s to die" % killed,
                 lambda: not set(killed) & set(descendants()), 10, step=0.02)
    except ctune_harness.WaitTimeout as e:
        print("cleanup: %s" % e)
    reap()


def ctune(*args, env=None, cwd=None, timeout=120, exe=None):
    e = dict(os.environ)
    e.pop("CTUNE_SERVER", None)
    e.pop("CTUNE_TOKEN", None)
    e.update(env or {})
    r = subprocess.run([exe or os.path.join(BIN, "ctune"), *args], capture_output=True, text=True,
                       env=e, cwd=cwd, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def start_server(tmp, db, token_file=None):
    """A ctune-server on a free port, its stderr appended to tmp/server.log;
    (Popen, url)."""
    args = ["--lease-timeout", "10", "--heartbeat-interval", "1"]
    if token_file:
        args += ["--token-file", token_file]
    srv = ctune_harness.start_server(BIN, db=db, args=args, log_path=os.path.join(tmp, "server.log"),
                                     log_mode="a", wait=False)
    procs.append(srv.p)
    srv.await_listening()
    return srv.p, srv.url


def start_worker(tmp, url, token_file=None, cpus=2):
    args = ["--cpus", str(cpus), "--gpus", "0", "--work-dir", os.path.join(tmp, "work"),
            "--poll-ms", "200"]
    if token_file:
        args += ["--token-file", token_file]
    w = ctune_harness.start_worker(BIN, url, args, log_path=os.path.join(tmp, "worker.log"),
                                   output="null", log_mode="a")
    procs.append(w.p)
    return w.p


def write_config(tmp, name, cfg):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


# A trial of `iters` results, `sleep` seconds apart, resumable from its
# checkpoint. With a `gate` (a path): past its first `hold` results it
# waits until that file exists, so that a test interrupting the run finds
# every trial mid-run however slow the machine, and then runs fast.
SLOW_TRIAL = r'''
import json, os, signal, sys, time
stop = False
def on_term(sig, frame):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
cfg = json.loads(os.environ["CTUNE_CONFIG"])
ck = os.path.join(os.environ.get("CTUNE_CHECKPOINT_DIR", "."), "it")
start = 0
try:
    start = int(open(ck).read())
except (OSError, ValueError):
    pass
gate, hold = cfg.get("gate"), int(cfg.get("hold", 0))
for i in range(start + 1, int(cfg["iters"]) + 1):
    while gate and i > hold and not stop and not os.path.exists(gate):
        time.sleep(0.02)
    time.sleep(float(cfg["sleep"]))
    if stop:
        sys.exit(0)
    with open(ck, "w") as f:
        f.write(str(i))
    print(json.dumps({"training_iteration": i, "loss": cfg["x"] / i}), flush=True)
'''


def slow_config(tmp, name, iters, sleep, samples=2, gate=None, hold=0):
    script = os.path.join(tmp, "slow_trial.py")
    with open(script, "w") as f:
        f.write(SLOW_TRIAL)
    space = {"x": {"type": "uniform", "lower": 1, "upper": 2}, "iters": iters, "sleep": sleep}
    if gate:
        space.update(gate=gate, hold=hold)
    return write_config(tmp, name + ".json", {
        "name": name, "metric": "loss", "mode": "min", "num_samples": samples, "seed": 3,
        "param_space": space,
        "scheduler": {"type": "fifo"},
        "resources_per_trial": {"cpu": 1, "gpu": 0},
        "trainable": {"type": "command", "argv": ["/usr/bin/python3", script]}})


def db_check(db):
    """Integrity of the database `ctune run` left behind; returns rows."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        check(con.execute("PRAGMA integrity_check").fetchone()[0] == "ok", "db integrity_check failed")
        exps = con.execute("SELECT id, name, status FROM experiments").fetchall()
        trials = con.execute("SELECT experiment_id, status FROM trials").fetchall()
        nres = con.execute("SELECT count(*) FROM results").fetchone()[0]
    finally:
        con.close()
    return exps, trials, nres


# ---------------------------------------------------------------- cases

def case_remote(tmp):
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        f.write("admin=adm1n-secret-0123456789\nworker=w0rker-secret-0123456789\n")
    os.chmod(tokens, 0o600)  # the server refuses a token file others may read
    admin = os.path.join(tmp, "admin.token")
    with open(admin, "w") as f:
        f.write("adm1n-secret-0123456789\n")
    wtoken = os.path.join(tmp, "worker.token")
    with open(wtoken, "w") as f:
        f.write("worker=w0rker-secret-0123456789\n")
    _, url = start_server(tmp, os.path.join(tmp, "remote.db"), tokens)
    A = ["--server", url, "--token-file", tokens]
    quick = os.path.join(EXAMPLES, "quick.json")

    # Errors: unreachable (3), no or wrong token (4), unknown ids (5), usage (2).
    code, out, err = ctune("status", "--server", "http://127.0.0.1:9")
    check(code == 3 and "cannot reach the ctune server at http://127.0.0.1:9" in err, f"unreachable: {code} {err}")
    code, out, err = ctune("status", "--server", url)
    check(code == 4 and "token" in err and err.count("\n") == 1, f"no token: {code} {err!r}")
    code, out, err = ctune("status", env={"CTUNE_SERVER": url, "CTUNE_TOKEN": "wrong-token-0123456789"})
    check(code == 4 and "401" in err, f"wrong token: {code} {err}")
    code, out, err = ctune("status", env={"CTUNE_SERVER": url, "CTUNE_TOKEN": "w0rker-secret-0123456789"})
    check(code == 4 and "403" in err, f"worker token: {code} {err}")
    for cmd in (["watch", "999"], ["trials", "999"], ["best", "999"], ["cancel", "999"],
                ["export", "999"], ["logs", "999"]):
        code, out, err = ctune(*cmd, *A)
        check(code == 5 and "not found" in err and err.count("\n") == 1, f"{cmd}: {code} {err!r}")
    code, out, err = ctune("best", "1", "--scope", "median", *A)
    check(code == 2 and "--scope 'median'" in err, f"usage: {code} {err}")
    bad_json = write_config(tmp, "bad.json", {})
    with open(bad_json, "w") as f:
        f.write('{\n  "name": "x",\n  "num_samples": ,\n}\n')
    code, out, err = ctune("submit", bad_json, *A)
    check(code == 2 and "bad.json:3:" in err, f"bad json: {code} {err}")
    bad_cfg = write_config(tmp, "badcfg.json", {"name": "x", "num_samples": -1})
    code, out, err = ctune("submit", bad_cfg, *A)
    check(code == 1 and "num_samples" in err, f"rejected config: {code} {err}")

    # Dry run stores nothing.
    code, out, err = ctune("submit", quick, "--dry-run", *A)
    check(code == 0 and "would create 4 trials" in out and out.count("lr=") == 4, f"dry run: {code} {out} {err}")
    code, out, err = ctune("sample", quick, *A)
    check(code == 0 and "would create 4 trials" in out, f"sample: {code} {out} {err}")
    code, out, err = ctune("status", *A)
    check(code == 0 and "no experiments" in out, f"empty status: {out}")

    # Tokens by default: a server started without --token-file made
    # DB.tokens; `--db DB` finds the admin token there, without it: 401.
    db2 = os.path.join(tmp, "local.db")
    p2, url2 = start_server(tmp, db2)
    check(oct(os.stat(db2 + ".tokens").st_mode & 0o777) == "0o600", "DB.tokens is 0600")
    code, out, err = ctune("status", "--server", url2)
    check(code == 4 and "401" in err, f"default tokens, none given: {code} {err}")
    code, out, err = ctune("status", "--server", url2, "--db", db2)
    check(code == 0 and "no experiments" in out, f"--db finds the token: {code} {out} {err}")
    # The server names its token file after the database file itself, and
    # so does `--db` given a symlink to it.
    link2 = os.path.join(tmp, "link.db")
    os.symlink(db2, link2)
    code, out, err = ctune("status", "--server", url2, "--db", link2)
    check(code == 0 and "no experiments" in out, f"--db through a symlink: {code} {out} {err}")
    # ... and so does a loopback server's default, ./ctune.db, a symlink here.
    here = os.path.join(tmp, "here")
    os.mkdir(here)
    os.symlink(db2, os.path.join(here, "ctune.db"))
    code, out, err = ctune("status", "--server", url2, cwd=here)
    check(code == 0 and "no experiments" in out, f"./ctune.db a symlink: {code} {out} {err}")
    p2.terminate()
    p2.wait(timeout=10)

    # Submit, watch to the end with a worker (CTUNE_SERVER/CTUNE_TOKEN path).
    code, out, err = ctune("submit", quick, "--token-file", admin, env={"CTUNE_SERVER": url})
    check(code == 0 and "submitted experiment 1 'quick'" in out, f"submit: {code} {out} {err}")
    # Watch from before the worker starts, so every trial's start is seen.
    w = subprocess.Popen([os.path.join(BIN, "ctune"), "watch", "1", "--interval", "1", "--width", "200", *A],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(w)
    check(w.stdout.readline() == "== Status ==\n", "watch prints the status block")
    start_worker(tmp, url, wtoken)
    out, err = w.communicate(timeout=90)
    out = "== Status ==\n" + out
    code = w.returncode
    check(code == 0, f"watch: {code} {err}")
    check("Trial quick_00000 started" in out and "Experiment 1 'quick': TERMINATED" in out,
          f"watch output: {out}")
    check("| Trial name" in out and "Scheduler: ASHA" in out, "watch shows the table")

    code, out, err = ctune("status", *A)
    check(code == 0 and re.search(r"^1\s+quick\s+TERMINATED\s+4\b", out, re.M), f"status: {out}")
    code, out, err = ctune("status", "--json", *A)
    check(json.loads(out)["experiments"][0]["id"] == 1, "status --json")
    code, out, err = ctune("trials", "1", "--width", "200", *A)
    check(code == 0 and out.count("| quick_0000") == 4, f"trials: {out}")
    code, out, err = ctune("trials", "1", "--json", *A)
    trials = json.loads(out)
    check(code == 0 and len(trials) == 4 and all(t["status"] == "TERMINATED" for t in trials), "trials --json")
    code, out, err = ctune("best", "1", *A)
    check(code == 0 and out.startswith("Best trial: quick_0000") and "test accuracy:" in out, f"best: {out} {err}")
    code, out, err = ctune("best", "1", "--metric", "accuracy", "--mode", "max", "--scope", "all", "--json", *A)
    best = json.loads(out)["best_trial"]
    check(code == 0 and max(t["last_result"]["accuracy"] for t in trials) <= best["value"] + 1e-12,
          f"best by accuracy: {out}")
    code, out, err = ctune("best", "1", "--metric", "nosuch", "--mode", "min", *A)
    check(code == 5 and "nosuch" in err and "experiment 1 not found" not in err, f"best, no metric: {code} {err}")
    code, out, err = ctune("logs", str(trials[0]["id"]), *A)
    check(code == 0 and "training_iteration" in out, f"logs: {code} {out[:200]} {err}")
    code, out, err = ctune("export", "1", "--format", "csv", *A)
    lines = out.strip().split("\n")
    check(code == 0 and lines[0].startswith("trial_id,name,status") and len(lines) == 5, f"csv: {out}")
    check("config/lr" in lines[0] and ",loss," in lines[0], "csv columns")
    out_file = os.path.join(tmp, "export.json")
    code, out, err = ctune("export", "1", "--format", "json", "--output", out_file, *A)
    doc = json.load(open(out_file))
    nres = sum(len(t["results"]) for t in doc["trials"])
    check(code == 0 and doc["experiment"]["id"] == 1 and nres >= 4, f"json export: {nres}")
    check(all(len(t["results"]) == t["iteration"] for t in doc["trials"]), "every result exported once")

    # Cancel an experiment whose trials cannot all run at once.
    slow = slow_config(tmp, "slowcancel", iters=200, sleep=0.2, samples=4)
    code, out, err = ctune("submit", slow, *A)
    check(code == 0 and "submitted experiment 2" in out, f"submit 2: {out} {err}")
    # On a terminal the reporter redraws in place; Ctrl-C only stops watching.
    out, code = watch_in_pty(["watch", "2", *A], until=lambda out: out.count("== Status ==") >= 2
                             and "A\x1b[J" in out)
    check(code == 130, f"watch in a pty: exit {code}")
    check(out.count("== Status ==") >= 2 and "\x1b[" in out and "A\x1b[J" in out,
          f"redraw in place: {out[:400]!r}")
    check("stopped watching; experiment 2 goes on" in out, "watch Ctrl-C message")
    code, out, err = ctune("cancel", "2", *A)
    check(code == 0 and "cancelled" in out, f"cancel: {code} {out} {err}")

    def trials_ended():
        code, out, err = ctune("trials", "2", "--json", *A)
        return not any(t["status"] in ("RUNNING", "PENDING") for t in json.loads(out))
    try:
        wait_for("experiment 2's trials to stop", trials_ended, 30, step=0.5)
    except ctune_harness.WaitTimeout:
        pass  # the status check below says what is wrong
    code, out, err = ctune("status", "--json", *A)
    exp2 = [e for e in json.loads(out)["experiments"] if e["id"] == 2][0]
    check(exp2["status"] == "CANCELLED", f"cancelled status: {exp2['status']}")


def watch_in_pty(args, until, timeout=30):
    """Runs ctune on a pseudo-terminal until its output so far satisfies
    `until` (or `timeout` seconds passed), then Ctrl-C; (output, exit code)."""
    import pty
    import select
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(os.path.join(BIN, "ctune"), ["ctune", *args])
    chunks, deadline, sent, status = [], time.time() + timeout, False, None
    while True:
        if not sent and (time.time() >= deadline or
                         until(b"".join(chunks).decode(errors="replace"))):
            os.kill(pid, signal.SIGINT)
            sent = True
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                data = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif sent:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
                break
    if status is None:
        _, status = os.waitpid(pid, 0)
    os.close(fd)
    return b"".join(chunks).decode(errors="replace"), os.waitstatus_to_exitcode(status)


def run_json_lines(out):
    lines = [json.loads(l) for l in out.strip().split("\n") if l.strip()]
    check(lines and "dashboard" in lines[0], f"first line is the dashboard: {out[:200]}")
    return lines


def case_run(tmp):
    quick = os.path.join(EXAMPLES, "quick.json")
    code, out, err = ctune("--help")
    check(code == 0 and "Exit codes:" in out, "help")
    for line in ("0    ok", "2    usage", "3    server unreachable", "4    authentication",
                 "5    not found", "130  interrupted"):
        check(line in out, f"--help documents exit code: {line}")
    code, out, err = ctune("frobnicate")
    check(code == 2 and "unknown command 'frobnicate'" in err, f"unknown command: {code} {err}")
    code, out, err = ctune("run", os.path.join(tmp, "missing.json"), cwd=tmp)
    check(code == 2 and "cannot open config" in err and not os.path.exists(os.path.join(tmp, "ctune-results")),
          f"missing config: {code} {err}")
    # A ctune with no programs beside it finds them on PATH, or says where it looked.
    lone = os.path.join(tmp, "lone")
    os.mkdir(lone)
    shutil.copy(os.path.join(BIN, "ctune"), lone)
    exe = os.path.join(lone, "ctune")
    code, out, err = ctune("run", quick, cwd=tmp, exe=exe, env={"PATH": "/usr/bin:/bin"})
    check(code == 1 and "cannot find ctune-server next to" in err, f"no server: {code} {err}")
    # The human reporter, not a terminal: events, tables, best trial with test accuracy.
    # Real training still, but quick.json cut to 2 trials of one epoch (its
    # 4 trials run in the JSON run): what is checked here is the output.
    # It runs beside the JSON run (each its own server, worker and
    # database): their waits overlap.
    with open(quick) as f:
        small = json.load(f)
    small["num_samples"] = 2
    small["scheduler"]["max_t"] = 1
    small = write_config(tmp, "quick-small.json", small)
    human = subprocess.Popen([exe, "run", small, "--db", os.path.join(tmp, "second.db"), "--interval", "1"],
                             cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, PATH=BIN + ":/usr/bin:/bin"))
    procs.append(human)
    code, out, err = ctune("run", quick, "--json", "--cpus", "2", cwd=tmp, timeout=120)
    check(code == 0, f"run: {code} {err}")
    lines = run_json_lines(out)
    check(lines[0]["dashboard"].startswith("http://127.0.0.1:"), "dashboard url")
    # The login URL carries the admin token of the token file the server
    # created beside the database (mode 0600): --json never prints it, it
    # names the 0600 file that holds it.
    run_tokens = os.path.join(tmp, "ctune-results", "quick.db.tokens")
    check(os.stat(run_tokens).st_mode & 0o777 == 0o600, "quick.db.tokens is 0600")
    admin_token = read_tokens(run_tokens)["admin"]
    check(admin_token not in out, "--json output without the admin token")
    login_file = os.path.join(os.path.realpath(tmp), "ctune-results", "quick.db.login-url")
    check(lines[0] == {"dashboard": lines[0]["dashboard"], "login_url_file": login_file},
          f"dashboard line: {lines[0]}")
    check(os.stat(login_file).st_mode & 0o777 == 0o600, "quick.db.login-url is 0600")
    check(open(login_file).read() == lines[0]["dashboard"] + "?token=" + admin_token + "\n",
          f"login URL file: {open(login_file).read()}")
    states = [l for l in lines if "experiment" in l]
    check(states and states[-1]["experiment"]["status"] == "TERMINATED", "final state")
    check(states[-1]["resources"].get("cpu_total") == 2, f"resources: {states[-1]['resources']}")
    best = lines[-1]["best_trial"]
    check(set(best) >= {"id", "config", "last_result"} and "test_accuracy" in best["last_result"],
          f"best line: {lines[-1]}")
    db = os.path.join(tmp, "ctune-results", "quick.db")
    exps, trials, nres = db_check(db)
    check(exps == [(1, "quick", "TERMINATED")] and len(trials) == 4 and nres >= 4, f"db: {exps} {trials}")
    out, err = human.communicate(timeout=120)
    code = human.returncode
    check(code == 0 and out.startswith("Dashboard: http://127.0.0.1:"), f"human run: {code} {out[:300]} {err}")
    # Not a terminal: the address and the file, never the token.
    second_login = os.path.join(os.path.realpath(tmp), "second.db.login-url")
    check(out.split("\n")[0].endswith("/ (log in with the URL in %s)" % second_login)
          and "?token=" not in out, f"human run, not a terminal: {out[:300]}")
    # On a terminal the login URL itself (then Ctrl-C: nothing to wait for).
    tty_out, tty_code = watch_in_pty(["run", small, "--db", os.path.join(tmp, "third.db")],
                                     lambda o: "Database:" in o)
    third_admin = read_tokens(os.path.join(tmp, "third.db.tokens"))["admin"]
    check(tty_code == 130 and re.search(r"Dashboard: http://127\.0\.0\.1:\d+/\?token=" + third_admin,
                                        tty_out), f"run on a terminal: {tty_code} {tty_out[:300]}")
    check(not descendants(), f"processes left: {descendants()}")
    check("== Status ==" in out and "started with config" in out and "test accuracy: " in out,
          f"human output: {out}")
    check(not descendants(), f"processes left: {descendants()}")
    # A config the server rejects: a usage error, children stopped.
    bad = write_config(tmp, "bad.json", {"name": "bad", "num_samples": 0})
    code, out, err = ctune("run", bad, cwd=tmp, timeout=60)
    check(code == 2 and "num_samples" in err, f"bad run: {code} {err}")
    check(not descendants(), f"processes left: {descendants()}")


HIDE_TRIAL = r"""
import json, os
cfg = json.loads(os.environ["CTUNE_CONFIG"])
got = {}
for p in cfg["paths"].split(","):
    try:
        with open(p, "rb") as f:
            got[p] = len(f.read())
    except OSError as e:
        got[p] = e.strerror
with open(os.path.join(os.environ["CTUNE_CHECKPOINT_DIR"], "seen.json"), "w") as f:
    json.dump(got, f)
leaks = sum(1 for v in got.values() if isinstance(v, int) and v > 0)
print(json.dumps({"training_iteration": 1, "loss": 0.0, "leaks": leaks}), flush=True)
"""


def case_hide(tmp):
    """`ctune run`: its trial (run as the invoking user, as the worker) reads
    none of the database (every worker's secret), its -wal and -shm, the
    token file, the login URL file (the admin token), the server log and
    the worker's identity: hidden (ctune-worker --hide), read empty or not
    there. As user nobody when the test runs as root (a user namespace per
    trial), as the test's user otherwise."""
    res = os.path.join(tmp, "r")
    os.mkdir(res)
    base = os.path.join(res, "hide")
    paths = [base + ".db", base + ".db-wal", base + ".db-shm", base + ".db.tokens",
             base + ".db.login-url", base + ".server.log", base + ".work/identity"]
    script = os.path.join(tmp, "hide_trial.py")
    with open(script, "w") as f:
        f.write(HIDE_TRIAL)
    cfg = write_config(tmp, "hide.json", {
        "name": "hide", "metric": "loss", "mode": "min", "num_samples": 1,
        "param_space": {"paths": ",".join(paths)}, "scheduler": {"type": "fifo"},
        "resources_per_trial": {"cpu": 1, "gpu": 0},
        "trainable": {"type": "command", "argv": ["/usr/bin/python3", script]}})
    cmd = [os.path.join(BIN, "ctune"), "run", cfg, "--db", base + ".db", "--json"]
    run = os.path.join(tmp, "run")  # the worker's CPU claims, not /tmp/ctune-<uid>
    os.mkdir(run)
    if os.geteuid() == 0:
        os.chmod(tmp, 0o755)
        os.chown(res, 65534, 65534)
        os.chown(run, 65534, 65534)
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + cmd
    e = {k: v for k, v in os.environ.items() if not k.startswith("CTUNE_")}
    e["CTUNE_RUN_DIR"] = run
    r = subprocess.run(cmd, capture_output=True, text=True, env=e, cwd=tmp, timeout=120)
    check(r.returncode == 0, f"run: {r.returncode} {r.stderr}")
    best = run_json_lines(r.stdout)[-1]["best_trial"]
    with open(os.path.join(base + ".work", "trials", str(best["id"]), "seen.json")) as f:
        seen = json.load(f)
    print("the trial saw:", seen)
    check(best["last_result"]["leaks"] == 0, f"the trial read: {seen}")
    # They were there to read (the test means something).
    for p in (base + ".db", base + ".db.tokens", base + ".db.login-url", base + ".server.log"):
        check(os.path.getsize(p) > 0, f"{p} is empty")
    check("token=" in open(base + ".db.login-url").read(), "the login URL file has the admin token")
    check(not descendants(), f"processes left: {descendants()}")


def start_run(tmp, cfg, *extra):
    p = subprocess.Popen([os.path.join(BIN, "ctune"), "run", cfg, "--json", "--interval", "0.5", *extra],
                         cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(p)
    return p


def wait_results(p, want, timeout=60):
    """Reads JSON states until `want` results arrived in total."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            fail(f"ctune run ended early: {p.wait()} {p.stderr.read()}")
        doc = json.loads(line)
        its = sum(t["iteration"] for t in doc.get("trials", []))
        if its >= want:
            return doc
    fail("no results in time")


def case_sigint(tmp):
    """Ctrl-C interrupts as in Ray Tune: trials stop, no process is left, the
    database is consistent, and --resume completes the experiment with every
    iteration stored once."""
    gate = os.path.join(tmp, "go")
    cfg = slow_config(tmp, "slow", iters=25, sleep=0.01, samples=3, gate=gate, hold=2)
    p = start_run(tmp, cfg)
    wait_results(p, 3)
    t0 = time.time()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    took = time.time() - t0
    check(p.returncode == 130, f"exit code {p.returncode}: {err}")
    check("interrupted" in err and "--resume" in err, f"message: {err}")
    check(not descendants(), f"processes left after Ctrl-C: {descendants()}")
    db = os.path.join(tmp, "ctune-results", "slow.db")
    exps, trials, nres_before = db_check(db)
    check(exps == [(1, "slow", "RUNNING")], f"experiment left unfinished: {exps}")
    check(0 < nres_before < 75, f"results kept: {nres_before}")
    print(f"SIGINT to exit: {took:.1f} s, {nres_before} results kept")

    open(gate, "w").close()
    code, out, err = ctune("run", cfg, "--resume", "--json", cwd=tmp, timeout=120)
    check(code == 0, f"resume after Ctrl-C: {code} {err}")
    exps, trials, nres = db_check(db)
    check(exps == [(1, "slow", "TERMINATED")], f"not resubmitted, finished: {exps}")
    check(len(trials) == 3 and all(t[1] == "TERMINATED" for t in trials), f"trials: {trials}")
    check(nres == 75, f"every iteration stored once: {nres} results")
    check(not descendants(), f"processes left: {descendants()}")


def case_resume(tmp):
    gate = os.path.join(tmp, "go")
    cfg = slow_config(tmp, "resumable", iters=30, sleep=0.01, samples=2, gate=gate, hold=2)
    code, out, err = ctune("run", cfg, "--resume", cwd=tmp, timeout=30)
    check(code == 2 and "nothing to resume" in err, f"resume without db: {code} {err}")
    p = start_run(tmp, cfg)
    wait_results(p, 4)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    check(p.returncode == 128 + signal.SIGTERM, f"exit code {p.returncode}: {err}")
    check("--resume" in err, f"message: {err}")
    check(not descendants(), f"processes left: {descendants()}")
    db = os.path.join(tmp, "ctune-results", "resumable.db")
    # A new database: the server served the socket ctune made (the worker
    # started meanwhile); a resumed one binds its own, after its load.
    slog = os.path.join(tmp, "ctune-results", "resumable.server.log")
    adopted = "serving on the listening socket of --listen-fd"
    check(open(slog).read().count(adopted) == 1, "a new database: the socket ctune made")
    exps, trials, nres_before = db_check(db)
    check(exps == [(1, "resumable", "RUNNING")], f"unfinished: {exps}")
    check(0 < nres_before < 60, f"results before: {nres_before}")

    open(gate, "w").close()
    code, out, err = ctune("run", cfg, "--resume", "--json", cwd=tmp, timeout=120)
    check(code == 0, f"resume: {code} {err}")
    lines = run_json_lines(out)
    best = lines[-1]["best_trial"]
    check(best["last_result"]["training_iteration"] == 30, f"best ran to the end: {best}")
    exps, trials, nres = db_check(db)
    check(exps == [(1, "resumable", "TERMINATED")], f"not resubmitted, finished: {exps}")
    check(len(trials) == 2 and all(t[1] == "TERMINATED" for t in trials), f"trials: {trials}")
    check(nres == 60, f"every iteration stored once: {nres} results")
    check(open(slog).read().count(adopted) == 1, "resumed: the server bound its own socket")
    check(not descendants(), f"processes left: {descendants()}")

    # --db with no server on it: each reading command starts one of its own
    # on the database and stops it on the way out (its log in TMPDIR, removed),
    # read-only: the database file and the login URL `run` left stay as they are.
    own = {"TMPDIR": tmp}
    login = os.path.realpath(db) + ".login-url"
    kept = [open(p, "rb").read() for p in (db, login)]
    code, out, err = ctune("status", "--db", db, cwd=tmp, env=own)
    check(code == 0 and "resumable" in out and "TERMINATED" in out, f"status --db: {code} {out} {err}")
    code, out, err = ctune("best", "1", "--db", db, cwd=tmp, env=own)
    check(code == 0 and "Best trial: resumable_0000" in out, f"best --db: {code} {out} {err}")
    code, out, err = ctune("export", "1", "--db", db, "--format", "csv", cwd=tmp, env=own)
    check(code == 0 and len(out.splitlines()) == 3, f"export --db: {code} {out} {err}")
    check(not descendants(), f"--db left its server: {descendants()}")
    check([open(p, "rb").read() for p in (db, login)] == kept, "--db changed the database or its login URL")
    check(not [f for f in os.listdir(tmp) if f.startswith("ctune-db-server-")], "its log is removed")
    code, out, err = ctune("trials", "1", "--db", os.path.join(tmp, "none.db"), cwd=tmp)
    check(code == 2 and "none.db: No such file" in err, f"--db missing: {code} {err}")
    # A server on it: that one answers (a second could not lock the file).
    srv, url = start_server(tmp, db)
    code, out, err = ctune("trials", "1", "--db", db, "--json", cwd=tmp, env={"CTUNE_SERVER": url})
    check(code == 0 and len(json.loads(out)) == 2, f"trials --db, served: {code} {out} {err}")
    code, out, err = ctune("status", "--db", db, cwd=tmp)  # its address: DB.login-url
    check(code == 0 and "resumable" in out, f"status --db, served, no URL given: {code} {err}")
    check(descendants() == [srv.pid], f"only the test's server runs: {descendants()}")


def main():
    if not BIN or not all(os.access(os.path.join(BIN, b), os.X_OK)
                          for b in ("ctune", "ctune-server", "ctune-worker", "ctune-train")):
        print(f"SKIP: ctune, ctune-server, ctune-worker and ctune-train are needed in {BIN!r}")
        return 77
    if CASE in ("remote", "run") and not os.path.isdir(DATA):
        print(f"SKIP: {DATA} is missing")
        return 77
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    tmp = tempfile.mkdtemp(prefix=f"ctune-cli-{CASE}-")
    ok = False
    try:
        {"remote": case_remote, "run": case_run, "sigint": case_sigint, "resume": case_resume,
         "hide": case_hide}[CASE](tmp)
        ok = True
    finally:
        cleanup()
        if not ok:
            for log in ("server.log", "worker.log"):
                path = os.path.join(tmp, log)
                if os.path.exists(path):
                    print(f"--- {log} (tail)")
                    print(open(path, errors="replace").read()[-3000:])
            res = os.path.join(tmp, "ctune-results")
            if os.path.isdir(res):
                for name in sorted(os.listdir(res)):
                    if name.endswith(".log"):
                        print(f"--- {name} (tail)")
                        print(open(os.path.join(res, name), errors="replace").read()[-3000:])
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"ok: {CASE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
