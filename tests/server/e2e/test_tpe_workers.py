"""A TPE experiment run by real ctune-worker processes: 14 trials
of a command trainable whose metric depends on its config; it finishes, its
first 10 configs are the random searcher's (same seed, same order: what
`ctune sample` lists in advance), and the later ones are TPE's (not in the
random list), leased as slots free on two workers (whichever asks first).""" 
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ctune_e2e import BIN_DIR, Runner, Server, tmpdir  # noqa: E402

TRAINABLE = r"""
import json, math, os
cfg = json.loads(os.environ["CTUNE_CONFIG"])
loss = (cfg["x"] - 1.5) ** 2 + (0 if cfg["k"] == "b" else 2) + abs(math.log10(cfg["lr"]) + 2)
for it in (1, 2):
    print(json.dumps({"training_iteration": it, "loss": loss + 1.0 / it}), flush=True)
"""


def cfg_for(script, alg):
    return {"name": "tpe-workers", "metric": "loss", "mode": "min", "num_samples": 14, "seed": 11,
            # one at a time: trial 10 is made once 10 trials have finished,
            # so it is the model's (with two at once it may still be random,
            # as in Optuna: startup counts finished trials)
            "max_concurrent_trials": 1, "search_alg": alg,
            "param_space": {"x": {"type": "uniform", "lower": -5, "upper": 5},
                            "k": {"type": "choice", "values": ["a", "b", "c"]},
                            "lr": {"type": "loguniform", "lower": 1e-4, "upper": 1}},
            "resources_per_trial": {"cpu": 1},
            "trainable": {"type": "command", "argv": ["/usr/bin/python3", script]}}


def test_tpe_with_real_workers():
    s = Server()
    d = tmpdir()
    script = os.path.join(d, "trainable.py")
    with open(script, "w") as f:
        f.write(TRAINABLE)
    dry = s.ok("POST", "/api/v1/experiments?dry_run=true", cfg_for(script, {"type": "tpe"}))
    assert dry["decided_later"] == 4 and len(dry["trials"]) == 10, dry
    rnd = s.ok("POST", "/api/v1/experiments?dry_run=true",
               cfg_for(script, {"type": "random"}))["trials"]
    assert rnd[:10] == dry["trials"]
    eid = s.ok("POST", "/api/v1/experiments", cfg_for(script, {"type": "tpe"}), status=201)["id"]
    workers = []
    try:
        for i in range(2):
            workers.append(subprocess.Popen(
                [os.path.join(BIN_DIR, "ctune-worker"), "--server",
                 "http://%s:%d" % (s.host, s.port), "--cpus", "1", "--memory-mb", "512",
                 "--token-file", s.db + ".tokens", "--name", "w%d" % i,
                 "--work-dir", os.path.join(d, "w%d" % i), "--poll-ms", "100", "--no-cgroup"],
                stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "w%d.log" % i), "wb")))
        deadline = time.time() + 60
        while time.time() < deadline:
            e = s.ok("GET", "/api/v1/experiments/%d" % eid)
            if e["status"] != "RUNNING":
                break
            time.sleep(0.2)
        logs = "".join(open(os.path.join(d, "w%d.log" % i), errors="replace").read()[-1500:]
                       for i in range(2))
        assert e["status"] == "TERMINATED" and e["num_created"] == 14, (e, logs)
        trials = s.ok("GET", "/api/v1/experiments/%d/trials" % eid)["trials"]
        assert [t["status"] for t in trials] == ["TERMINATED"] * 14, trials
        configs = [t["config"] for t in sorted(trials, key=lambda t: t["name"])]
        assert configs[:10] == rnd[:10]
        assert all(c not in rnd for c in configs[10:]), configs[10:]
        best = s.ok("GET", "/api/v1/experiments/%d/best" % eid)
        assert best["value"] < 100
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            try:
                w.wait(timeout=20)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()
    s.stop()


if __name__ == "__main__":
    r = Runner()
    r.run(test_tpe_with_real_workers)
    r.done()
