#!/usr/bin/env python3
"""NaN from a Python trainable: json.dumps(float('nan')) prints NaN, which is
not JSON. The worker reads it as null: the result is stored with a null loss
and ASHA stops the trial at its first milestone, while the trials with a
finite loss go on. A line that looks like a result but is not one is logged
with a warning naming its trial, and not stored."""
import os
import sys

from harness import command_config, main, result_values

HERE = os.path.dirname(os.path.abspath(__file__))
TRIAL = os.path.join(HERE, "nan_trial.py")
PY = "/usr/bin/python3"
ITERS = 6
GRACE = 2


def body(env):
    if not os.access(PY, os.X_OK):
        print("SKIP: no %s" % PY)
        sys.exit(77)
    env.start_server()
    w = env.start_worker("w1", "--cpus", "1")
    exp = env.submit(command_config(
        "nan", [PY, TRIAL, str(ITERS)], num_samples=3, max_concurrent_trials=1,
        scheduler={"type": "asha", "time_attr": "training_iteration", "max_t": ITERS,
                   "grace_period": GRACE, "reduction_factor": 2, "brackets": 1}))
    env.wait_experiment(exp, 60)
    trials = sorted(env.trials(exp), key=lambda t: t["id"])
    assert [t["id"] for t in trials] == [1, 2, 3], trials
    for t in trials:
        res = [r.get("result", r) for r in env.results(t["id"])]
        print("trial %d: %s stopped_early=%s results %r"
              % (t["id"], t["status"], t["stopped_early"], res))
        assert t["status"] == "TERMINATED", t
        if t["id"] % 2 == 0:
            # Read as results with a null loss, and stopped at the first milestone.
            assert result_values(res) == list(range(1, GRACE + 1)), res
            assert all(r["loss"] is None for r in res), res
            assert all(r["acc"] == 0.1 * r["training_iteration"] for r in res), res
            assert t["stopped_early"], t
            assert t["iteration"] == GRACE, t
        else:
            # Every number bit for bit as the trial printed it (15-digit
            # printing would change e.g. 0.30000000000000004).
            assert all(r["loss"] == 1.0 / r["training_iteration"] + t["id"] * 0.01 and
                       r["acc"] == 0.1 * r["training_iteration"] for r in res), res
            assert 77 not in result_values(res), res
    log = w.log()
    assert "trial 1: ignoring a stdout line that looks like a result" in log, log[-3000:]
    assert "and more" in log and '"loss": 0.5,}' in log, log[-3000:]
    assert "trial 3: ignoring" not in log, log[-3000:]


if __name__ == "__main__":
    main("nan", body)
