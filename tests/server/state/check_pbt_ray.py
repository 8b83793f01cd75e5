#!/usr/bin/python3
"""Runs test_state_pbt's population, with checkpoint uploads two results
behind (results reach the server before the checkpoints taken at them) and
in time, and replays what the server saw, in its order, through the
transcription of Ray Tune's
pbt.py (tests/server/unit/gen_pbt_vectors.py: on_trial_result, _quantiles,
_checkpoint_or_exploit, where Ray waits for a top trial's pending save).
Every exploit must be the same: which trial, at which time value, from
which donor; and no perturbation point may exploit in one and not in the
other. The explored configs are the server's (mutations aside).

Usage: check_pbt_ray.py PATH/TO/test_state_pbt
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "unit"))
from gen_pbt_vectors import PBT  # noqa: E402


def replay(path):
    """Replays one run's stream; returns (results, perturbation points, exploits)."""
    with open(path) as f:
        lines = [json.loads(x) for x in f if x.strip()]
    head, events = lines[0], lines[1:]
    pbt = PBT(head["seed"], head["mode"], head["perturbation_interval"], head["burn_in_period"],
              head["hyperparam_mutations"], head["quantile_fraction"],
              head["resample_probability"], head["perturbation_factors"])
    exploits = points = 0
    for k, ev in enumerate(events):
        if "add" in ev:
            pbt.on_trial_add(ev["add"], ev["idx"], ev["config"])
            continue
        if "end" in ev:
            pbt._trial_state[ev["end"]].finished = True
            continue
        out = pbt.on_trial_result(ev["trial"], ev["t"], ev["value"])
        points += out is not None
        ray = out["donor"] if out and out["exploit"] else None
        got = ev.get("exploit")
        if ray != got:
            sys.exit("%s, event %d (trial %d, t=%g): the server exploited %s, Ray's PBT %s"
                     % (os.path.basename(path), k, ev["trial"], ev["t"], got, ray))
        if got is not None:
            exploits += 1
            # mutations aside: the trial goes on with the server's config
            pbt._trial_state[ev["trial"]].config = ev["config"]
    if exploits < 5:
        sys.exit("%s: only %d exploits: the population should exploit"
                 % (os.path.basename(path), exploits))
    return sum(1 for e in events if "trial" in e), points, exploits


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="ctune-pbt-") as d:
        path = os.path.join(d, "stream")
        env = dict(os.environ, CTUNE_PBT_STREAM=path, CK_RUN_CASE="population", CK_FORK="no")
        r = subprocess.run([binary], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=120)
        if r.returncode != 0:
            sys.exit("test_state_pbt failed:\n" + r.stdout.decode(errors="replace"))
        for lag in (2, 0):
            n, points, exploits = replay("%s.lag%d" % (path, lag))
            print("uploads %d results behind: %d results, %d perturbation points, %d exploits: "
                  "the same as Ray's PBT" % (lag, n, points, exploits))


if __name__ == "__main__":
    main()
