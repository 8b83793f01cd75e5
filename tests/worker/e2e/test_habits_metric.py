#!/usr/bin/env python3
"""A metric the script never reports: ASHA on "accuracy" while the
script reports "acc". As Ray does, the trial's first result fails it at once:
status ERROR, reason missing_metric, an error naming the metric and the keys
the script reported; that result is not stored, the process is stopped
early, and `ctune watch` (what `ctune run` prints) shows the error line. A trial that reports the
metric runs on. With several objectives (or an outcome constraint) the first result must
carry every objective (and constrained metric): the one missing is named."""
import os
import subprocess
import sys

from harness import command_config, main, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
TRIAL = os.path.join(HERE, "habits_trial.py")
PY = "/usr/bin/python3"
ITERS = 20
PAUSE = 0.2


def body(env):
    if not os.access(PY, os.X_OK):
        print("SKIP: no %s" % PY)
        sys.exit(77)
    outdir = os.path.join(env.tmp, "out")
    os.mkdir(outdir)
    env.start_server()
    env.start_worker("a", "--cpus", "1")
    asha = {"type": "asha", "time_attr": "training_iteration", "max_t": ITERS,
            "grace_period": 1, "reduction_factor": 2}
    exp = env.submit(command_config(
        "typo", [PY, TRIAL, "metric", outdir, str(ITERS), str(PAUSE), "acc"],
        metric="accuracy", mode="max", scheduler=asha))
    env.wait_experiment(exp, 30)
    t = env.trials(exp)[0]
    print("trial: %s error=%r" % (t["status"], t["error"]))
    assert t["status"] == "ERROR", t
    want = ("missing_metric: result has no metric 'accuracy' (the experiment's metric); "
            "it reported: acc")
    assert t["error"] == want, t["error"]
    assert env.results(t["id"]) == [], env.results(t["id"])
    # Stopped at its first result, not left to run its 20 iterations.
    path = os.path.join(outdir, "printed-%d" % t["id"])
    wait_for(lambda: os.path.exists(path), 10, "the trial's process to exit")
    with open(path) as f:
        printed = int(f.read())
    assert printed < 5, printed
    # Its 20 results would take 4 s; ended well before (typically 0.3 s).
    assert t["ended_at"] - t["started_at"] < ITERS * PAUSE * 0.8, t

    # The CLI shows it.
    ctune = os.path.join(env.bin, "ctune")
    if os.access(ctune, os.X_OK):
        out = subprocess.run([ctune, "watch", str(exp), "--server", env.url, "--width", "200"],
                             capture_output=True, text=True, timeout=20,
                             env=dict(os.environ, CTUNE_TOKEN=env.admin_token))
        print(out.stdout[-1500:], out.stderr[-500:])
        assert "result has no metric 'accuracy'" in out.stdout, (out.stdout, out.stderr)

    # Several objectives: "lat" never reported fails the trial, naming it.
    multi = env.submit(command_config(
        "multi", [PY, TRIAL, "metric", outdir, "3", "0.05", "acc"],
        metric=["acc", "lat"], mode=["max", "min"]))
    env.wait_experiment(multi, 30)
    t3 = env.trials(multi)[0]
    want = ("missing_metric: result has no metric 'lat' (one of the experiment's metrics "
            "acc, lat); it reported: acc")
    assert t3["status"] == "ERROR" and t3["error"] == want, t3
    assert env.results(t3["id"]) == [], env.results(t3["id"])

    # An outcome constraint's metric must be reported too.
    con = env.submit(command_config(
        "con", [PY, TRIAL, "metric", outdir, "3", "0.05", "acc"],
        metric="acc", mode="max", constraints=[{"metric": "mem", "op": "<=", "value": 1}]))
    env.wait_experiment(con, 30)
    t4 = env.trials(con)[0]
    want = ("missing_metric: result has no metric 'mem' (one of the experiment's metrics "
            "acc, mem); it reported: acc")
    assert t4["status"] == "ERROR" and t4["error"] == want, t4

    # The metric reported: no error.
    ok = env.submit(command_config(
        "right", [PY, TRIAL, "metric", outdir, "3", "0.05", "accuracy"],
        metric="accuracy", mode="max", scheduler=asha))
    env.wait_experiment(ok, 30)
    t2 = env.trials(ok)[0]
    assert t2["status"] == "TERMINATED", t2
    assert len(env.results(t2["id"])) == 3, env.results(t2["id"])


if __name__ == "__main__":
    main("habits_metric", body)
