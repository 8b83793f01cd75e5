#!/usr/bin/python3
"""Writes asha_ray_vectors.json: random result streams with the decisions and
cutoffs of a Python transcription of Ray Tune's ASHA bracket logic (numpy's
nanpercentile, Ray's milestone formula), plus ctune's one deliberate change
(NaN/inf at a milestone stops). test_asha.c replays the streams through
server/core/asha.c and must agree on every decision and cutoff.

Run with Debian's python (numpy): /usr/bin/python3 gen_asha_vectors.py
"""
import json
import math
import random

import numpy as np


class Bracket:
    def __init__(self, grace, max_t, rf, s):
        n = int(np.log(max_t / grace) / np.log(rf) - s + 1)
        self.rf = rf
        # highest milestone first, as Ray walks them
        self.rungs = [(grace * rf ** (k + s), {}) for k in reversed(range(max(n, 0)))]

    def on_result(self, trial, t, value):
        for milestone, recorded in self.rungs:
            if t < milestone or trial in recorded:
                continue
            vals = list(recorded.values())
            cutoff = None
            if vals and not all(math.isnan(v) for v in vals):
                cutoff = float(np.nanpercentile(vals, (1 - 1 / self.rf) * 100))
            if not math.isfinite(value):
                recorded[trial] = float("nan")
                return "stop", cutoff, True
            recorded[trial] = value
            if cutoff is not None and value < cutoff:
                return "stop", cutoff, True
            return "continue", cutoff, True
        return "continue", None, False


def case(rng, mode, max_t, grace, rf, brackets, trials, steps, frac):
    sign = 1.0 if mode == "max" else -1.0
    bs = [Bracket(grace, max_t, rf, s) for s in range(brackets)]
    where, t_of, last, events = {}, {}, {}, []
    for i in range(trials):
        b = rng.randrange(brackets)
        where[i], t_of[i] = b, 0.0
        events.append(["add", i, b, 0, None, None])
    for _ in range(steps):
        if not where:
            break
        i = rng.choice(sorted(where))
        t_of[i] += rng.choice([1, 1, 1, 2]) if not frac else round(rng.uniform(0.3, 2.5), 3)
        r = rng.random()
        value = float("nan") if r < 0.03 else float("inf") if r < 0.04 else rng.gauss(t_of[i] * 0.05, 1)
        value = round(value, 6) if math.isfinite(value) else value
        if t_of[i] >= max_t:
            decision, cutoff = "stop", None
        else:
            decision, cutoff, _ = bs[where[i]].on_result(i, t_of[i], sign * value)
        events.append(["result", i, t_of[i], value, decision, cutoff])
        last[i] = (t_of[i], value)
        if decision == "stop" or rng.random() < 0.02:
            bs[where[i]].on_result(i, t_of[i], sign * value)
            events.append(["end", i, t_of[i], value, None, None])
            del where[i]
    return {"mode": mode, "max_t": max_t, "grace_period": grace, "reduction_factor": rf,
            "brackets": brackets, "events": events}


def encode(x):
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def main():
    rng = random.Random(20261122)
    cases = [
        case(rng, "max", 10, 1, 2, 1, 20, 150, False),
        case(rng, "min", 10, 1, 2, 3, 30, 250, False),
        case(rng, "max", 100, 1, 4, 2, 30, 300, False),
        case(rng, "min", 81, 3, 3, 2, 25, 250, False),
        case(rng, "max", 20, 1.5, 2.5, 3, 25, 250, True),
        case(rng, "min", 50, 2, 1.7, 4, 30, 300, False),
    ]
    for c in cases:
        c["events"] = [[encode(x) for x in e] for e in c["events"]]
    with open("asha_ray_vectors.json", "w") as f:
        json.dump({"generator": "gen_asha_vectors.py", "cases": cases}, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
