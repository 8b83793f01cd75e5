#!/usr/bin/env python3
"""`ctune export EXP --format tensorboard --output DIR`, read back by
TensorBoard's own reader (tb_read.py in the pinned venv
~/.cache/ctune/tensorboard-2.21.0 made by scripts/install-deps --test; the test
FAILS when it is missing). A real ctune-server (--no-auth) and ctune-worker
run an experiment of three command trials (one fails); the export must hold,
per trial, every numeric metric of every result the API returns (same steps,
same values as float32, wall time = the result's timestamp), the trial's
config as the HParams session start, its status as the session end, and the
experiment's HParams summary (every config key, every metric).

Usage: test_export_tensorboard.py BIN_DIR (or CTUNE_BIN_DIR)."""
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

BIN = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.environ.get("CTUNE_BIN_DIR", "")
HERE = os.path.dirname(os.path.abspath(__file__))
VENV_PY = os.path.expanduser("~/.cache/ctune/tensorboard-2.21.0/bin/python")
READER = os.path.join(HERE, "tb_read.py")
procs = []

TRIAL = r'''
import json, os, sys
cfg = json.loads(os.environ["CTUNE_CONFIG"])
n = 2 if cfg["opt"] == "bad" else 4
for i in range(1, n + 1):
    print(json.dumps({"training_iteration": i, "loss": cfg["x"] / i, "acc": i / 10.0 + 1e-7,
                      "grad": {"norm": 0.5 * i}, "phase": "train", "big": 123456789.125}),
          flush=True)
if cfg["opt"] == "bad":
    print("failing on purpose", file=sys.stderr)
    sys.exit(3)
'''


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def flatten(obj, prefix=""):
    out = {}
    for k, v in obj.items():
        name = f"{prefix}/{k}" if prefix else k
        if isinstance(v, dict):
            out.update(flatten(v, name))
        else:
            out[name] = v
    return out


def api(url, path):
    with urllib.request.urlopen(url + path, timeout=10) as r:
        return json.load(r)


def start_server(tmp):
    log = open(os.path.join(tmp, "server.log"), "ab")
    p = subprocess.Popen([os.path.join(BIN, "ctune-server"), "--db", os.path.join(tmp, "t.db"),
                          "--port", "0", "--no-auth", "--heartbeat-interval", "1"],
                         stdout=subprocess.PIPE, stderr=log)
    procs.append(p)
    deadline = time.time() + 20
    while time.time() < deadline:
        line = p.stdout.readline().decode()
        m = re.match(r"listening on (http://\S+)", line)
        if m:
            return m.group(1)
        if not line and p.poll() is not None:
            break
    raise AssertionError("ctune-server did not start")


def ctune(*args):
    env = dict(os.environ)
    env.pop("CTUNE_SERVER", None)
    env.pop("CTUNE_TOKEN", None)
    r = subprocess.run([os.path.join(BIN, "ctune"), *args], capture_output=True, text=True,
                       env=env, timeout=60)
    return r.returncode, r.stdout, r.stderr


def read_tb(logdir):
    r = subprocess.run([VENV_PY, READER, logdir, "--hparams-api"], capture_output=True,
                       text=True, timeout=120)
    check(r.returncode == 0, f"TensorBoard's reader failed on {logdir}:\n{r.stderr[-3000:]}")
    doc = json.loads(r.stdout)
    return doc["runs"], doc["hparams_api"]


def run_test(tmp):
    url = start_server(tmp)
    worker = subprocess.Popen(
        [os.path.join(BIN, "ctune-worker"), "--server", url, "--cpus", "1", "--gpus", "0",
         "--work-dir", os.path.join(tmp, "work"), "--poll-ms", "100"],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "worker.log"), "ab"))
    procs.append(worker)
    script = os.path.join(tmp, "trial.py")
    with open(script, "w") as f:
        f.write(TRIAL)
    cfg_path = os.path.join(tmp, "exp.json")
    with open(cfg_path, "w") as f:
        json.dump({
            "name": "tb-export", "metric": "loss", "mode": "min", "num_samples": 1, "seed": 5,
            "param_space": {"x": {"type": "uniform", "lower": 1, "upper": 2},
                            "opt": {"grid_search": ["sgd", "adam", "bad"]},
                            "deep": {"layers": 2, "bn": True}},
            "scheduler": {"type": "fifo"},
            "resources_per_trial": {"cpu": 1, "gpu": 0},
            "trainable": {"type": "command", "argv": ["/usr/bin/python3", script]}}, f)
    A = ["--server", url]
    code, out, err = ctune("submit", cfg_path, "--json", *A)
    check(code == 0, f"submit: {code} {out} {err}")
    exp_id = json.loads(out)["id"]
    deadline = time.time() + 60
    while api(url, f"/api/v1/experiments/{exp_id}")["status"] == "RUNNING":
        check(time.time() < deadline, "the experiment did not end in 60 s")
        check(worker.poll() is None, f"ctune-worker exited ({worker.returncode})")
        time.sleep(0.2)
    trials = api(url, f"/api/v1/experiments/{exp_id}/trials")["trials"]
    results = api(url, f"/api/v1/experiments/{exp_id}/results?since=0&limit=10000")["results"]
    check(len(trials) == 3, f"3 trials: {trials}")
    check(sorted(t["status"] for t in trials) == ["ERROR", "TERMINATED", "TERMINATED"],
          f"statuses: {[t['status'] for t in trials]}")
    check(len(results) == 10, f"10 results: {len(results)}")

    # usage errors: no folder, a file as the folder, an unknown format
    code, _, err = ctune("export", str(exp_id), "--format", "tensorboard", *A)
    check(code == 2 and "--output DIR" in err, f"no --output: {code} {err}")
    afile = os.path.join(tmp, "afile")
    open(afile, "w").close()
    code, _, err = ctune("export", str(exp_id), "--format", "tensorboard", "--output", afile, *A)
    check(code == 2 and "is a file" in err, f"--output FILE: {code} {err}")
    code, _, err = ctune("export", str(exp_id), "--format", "tb", *A)
    check(code == 2 and "csv, json or tensorboard" in err, f"bad format: {code} {err}")

    logdir = os.path.join(tmp, "tb", "exp")  # parents are created
    code, out, err = ctune("export", str(exp_id), "--format", "tensorboard", "--output", logdir, *A)
    check(code == 0, f"export: {code} {out} {err}")
    check("tensorboard --logdir " + logdir in out, f"export says how to view it: {out}")
    runs, tab = read_tb(logdir)
    check(set(runs) == {"."} | {t["name"] for t in trials},
          f"one run per trial plus the experiment: {sorted(runs)}")

    # every numeric value of every result, at step = training_iteration
    all_tags = set()
    for t in trials:
        run = runs[t["name"]]
        check(run["file_version"] == ["brain.Event:2"], f"file_version: {run['file_version']}")
        want = {}
        for r in results:
            if r["trial_id"] != t["id"]:
                continue
            res = r["result"]
            for k, v in flatten(res).items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    want.setdefault(k, []).append(
                        [res["training_iteration"], f32(float(v)), float(res["timestamp"])])
        check(want, f"{t['name']} has results")
        all_tags |= set(want)
        check({"loss", "acc", "big", "training_iteration"} <= set(want), f"tags: {sorted(want)}")
        got = run["scalars"]
        check(set(got) == set(want), f"{t['name']}: tags {sorted(got)} != {sorted(want)}")
        for tag, pts in want.items():
            check(got[tag] == pts, f"{t['name']} {tag}: {got[tag]} != {pts}")
        # HParams: the config, typed, and the status
        start = run["session_start"]
        check(start is not None, f"{t['name']}: no session start info")
        cfg = flatten(t["config"])
        check(start["values"] == cfg, f"{t['name']}: hparams {start['values']} != {cfg}")
        check(isinstance(start["values"]["deep/bn"], bool), "bools stay bools")
        end = run["session_end"]
        status = 2 if t["status"] == "ERROR" else 1  # STATUS_FAILURE / STATUS_SUCCESS
        check(end is not None and end["status"] == status, f"{t['name']}: end {end} vs {t['status']}")

    # the experiment: every config key with its domain, every metric (loss first)
    ex = runs["."]["hparams_experiment"]
    check(ex is not None and ex.get("name") == "tb-export", f"experiment summary: {ex}")
    infos = {h["name"]: h for h in ex["hparam_infos"]}
    check(set(infos) == {"x", "opt", "deep/layers", "deep/bn"}, f"hparam_infos: {sorted(infos)}")
    check(infos["x"]["type"] == "DATA_TYPE_FLOAT64", f"x: {infos['x']}")
    xs = [t["config"]["x"] for t in trials]
    check(infos["x"]["domain_interval"] == {"min_value": min(xs), "max_value": max(xs)},
          f"x domain: {infos['x']}")
    check(infos["opt"]["type"] == "DATA_TYPE_STRING" and
          sorted(infos["opt"]["domain_discrete"]) == ["adam", "bad", "sgd"], f"opt: {infos['opt']}")
    check(infos["deep/bn"]["type"] == "DATA_TYPE_BOOL", f"bn: {infos['deep/bn']}")
    metrics = [m["name"]["tag"] for m in ex["metric_infos"]]
    check(metrics[0] == "loss" and set(metrics) == all_tags, f"metric_infos: {metrics}")

    # the HParams tab (the plugin's backend): one session group per trial, its
    # config against its last result's metrics, its status
    check(set(tab["session_groups"]) == {t["name"] for t in trials},
          f"session groups: {sorted(tab['session_groups'])}")
    for t in trials:
        g = tab["session_groups"][t["name"]]
        check(g["hparams"] == flatten(t["config"]), f"{t['name']}: tab hparams {g['hparams']}")
        last = max((r["result"] for r in results if r["trial_id"] == t["id"]),
                   key=lambda res: res["training_iteration"])
        check(g["metrics"].get("loss") == [last["training_iteration"], f32(last["loss"])],
              f"{t['name']}: tab loss {g['metrics'].get('loss')} vs {last}")
        check(g["status"] == [2 if t["status"] == "ERROR" else 1], f"{t['name']}: {g['status']}")

    # a folder that already holds files is refused: a second export would
    # double every point
    code, out, err = ctune("export", str(exp_id), "--format", "tensorboard", "--output", logdir, *A)
    check(code == 1 and "not empty" in err, f"second export into the same folder: {code} {err}")


def main():
    if not os.access(VENV_PY, os.X_OK):
        print(f"FAIL: TensorBoard's reader is missing: {VENV_PY} (run scripts/install-deps --test)")
        return 1
    if not BIN or not all(os.access(os.path.join(BIN, b), os.X_OK)
                          for b in ("ctune", "ctune-server", "ctune-worker")):
        print(f"FAIL: ctune, ctune-server and ctune-worker are needed in {BIN!r}")
        return 1
    tmp = tempfile.mkdtemp(prefix="ctune-tbexport-")
    ok = False
    try:
        run_test(tmp)
        ok = True
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if not ok:
            for log in ("server.log", "worker.log"):
                path = os.path.join(tmp, log)
                if os.path.exists(path):
                    print(f"--- {log} (tail)")
                    print(open(path, errors="replace").read()[-3000:])
        shutil.rmtree(tmp, ignore_errors=True)
    print("ok: export --format tensorboard read back by TensorBoard")
    return 0


if __name__ == "__main__":
    sys.exit(main())
