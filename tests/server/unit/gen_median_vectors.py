#!/usr/bin/python3
"""Writes median_ray_vectors.json: random result streams with the decisions
of a Python transcription of Ray Tune's MedianStoppingRule
(ray/tune/schedulers/median_stopping_rule.py: on_trial_result,
on_trial_complete, _trials_beyond_time, _median_result, _running_mean,
_best_result), with numpy's median and mean as Ray uses them. test_median.c
replays the streams through server/core/median.c and must agree on every
decision; the median must agree to 1e-9 (numpy sums pairwise, ctune in
order). There are no random draws in this rule.

ctune's deliberate differences, kept here too (docs/scheduling.md):
- a non-finite metric at or past grace_period stops (or pauses) the trial
  and is not kept; before grace_period it is ignored. Ray would carry NaN
  into the means;
- a trial with no result in [grace_period, t] has no running mean and is
  left out of the median (Ray's np.mean of nothing is NaN, and a NaN
  median stops every trial compared with it);
- with too few samples ctune continues; Ray may pause the trial to yield
  to PENDING/PAUSED trials (min_time_slice);
- on_trial_complete's final result is not appended a second time when
  on_trial_result already saw it.

Run: /usr/bin/python3 gen_median_vectors.py
"""
import collections
import json
import math
import random

import numpy as np


class MedianStoppingRule:
    def __init__(self, mode, grace_period, min_samples_required, hard_stop):
        self._stopped_trials = set()
        self._grace_period = grace_period
        self._min_samples_required = min_samples_required
        self._worst = float("-inf") if mode == "max" else float("inf")
        self._compare_op = max if mode == "max" else min
        self._hard_stop = hard_stop
        self._results = collections.defaultdict(list)  # trial -> [(t, v)]

    def on_trial_result(self, trial, time, value):
        if trial in self._stopped_trials:
            return "continue", None
        if not math.isfinite(value):  # ctune
            if time < self._grace_period:
                return "continue", None
            self._stopped_trials.add(trial)
            return ("stop" if self._hard_stop else "pause"), None
        self._results[trial].append((time, value))
        if time < self._grace_period:
            return "continue", None
        trials = self._trials_beyond_time(time)
        trials.remove(trial)
        means = [self._running_mean(t, time) for t in trials]
        means = [m for m in means if m is not None]  # ctune
        if len(means) < self._min_samples_required:
            return "continue", None
        median_result = float(np.median(means))
        best_result = self._best_result(trial)
        if self._compare_op(median_result, best_result) != best_result:
            self._stopped_trials.add(trial)
            return ("stop" if self._hard_stop else "pause"), median_result
        return "continue", median_result

    def on_trial_complete(self, trial, time, value):
        res = self._results[trial]
        if res and res[-1] == (time, value):  # ctune: once is enough
            return
        res.append((time, value))

    def _trials_beyond_time(self, time):
        return [t for t in self._results if self._results[t][-1][0] >= time]

    def _running_mean(self, trial, time):
        scoped = [v for (t, v) in self._results[trial] if self._grace_period <= t <= time]
        return float(np.mean(scoped)) if scoped else None

    def _best_result(self, trial):
        return self._compare_op([v for (_, v) in self._results[trial]])


def case(rng, mode, grace, min_samples, hard_stop, ntrials, steps, frac):
    rule = MedianStoppingRule(mode, grace, min_samples, hard_stop)
    events, t_of = [], {}
    ids = [10 + 3 * i for i in range(ntrials)]
    quality = {i: rng.gauss(0, 1) for i in ids}
    for i in ids:
        t_of[i] = 0
    live = list(ids)
    paused = []
    for _ in range(steps):
        if not live:
            if not paused:
                break
            live.append(paused.pop(0))  # resumed: its results are ignored
        tid = rng.choice(live)
        if rng.random() < 0.02:
            live.remove(tid)
            last = rule._results[tid][-1] if rule._results.get(tid) else None
            if rng.random() < 0.5:
                # ended by something else (a stop rule): a result that
                # on_trial_result never saw
                t_of[tid] += 1
                last = (t_of[tid], round(rng.gauss(0, 1), 6))
            if last:
                rule.on_trial_complete(tid, last[0], last[1])
                events.append({"end": tid, "t": last[0], "value": last[1]})
            else:
                events.append({"end": tid, "t": None, "value": None})
            continue
        t_of[tid] += round(rng.uniform(0.5, 1.5), 2) if frac else 1
        t = t_of[tid]
        sign = 1 if mode == "max" else -1
        r = rng.random()
        if r < 0.01:
            value = float("nan")
        else:
            value = round(sign * (quality[tid] + 0.1 * t) + rng.gauss(0, 0.5), 6)
        decision, median = rule.on_trial_result(tid, t, value)
        events.append({"trial": tid, "t": t,
                       "value": None if math.isnan(value) else value,
                       "decision": decision, "median": median})
        if decision in ("stop", "pause"):
            live.remove(tid)
            if decision == "pause":
                paused.append(tid)
    return {"mode": mode, "grace_period": grace, "min_samples_required": min_samples,
            "hard_stop": hard_stop, "events": events}


def main():
    rng = random.Random(5)
    cases = [
        case(rng, "max", 3, 3, True, 8, 600, False),
        case(rng, "min", 1, 1, True, 5, 200, False),
        case(rng, "max", 2.5, 2, False, 10, 500, True),
        case(rng, "min", 5, 4, False, 12, 1200, False),
        case(rng, "max", 0, 3, True, 20, 1500, True),
    ]
    n = sum(len(c["events"]) for c in cases)
    s = sum(1 for c in cases for e in c["events"] if e.get("decision") in ("stop", "pause"))
    m = sum(1 for c in cases for e in c["events"] if e.get("median") is not None)
    with open("median_ray_vectors.json", "w") as f:
        json.dump({"cases": cases}, f, separators=(",", ":"))
        f.write("\n")
    print(f"{len(cases)} cases, {n} events, {m} compared with a median, {s} stopped or paused")


if __name__ == "__main__":
    main()
