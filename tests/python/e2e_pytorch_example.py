#!/usr/bin/env python3
"""examples/pytorch end to end: `ctune run` (the real ctune, ctune-server,
ctune-worker; binaries from CTUNE_BIN_DIR) runs the PyTorch Fashion-MNIST
script with its own experiment config, cut to a small subset (train_limit,
fewer samples and epochs) under ASHA. Then a ctune-server on the same
database answers ctune.Client: every trial ended, each has one result per
iteration numbered 1..n by ctune.report, the stored checkpoint belongs to
the last result, ASHA acted (some trial stopped
early, some ran to max_t), and a best trial exists. Label e2e; exits 77 when
the binaries or torch are missing."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, os.path.join(REPO, "python", "tests"))

import ctune  # noqa: E402
import ctune_procs  # noqa: E402

MAX_T = 4


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def main():
    ctune_procs.need_bins("ctune", "ctune-server", "ctune-worker")
    ctune_procs.need_torch_and_fmnist()
    tmp = tempfile.mkdtemp(prefix="ctune-pytorch-")
    server = None
    try:
        with open(os.path.join(REPO, "examples", "pytorch", "experiment.json")) as f:
            cfg = json.load(f)
        # The example as it is, cut small: the subset knob, fewer trials and epochs.
        cfg["num_samples"] = 6
        cfg["param_space"].update(train_limit=1500, epochs=MAX_T)
        cfg["scheduler"]["max_t"] = MAX_T
        cfg_path = os.path.join(tmp, "experiment.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        db = os.path.join(tmp, "pt.db")
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTUNE_")}
        t0 = time.monotonic()
        # From the repo root: the config's cwd "." and PYTHONPATH "python".
        r = subprocess.run([os.path.join(ctune_procs.BIN, "ctune"), "run", cfg_path, "--db", db,
                            "--cpus", "2", "--json"], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=150)
        took = time.monotonic() - t0
        logs = ""
        for name in ("pt.worker.log", "pt.server.log"):
            try:
                with open(os.path.join(tmp, name), errors="replace") as f:
                    logs += f"--- {name}\n" + f.read()[-3000:]
            except OSError:
                pass
        check(r.returncode == 0, f"ctune run exited {r.returncode}:\n{r.stderr[-3000:]}\n{logs}")
        lines = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
        best_line = [l["best_trial"] for l in lines if "best_trial" in l]
        check(best_line, f"ctune run printed no best trial:\n{r.stdout[-2000:]}")
        print(f"ctune run took {took:.1f} s; best {best_line[0]['name']} "
              f"loss={best_line[0]['value']}")

        # The same database, served again: read it through the Python client.
        server = subprocess.Popen([os.path.join(ctune_procs.BIN, "ctune-server"), "--db", db,
                                   "--port", "0", "--bind", "127.0.0.1"], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        url = None
        deadline = time.time() + 20
        while time.time() < deadline and url is None:
            line = server.stdout.readline().decode()
            m = re.match(r"listening on (http://\S+)", line)
            if m:
                url = m.group(1)
            elif not line:
                break
        check(url, "ctune-server did not start on the run's database")
        c = ctune.Client(url, token_file=db + ".tokens")
        exp = c.experiment("pytorch-fmnist")
        check(exp["status"] == "TERMINATED", exp)
        trials = c.trials(exp["id"])
        check(len(trials) == 6, trials)
        lengths, early = [], 0
        for t in trials:
            check(t["status"] == "TERMINATED", f"{t['name']}: {t['status']} {t.get('error')}")
            res = c.results(t["id"])
            its = [x["training_iteration"] for x in res]
            check(its == list(range(1, len(res) + 1)) and its, f"{t['name']}: iterations {its}")
            check(all(0 <= x["mean_accuracy"] <= 1 and x["loss"] > 0 for x in res), res)
            totals = [x["time_total_s"] for x in res]
            check(totals == sorted(totals), f"{t['name']}: time_total_s {totals}")
            # The last checkpoint is the last result's, also for a trial the
            # scheduler stopped right after it (the stop waits for the save).
            ck = c.download_checkpoint(t["id"], os.path.join(tmp, f"ck-{t['id']}.bin"))
            check(ck["iteration"] == len(res), f"{t['name']}: checkpoint of iteration "
                  f"{ck['iteration']}, last result {len(res)}")
            lengths.append(len(res))
            early += bool(t["stopped_early"])
        check(MAX_T in lengths, f"no trial ran to max_t {MAX_T}: {lengths}")
        check(early >= 1 and min(lengths) < MAX_T, f"ASHA stopped no trial: {lengths}")
        best = c.best(exp["id"])
        check(best["trial_id"] == best_line[0]["id"], (best, best_line))
        got = c.download_checkpoint(best["trial_id"], tmp)
        ckpt_dir = ctune.load_checkpoint(into=os.path.join(tmp, "restored"), file=got["path"])
        check(os.path.isfile(os.path.join(ckpt_dir, "checkpoint.pt")), ckpt_dir)
        print(f"ok: 6 trials, results per trial {lengths}, {early} stopped early by ASHA")
        return 0
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
            server.stdout.close()
        shutil.rmtree(tmp, True)


if __name__ == "__main__":
    sys.exit(main())
