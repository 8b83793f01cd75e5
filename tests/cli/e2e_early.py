#!/usr/bin/env python3
"""The CLI catches mistakes early. End to end against the
real ctune, ctune-server, ctune-worker. Usage: e2e_early.py BIN_DIR CASE, CASE
one of sample, remote, fit, failfast, allerror, sigint2, torch_metric, pareto. Reuses e2e_cli.py's process
bookkeeping (a child subreaper; every leftover process is killed)."""
import ctypes
import csv
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_cli as base  # noqa: E402
from e2e_cli import check, ctune, start_server, start_worker, write_config, descendants  # noqa: E402

CASE = sys.argv[2] if len(sys.argv) > 2 else "sample"

TRIAL = r'''
import json, os, signal, sys, time
cfg = json.loads(os.environ["CTUNE_CONFIG"])
if cfg.get("ignore_term"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
for i in range(1, int(cfg["iters"]) + 1):
    time.sleep(float(cfg["sleep"]))
    r = {"training_iteration": i, "loss": cfg["x"] / i}
    if cfg.get("cost"):  # a second objective against the first
        r["cost"] = 1 / cfg["x"]
    print(json.dumps(r), flush=True)
    if cfg["x"] == cfg.get("fail_at", -1):
        print("exploding on purpose", file=sys.stderr, flush=True)
        sys.exit(3)
'''


def trial_config(tmp, name, x, iters=3, sleep=0.05, **extra):
    script = os.path.join(tmp, "trial.py")
    with open(script, "w") as f:
        f.write(TRIAL)
    ps = {"x": {"grid_search": x}, "iters": iters, "sleep": sleep}
    ps.update(extra.pop("params", {}))
    cfg = {"name": name, "metric": "loss", "mode": "min", "seed": 5, "param_space": ps,
           "scheduler": {"type": "fifo"}, "resources_per_trial": {"cpu": 1, "gpu": 0},
           "trainable": {"type": "command", "argv": ["/usr/bin/python3", script]}}
    cfg.update(extra)
    return write_config(tmp, name + ".json", cfg)


def case_sample(tmp):
    """`ctune sample` needs no server and says what the server's dry run says."""
    quick = os.path.join(base.EXAMPLES, "quick.json")
    _, url = start_server(tmp, os.path.join(tmp, "s.db"))
    A = ["--server", url, "--db", os.path.join(tmp, "s.db")]
    for args in ([], ["--json"]):
        c1, o1, e1 = ctune("submit", quick, "--dry-run", *args, *A)
        c2, o2, e2 = ctune("sample", quick, *args, env={"CTUNE_SERVER": "http://127.0.0.1:9"})
        check(c1 == 0 and (c1, o1, e1) == (c2, o2, e2), f"sample {args} differs from the server's "
              f"dry run:\n{o1}{e1}\n---\n{o2}{e2}")
    check("would create 4 trials" in o1 or '"num_trials":4' in o1.replace(" ", ""), o1)
    bad = write_config(tmp, "bad.json", {"name": "x", "num_samples": -1,
                                         "trainable": {"type": "command", "argv": ["true"]}})
    typo = write_config(tmp, "typo.json", {
        "name": "t", "param_space": {"lr": 0.1},
        "trainable": {"type": "command", "argv": ["python3", "train.py", "--lr", "{lrr}"]}})
    for cfg in (bad, typo):
        c1, o1, e1 = ctune("submit", cfg, "--dry-run", *A)
        c2, o2, e2 = ctune("sample", cfg)
        check(c1 == 1 and (c1, o1, e1) == (c2, o2, e2), f"errors differ: {c1} {e1!r} / {c2} {e2!r}")
    check("trainable.argv[3]" in e2 and "{lrr}" in e2 and "lr, trial_id" in e2, f"placeholder: {e2}")
    # No seed: the server's random one; the sample still lists every trial.
    noseed = write_config(tmp, "noseed.json", {"name": "n", "num_samples": 3,
                                               "param_space": {"a": {"type": "uniform", "lower": 0, "upper": 1}},
                                               "trainable": {"type": "command", "argv": ["true"]}})
    c, o, e = ctune("sample", noseed, "--json")
    doc = json.loads(o)
    check(c == 0 and doc["num_trials"] == 3 and len(doc["trials"]) == 3 and doc["seed"] >= 0, o)
    # The conditional example of `ctune sample --help`: each trial holds only
    # its chosen option's parameters, as the space nests them.
    c, o, e = ctune("sample", os.path.join(base.EXAMPLES, "conditional.json"), "--json")
    trials = json.loads(o)["trials"] if c == 0 else []
    keys = {"sgd": {"name", "momentum", "nesterov"}, "adam": {"name", "beta1", "beta2"}}
    check(len(trials) == 6 and all(set(t) == {"lr", "optimizer"} and
                                   set(t["optimizer"]) == keys[t["optimizer"]["name"]]
                                   for t in trials) and
          {t["optimizer"]["name"] for t in trials} == {"sgd", "adam"}, f"conditional: {c} {o} {e}")


def case_remote(tmp):
    """best --metric without --mode; trial names for logs; ids in `trials`."""
    db = os.path.join(tmp, "r.db")
    _, url = start_server(tmp, db)
    A = ["--server", url, "--db", db]
    cfg = trial_config(tmp, "names", [1.0, 2.0], params={"acc": 1})
    code, out, err = ctune("submit", cfg, *A)
    check(code == 0, f"submit: {err}")
    start_worker(tmp, url, db + ".tokens")
    code, out, err = ctune("watch", "1", "--interval", "1", *A, timeout=60)
    check(code == 0, f"watch: {code} {err}")
    code, out, err = ctune("best", "1", "--metric", "accuracy", *A)
    check(code == 2 and "--metric accuracy needs --mode" in err and "loss (min)" in err,
          f"best without mode: {code} {err}")
    code, out, err = ctune("best", "1", "--metric", "loss", "--json", *A)
    check(code == 0 and json.loads(out)["best_trial"]["name"] == "names_00000", f"best loss: {out} {err}")
    code, out, err = ctune("best", "1", "--metric", "loss", "--mode", "max", "--json", *A)
    check(code == 0 and json.loads(out)["best_trial"]["name"] == "names_00001", f"best max: {out} {err}")
    code, out, err = ctune("trials", "1", "--width", "200", *A)
    check(code == 0 and re.search(r"^\|\s+id \| Trial name", out, re.M), f"no id column: {out}")
    rows = {m.group(2): int(m.group(1)) for m in re.finditer(r"^\|\s+(\d+) \| (names_\d+)", out, re.M)}
    check(rows == {"names_00000": 1, "names_00001": 2}, f"ids: {rows} {out}")
    c1, o1, e1 = ctune("logs", "2", *A)
    c2, o2, e2 = ctune("logs", "names_00001", *A)
    check(c1 == 0 and o1 == o2 and "training_iteration" in o2, f"logs by name: {c2} {o2} {e2}")
    code, out, err = ctune("logs", "names_00009", *A)
    check(code == 5 and "no trial named 'names_00009'" in err and "ctune trials" in err, f"unknown name: {err}")
    code, out, err = ctune("logs", "bad/name", *A)
    check(code == 2 and "trial id" in err, f"bad name: {code} {err}")
    # The same config again: the newest trial of that name wins, said on stderr.
    code, out, err = ctune("submit", cfg, *A)
    code, out, err = ctune("watch", "2", "--interval", "1", *A, timeout=60)
    code, out, err = ctune("logs", "names_00001", *A)
    check(code == 0 and "using the newest, id 4" in err and "older: 2" in err, f"two of a name: {err}")


def case_fit(tmp):
    """`ctune run` stops at once when its worker can never fit a trial."""
    for extra, args, want in (
            ({"resources_per_trial": {"cpu": 1, "gpu": 0.5}}, ["--gpus", "0"], "needs gpu 0.5"),
            ({"resources_per_trial": {"cpu": 64}}, ["--cpus", "2"], "needs cpu 64"),
            ({"resources_per_trial": {"cpu": 1, "memory_mb": 1 << 30}}, [], "needs memory_mb 1073741824")):
        cfg = trial_config(tmp, "fit", [1.0], **extra)
        t0 = time.time()
        code, out, err = ctune("run", cfg, "--db", os.path.join(tmp, "fit%d.db" % len(args)), *args,
                               cwd=tmp, timeout=60)
        took = time.time() - t0
        check(code == 2 and want in err and "can ever run here" in err, f"{want}: {code} {err}")
        check(took < 20, f"took {took:.1f} s")
        check(not descendants(), f"processes left: {descendants()}")
        print(f"{want}: refused in {took:.1f} s")
    # Nothing was submitted.
    db = os.path.join(tmp, "fit2.db")
    import sqlite3
    con = sqlite3.connect(db)
    check(con.execute("SELECT count(*) FROM experiments").fetchone()[0] == 0, "nothing stored")
    con.close()


def case_failfast(tmp):
    """fail_fast through `ctune run`: the run exits 1 and says why; the
    reason survives a restart of the server (`ctune status`)."""
    cfg = trial_config(tmp, "ff", [1.0, 2.0, 3.0], fail_fast=True, params={"fail_at": 2.0})
    code, out, err = ctune("run", cfg, "--cpus", "1", cwd=tmp, timeout=90)
    check(code == 1, f"exit {code}: {err}")
    check("experiment 1 was cancelled: fail_fast: trial 2 (ff_00001) failed:" in err, f"stderr: {err}")
    check("Experiment 1 CANCELLED: fail_fast: trial 2 (ff_00001)" in out, f"stdout: {out[-600:]}")
    check("Ended: fail_fast: trial 2" in out, "the reporter shows the reason")
    check(not descendants(), f"processes left: {descendants()}")
    db = os.path.join(tmp, "ctune-results", "ff.db")
    _, url = start_server(tmp, db)
    code, out, err = ctune("status", "--server", url, "--db", db)
    check(code == 0 and re.search(r"^1\s+ff\s+CANCELLED", out, re.M) and
          "ended: fail_fast: trial 2 (ff_00001) failed" in out, f"status: {out} {err}")
    code, out, err = ctune("trials", "1", "--json", "--server", url, "--db", db)
    st = sorted(t["status"] for t in json.loads(out))
    # trials are made at lease time: the third was never made
    check(st == ["ERROR", "TERMINATED"], f"trials: {st}")


def case_allerror(tmp):
    """Every trial ERROR: `ctune run` exits 6 and says so, shows the
    experiment FAILED and names no best trial, neither at the end nor in
    its status block."""
    cfg = trial_config(tmp, "ae", [2.0], params={"fail_at": 2.0})
    code, out, err = ctune("run", cfg, "--cpus", "1", cwd=tmp, timeout=90)
    check(code == 6, f"exit {code}: {err}")
    check("experiment 1 failed: all 1 of its trials ended in ERROR" in err, f"stderr: {err}")
    check("Experiment 1 FAILED." in out and "Best trial" not in out, f"stdout: {out[-800:]}")
    check("'ae': FAILED (every trial ended in ERROR)" in out, "the reporter shows FAILED")
    check("Current best trial" not in out, f"an ERROR trial named best: {out[-800:]}")
    check(not descendants(), f"processes left: {descendants()}")


def case_pareto(tmp):
    """Several objectives: `ctune run` ends with the Pareto front as a table
    (no single best), `ctune best` prints it (--json: the server's answer),
    and `ctune best --metric cost` takes cost's own mode."""
    cfg = trial_config(tmp, "po", [1.0, 2.0, 4.0], metric=["loss", "cost"], mode=["min", "min"],
                       params={"cost": 1})
    code, out, err = ctune("run", cfg, "--cpus", "2", cwd=tmp, timeout=90)
    check(code == 0, f"exit {code}: {err} {out[-800:]}")
    head = "Pareto front of experiment 1 (scope last): 3 trials, by loss (min), cost (min)"
    check(head in out and "Best trial" not in out, f"stdout: {out[-1200:]}")
    db = os.path.join(tmp, "ctune-results", "po.db")
    _, url = start_server(tmp, db)
    A = ["--server", url, "--db", db]
    code, out, err = ctune("best", "1", *A)
    rows = [ln.split() for ln in out.splitlines()[2:5]]
    check(code == 0 and out.startswith(head), f"best: {code} {out} {err}")
    # Then the hypervolume, as /pareto answers it (printed like the values).
    last = json.loads(ctune("best", "1", "--json", *A)[1])
    hv_line = out.splitlines()[5]
    check(hv_line.startswith("hypervolume %.6g from the reference point (" % last["hypervolume"])
          and hv_line.endswith("derived: the front's nadir plus 10% of its range"), f"hv: {hv_line}")
    check(sorted(r[1] for r in rows) == ["0.333333", "0.666667", "1.33333"] and
          sorted(r[2] for r in rows) == ["0.25", "0.5", "1"], f"rows: {rows}")
    code, out, err = ctune("best", "1", "--json", "--scope", "all", *A)
    front = json.loads(out)
    check(code == 0 and front["scope"] == "all" and len(front["trials"]) == 3, f"json: {out}")
    code, out, err = ctune("best", "1", "--metric", "cost", *A)
    check(code == 0 and "with cost=0.25" in out, f"best --metric cost: {code} {out} {err}")
    # export --pareto: the same front as CSV rows and as the server's JSON.
    code, out, err = ctune("export", "1", "--pareto", "--scope", "all", *A)
    rows = list(csv.reader(io.StringIO(out)))
    check(code == 0 and rows[0][:4] == ["trial_id", "status", "loss", "cost"], f"csv: {out} {err}")
    want = {t["trial_id"]: (t["values"]["loss"], t["values"]["cost"]) for t in front["trials"]}
    check({int(r[0]): (float(r[2]), float(r[3])) for r in rows[1:]} == want, f"csv rows: {rows}")
    out_json = os.path.join(tmp, "front.json")
    code, out, err = ctune("export", "1", "--pareto", "--scope", "all", "--format", "json",
                           "--output", out_json, *A)
    with open(out_json) as f:
        check(code == 0 and json.load(f) == front, f"export json: {code} {err}")
    code, out, err = ctune("export", "1", "--scope", "all", *A)
    check(code != 0 and "--scope goes with --pareto" in err, f"--scope alone: {code} {err}")


TORCH_TRIAL = r'''
import pathlib, tempfile, time
import torch, torch.nn as nn
import ctune
ctune.on_stop()
model = nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(64, 8), torch.randint(0, 2, (64,))
d = pathlib.Path(tempfile.mkdtemp())
for epoch in range(100):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    torch.save(model.state_dict(), d / "model.pt")
    ctune.report(val_loss=float(loss), checkpoint=d)
    time.sleep(0.05)
'''


def case_torch_metric(tmp):
    """The user trial's hang, through `ctune run`: a PyTorch script that
    checkpoints with `ctune.report(val_loss=..., checkpoint=d)` while the
    experiment's metric is val_accuracy. The trial ends ERROR
    missing_metric and `ctune run` exits 6 within seconds (it used to run
    for ever, its worker PUTting a checkpoint the server refused)."""
    py = "/usr/bin/python3"
    if subprocess.run([py, "-c", "import torch"], capture_output=True).returncode:
        print("SKIP: no torch for " + py)
        sys.exit(77)
    script = os.path.join(tmp, "train.py")
    with open(script, "w") as f:
        f.write(TORCH_TRIAL)
    repo = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    cfg = write_config(tmp, "tm.json", {
        "name": "tm", "metric": "val_accuracy", "mode": "max", "num_samples": 1,
        "param_space": {}, "scheduler": {"type": "fifo"},
        "resources_per_trial": {"cpu": 1, "gpu": 0},
        "trainable": {"type": "command", "argv": [py, script],
                      "env": {"PYTHONPATH": os.path.join(repo, "python")}}})
    t0 = time.monotonic()
    code, out, err = ctune("run", cfg, "--cpus", "1", cwd=tmp, timeout=60)
    took = time.monotonic() - t0
    print("ctune run: exit %d in %.1f s" % (code, took))
    check(code == 6, f"exit {code}: {err[-1500:]}")
    check("missing_metric: result has no metric 'val_accuracy'" in out, f"stdout: {out[-1500:]}")
    check(took < 45, f"ctune run took {took:.1f} s")
    check(not descendants(), f"processes left: {descendants()}")


def case_sigint2(tmp):
    """A second Ctrl-C stops `ctune run` at once, even while a trial ignores
    SIGTERM (the graceful stop would wait for the worker's 10 s grace)."""
    cfg = trial_config(tmp, "stubborn", [1.0], iters=400, sleep=0.1, params={"ignore_term": True})
    p = subprocess.Popen([os.path.join(base.BIN, "ctune"), "run", cfg, "--json", "--interval", "0.5"],
                         cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base.procs.append(p)
    base.wait_results(p, 2)
    p.send_signal(signal.SIGINT)
    time.sleep(1.0)
    t0 = time.time()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    took = time.time() - t0
    check(p.returncode == 130, f"exit {p.returncode}: {err}")
    check("Ctrl-C again to stop at once" in err and "stopped at once" in err, f"messages: {err}")
    check(took < 4, f"second Ctrl-C took {took:.1f} s")
    # The worker's trial supervisors learn of its death by their parent-death
    # signal and kill their trials: allow them a moment.
    deadline = time.time() + 3
    while descendants() and time.time() < deadline:
        time.sleep(0.05)
        base.reap()
    left = descendants()
    check(not left, "processes left: " + ", ".join(
        open(f"/proc/{p}/cmdline").read().replace("\0", " ") for p in left))
    print(f"second Ctrl-C to exit: {took:.2f} s")
    # `ctune watch`: the second Ctrl-C exits even while a request hangs: a
    # server that accepts and never answers (SIGSTOP). Stopped before the
    # watch starts, so its first fetch is the request that hangs: a live
    # event stream means a watch sends no request while nothing changes,
    # so a server stopped later may never see one.
    srv, url = start_server(tmp, os.path.join(tmp, "w.db"))
    code, out, err = ctune("submit", cfg, "--server", url, "--db", os.path.join(tmp, "w.db"))
    srv.send_signal(signal.SIGSTOP)
    w = subprocess.Popen([os.path.join(base.BIN, "ctune"), "watch", "1", "--server", url,
                          "--db", os.path.join(tmp, "w.db"), "--interval", "1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base.procs.append(w)
    # wait until the request sits unread in the stopped server's socket
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    deadline = time.time() + 10
    while not request_pending(port) and time.time() < deadline:
        time.sleep(0.05)
    check(request_pending(port), "the watch sent no request to the stopped server in 10 s")
    w.send_signal(signal.SIGINT)
    time.sleep(0.3)
    t0 = time.time()
    w.send_signal(signal.SIGINT)
    out, err = w.communicate(timeout=30)
    took = time.time() - t0
    srv.send_signal(signal.SIGCONT)
    check(w.returncode == 130 and took < 2 and "stopped at once" in err, f"watch: {w.returncode} {took:.1f} {err}")


def request_pending(port):
    """True when a connection to 127.0.0.1:port holds bytes the server has
    not read (/proc/net/tcp: state 01 ESTABLISHED, rx_queue > 0)."""
    want = "0100007F:%04X" % port
    try:
        with open("/proc/net/tcp") as f:
            rows = f.read().splitlines()[1:]
    except OSError:
        return False
    for row in rows:
        cells = row.split()
        if cells[1] == want and cells[3] == "01" and int(cells[4].split(":")[1], 16) > 0:
            return True
    return False


def main():
    if not base.BIN or not all(os.access(os.path.join(base.BIN, b), os.X_OK)
                               for b in ("ctune", "ctune-server", "ctune-worker")):
        print(f"SKIP: ctune, ctune-server and ctune-worker are needed in {base.BIN!r}")
        return 77
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(base.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    tmp = tempfile.mkdtemp(prefix=f"ctune-early-{CASE}-")
    ok = False
    try:
        {"sample": case_sample, "remote": case_remote, "fit": case_fit, "failfast": case_failfast,
         "allerror": case_allerror, "sigint2": case_sigint2,
         "torch_metric": case_torch_metric, "pareto": case_pareto}[CASE](tmp)
        ok = True
    finally:
        base.cleanup()
        if not ok:
            for root, _, files in os.walk(tmp):
                for name in files:
                    if name.endswith(".log"):
                        print(f"--- {name} (tail)")
                        print(open(os.path.join(root, name), errors="replace").read()[-2500:])
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"ok: {CASE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
