#!/usr/bin/env python3
"""examples/pytorch under PBT, end to end: `ctune run` (the real ctune,
ctune-server, ctune-worker; binaries from CTUNE_BIN_DIR) runs the PyTorch
Fashion-MNIST script with examples/pytorch/pbt.json, cut small (1000 images,
4 trials, 4 epochs, a perturbation every epoch). An exploited trial restores
its donor's checkpoint, optimizer state included, which carries the donor's
lr; the trial's config holds the explored lr. The script must train with the
config's (ctune.apply_config). Read back through ctune.Client:

- every exploit's new lr is the lr the trial reports for each epoch of the
  generation that follows it (results keep every generation);
- the trial's log (its last attempt) shows it too: after an exploit, each
  "epoch N: lr X" line names the explored lr, and the helper said that the
  restored state had the donor's lr.

With the example as it was (the optimizer's restored lr left in place), the
lr after an exploit is the donor's, and this fails. Label e2e; exits 77 when
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

EPOCHS = 4


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def serve(db):
    p = subprocess.Popen([os.path.join(ctune_procs.BIN, "ctune-server"), "--db", db, "--port", "0",
                          "--bind", "127.0.0.1"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 20
    while time.time() < deadline:
        line = p.stdout.readline().decode()
        m = re.match(r"listening on (http://\S+)", line)
        if m:
            return p, m.group(1)
        if not line:
            break
    return p, None


def main():
    ctune_procs.need_bins("ctune", "ctune-server", "ctune-worker")
    ctune_procs.need_torch_and_fmnist()
    tmp = tempfile.mkdtemp(prefix="ctune-pytorch-pbt-")
    server = None
    try:
        with open(os.path.join(REPO, "examples", "pytorch", "pbt.json")) as f:
            cfg = json.load(f)
        # The example's PBT config as it is, cut small.
        cfg["param_space"].update(train_limit=1000, epochs=EPOCHS)
        cfg["scheduler"].update(perturbation_interval=1, quantile_fraction=0.5)
        cfg["resources_per_trial"] = {"cpu": 0.5}
        cfg_path = os.path.join(tmp, "pbt.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        db = os.path.join(tmp, "pbt.db")
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTUNE_")}
        t0 = time.monotonic()
        r = subprocess.run([os.path.join(ctune_procs.BIN, "ctune"), "run", cfg_path, "--db", db,
                            "--cpus", "2", "--json"], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=200)
        took = time.monotonic() - t0
        check(r.returncode == 0, f"ctune run exited {r.returncode}:\n{r.stderr[-3000:]}")

        server, url = serve(db)
        check(url, "ctune-server did not start on the run's database")
        c = ctune.Client(url, token_file=db + ".tokens")
        exp = c.experiment(cfg["name"])
        check(exp["status"] == "TERMINATED", exp)
        exploits = logged = 0
        for t in c.trials(exp["id"]):
            check(t["status"] == "TERMINATED", f"{t['name']}: {t['status']} {t.get('error')}")
            tr = c.trial(t["id"])
            res = c.results(t["id"])
            evs = [e for e in tr["events"] if e["kind"] == "exploited"]
            exploits += len(evs)
            # The log's last attempt: after an exploit it resumed from the
            # donor's checkpoint, and every epoch it trained names the
            # config's (explored) lr, not the donor's restored one.
            log = c.logs(t["id"])
            last = log[log.rfind("resumed after epoch"):]  # the last attempt's epochs
            epochs = [float(m.group(1))
                      for m in re.finditer(r"^epoch \d+: lr (\S+)$", last, re.M)]
            if evs and "resumed after epoch" in log and epochs:
                want = evs[-1]["data"]["new_config"]["lr"]
                check(all(x == want for x in epochs),
                      f"{t['name']}: exploited to lr {want!r}, but its log shows epochs with "
                      f"lr {epochs}:\n{log[-2000:]}")
                check(tr["config"]["lr"] == want, (tr["config"], evs[-1]))
                check("ctune: the restored optimizer state had lr=" in log,
                      f"{t['name']}: apply_config said nothing about the restored lr:\n"
                      f"{log[-2000:]}")
                logged += 1
            # Results in report order, every generation: each trains with
            # the lr of its config; the result an exploit was decided at is
            # the last of its generation, the next ones train with the
            # explored lr.
            lr = evs[0]["data"]["old_config"]["lr"] if evs else tr["config"]["lr"]
            k = 0
            for x in res:
                check(x["lr"] == lr, f"{t['name']}: iteration {x['training_iteration']} trained "
                      f"with lr {x['lr']!r}, its config said {lr!r} (exploits "
                      f"{[e['reason'] for e in evs]}); results "
                      f"{[(y['training_iteration'], y['lr']) for y in res]}")
                if k < len(evs) and x["training_iteration"] == evs[k]["data"]["t"]:
                    lr = evs[k]["data"]["new_config"]["lr"]
                    k += 1
            check(k == len(evs), f"{t['name']}: {len(evs)} exploits, {k} found in its results")
        check(exploits >= 1, "PBT exploited no trial")
        check(logged >= 1, "no trial's log shows an epoch trained after an exploit")
        print(f"ok: ctune run took {took:.1f} s; {exploits} exploits, {logged} trial logs show "
              f"the explored lr after an exploit")
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
