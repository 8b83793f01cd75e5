#!/usr/bin/env python3
"""Vectors for server/core/asha_promo.c: a transcription of ASHA's promotion
variant, Algorithm 2 ("get_job") of Li et al., "A System for Massively
Parallel Hyperparameter Tuning" (MLSys 2020), driving simulated experiments.

    get_job():
        for k = top rung down to 0:
            candidates = top_k(rung k, floor(|rung k| / eta))
            promotable = {t in candidates : t not already promoted}
            if promotable: return promotable[0], k + 1
        return new configuration, rung 0

Rungs of bracket s are at grace_period * eta^(k+s) below max_t (the paper's
r * eta^(s+k)); reaching max_t ends a trial. Lines marked `ctune:` are the
service's additions (documented in docs/scheduling.md, "ASHA with
promotion"): a trial that ended is never promoted, a non-finite value ranks
last and stops its trial, ties rank in arrival order, brackets are tried in
order, no new configuration once the plan is used up (WAIT).

With several objectives (mode a list) a rung ranks its finite vectors by
the non-dominated order of gen_moasha_vectors.py (Syne Tune's MOASHA
priority: fronts, an epsilon-net within each, ties by arrival), non-finite
ones last, and get_job reads the top floor(n / eta) of that order.

Writes asha_promo_vectors.json next to this file. Run with /usr/bin/python3;
test_asha_promo.c replays it (also restarting from records every N events).
"""
import heapq
import json
import math
import os
import random

import numpy as np

from gen_moasha_vectors import nondominated_order


class AshaPromo:
    def __init__(self, grace, eta, max_t, nb, mode):
        self.eta, self.max_t = eta, max_t
        self.mo = isinstance(mode, list)
        # several objectives: flipped so that smaller is better
        self.flip = [1.0 if m == "min" else -1.0 for m in mode] if self.mo else None
        self.sign = 1.0 if mode == "max" else -1.0
        self.rung_t = []
        for s in range(nb):
            ts = []
            k = 0
            while k < 64:
                t = grace * eta ** (k + s)
                if not t < max_t:
                    break
                ts.append(t)
                k += 1
            self.rung_t.append(ts)
        # rungs[s][k]: list of (trial, value, arrival); promoted[s][k]: set
        self.rungs = [[[] for _ in ts] for ts in self.rung_t]
        self.promoted = [[set() for _ in ts] for ts in self.rung_t]
        self.bracket, self.top_rung = {}, {}
        self.ended = set()  # ctune: ended trials are never promoted
        self.arrival = 0

    def add(self, trial, bracket):
        self.bracket[trial] = bracket
        self.top_rung.setdefault(trial, -1)

    def ranked(self, s, k):
        if self.mo:
            return self.ranked_mo(s, k)[0]
        finite = [x for x in self.rungs[s][k] if math.isfinite(x[1])]
        other = [x for x in self.rungs[s][k] if not math.isfinite(x[1])]
        # ctune: best first, ties in arrival order, non-finite last
        return sorted(finite, key=lambda x: (-x[1], x[2])) + other

    def ranked_mo(self, s, k):
        """Entries (trial, vector or nan, arrival) best first, and each
        trial's front (None for a non-finite one)."""
        finite = [x for x in self.rungs[s][k] if not isinstance(x[1], float)]
        other = [x for x in self.rungs[s][k] if isinstance(x[1], float)]
        if not finite:
            return other, {}, 0
        order, front_of, nfronts = nondominated_order(np.array([x[1] for x in finite]))
        fronts = {finite[i][0]: front_of[i] for i in range(len(finite))}
        return [finite[i] for i in order] + other, fronts, nfronts

    def finite(self, v):
        return all(math.isfinite(x) for x in v) if self.mo else math.isfinite(v)

    def paused(self, trial):
        k = self.top_rung[trial]
        return (k >= 0 and trial not in self.ended and
                trial not in self.promoted[self.bracket[trial]][k] and
                self.finite_entry(next(v for (i, v, _) in self.rungs[self.bracket[trial]][k]
                                       if i == trial)))

    def finite_entry(self, v):
        return not isinstance(v, float) if self.mo else math.isfinite(v)

    def on_result(self, trial, t, value):
        """-> (action, rung, rank, n)"""
        if trial in self.ended or self.paused(trial):
            return ("continue", -1, 0, 0)
        if t >= self.max_t:
            return ("stop", -1, 0, 0)
        s = self.bracket[trial]
        k = self.top_rung[trial] + 1
        if k >= len(self.rung_t[s]) or t < self.rung_t[s][k]:
            return ("continue", -1, 0, 0)
        if self.mo:
            v = [f * x for f, x in zip(self.flip, value)] if self.finite(value) else float("nan")
        else:
            v = self.sign * value if math.isfinite(value) else float("nan")
        self.rungs[s][k].append((trial, v, self.arrival))
        self.arrival += 1
        self.top_rung[trial] = k
        rank = [x[0] for x in self.ranked(s, k)].index(trial) + 1
        n = len(self.rungs[s][k])
        if not self.finite_entry(v):
            return ("stop", k, 0, n)  # ctune: never promotable: ended now
        if self.mo:
            _, fronts, nfronts = self.ranked_mo(s, k)
            return ("pause", k, rank, n, fronts[trial], nfronts)
        return ("pause", k, rank, n)

    def end(self, trial):
        self.ended.add(trial)

    def get_job(self, can_new):
        """-> (kind, trial, rung, top, n)"""
        for s in range(len(self.rung_t)):  # ctune: brackets in order
            for k in reversed(range(len(self.rung_t[s]))):
                n = len(self.rungs[s][k])
                top = math.floor(n / self.eta)
                candidates = [x for x in self.ranked(s, k)[:top] if self.finite_entry(x[1])]
                promotable = [i for (i, _, _) in candidates
                              if i not in self.promoted[s][k] and i not in self.ended
                              and self.top_rung[i] == k]
                if promotable:
                    self.promoted[s][k].add(promotable[0])
                    return ("resume", promotable[0], k, top, n)
        # ctune: a new configuration only while the plan allows one
        return ("new" if can_new else "wait", -1, -1, 0, 0)


def simulate(case_seed, grace, eta, max_t, nb, mode, num_trials, slots):
    rng = random.Random(case_seed)
    a = AshaPromo(grace, eta, max_t, nb, mode)
    ev = []
    quality, last_t, ends_at, errs_at, size = {}, {}, {}, {}, {}
    heap, seq, now = [], 0, 0.0
    created = 0
    free = slots

    def value(trial, t):
        if rng.random() < 0.03:
            return [float("nan")] * len(mode) if a.mo else float("nan")
        v = quality[trial] + 0.5 * math.log(t) + rng.gauss(0, 0.2)
        if rng.random() < 0.3:
            v = round(v, 1)  # ties
        if a.mo:
            # a size known from the start, and more objectives as noise
            return [v, size[trial]] + [round(rng.gauss(0, 1), 1) for _ in mode[2:]]
        return v

    while True:
        while free > 0:
            kind, trial, k, top, n = a.get_job(created < num_trials)
            ev.append(["choose", int(created < num_trials), kind, trial, k, top, n])
            if kind == "wait":
                break
            if kind == "new":
                trial = 1000 + 7 * created
                created += 1
                b = rng.randrange(nb)
                a.add(trial, b)
                ev.append(["add", trial, b])
                quality[trial] = rng.gauss(0, 1)
                if a.mo:
                    size[trial] = round(rng.uniform(0, 4), 1)
                last_t[trial] = 0
                ends_at[trial] = rng.randint(1, int(max_t)) if rng.random() < 0.1 else None
                errs_at[trial] = rng.randint(1, int(max_t)) if rng.random() < 0.05 else None
            free -= 1
            seq += 1
            heapq.heappush(heap, (now + rng.uniform(0.5, 1.5), seq, trial))
        if not heap:
            break
        now, _, trial = heapq.heappop(heap)
        t = last_t[trial] + 1
        last_t[trial] = t
        if errs_at[trial] == t:
            a.end(trial)
            ev.append(["end", trial])
            free += 1
            continue
        v = value(trial, t)
        act, k, rank, n, *fronts = a.on_result(trial, t, v)
        if a.mo:
            shown = v if a.finite(v) else ["nan" if not math.isfinite(x) else x for x in v]
        else:
            shown = v if math.isfinite(v) else "nan"
        ev.append(["result", trial, t, shown, act, k, rank, n] + fronts)
        if act == "stop" or (act == "continue" and ends_at[trial] == t):
            a.end(trial)
            ev.append(["end", trial])
            free += 1
        elif act == "pause":
            free += 1
        else:
            seq += 1
            heapq.heappush(heap, (now + rng.uniform(0.5, 1.5), seq, trial))
    # Nothing runs and nothing can be promoted: the experiment ends and its
    # paused trials end with it (decide_end_paused).
    for trial in sorted(quality):
        if a.paused(trial):
            a.end(trial)
            ev.append(["end", trial])
    return {"grace_period": grace, "reduction_factor": eta, "max_t": max_t, "brackets": nb,
            "mode": mode, "num_trials": num_trials, "slots": slots, "events": ev}


def main():
    cases = [
        (1, 1, 3, 27, 1, "max", 40, 4),
        (2, 1, 3, 9, 1, "min", 30, 2),
        (3, 2, 2, 32, 1, "max", 50, 8),
        (4, 1, 4, 64, 1, "min", 60, 5),
        (5, 1, 3, 81, 3, "max", 80, 6),
        (6, 1, 2.5, 30, 2, "max", 40, 3),
        (7, 1, 3, 27, 1, "max", 25, 1),
        (8, 3, 3, 3, 1, "max", 6, 2),  # no pausing rung: every trial runs to max_t
        # several objectives (MOASHA's order at each rung)
        (9, 1, 3, 27, 1, ["max", "min"], 60, 4),
        (10, 1, 2, 16, 2, ["min", "min", "max"], 60, 5),
    ]
    out = {"generator": "gen_asha_promo_vectors.py",
           "cases": [simulate(*c) for c in cases]}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "asha_promo_vectors.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(path, sum(len(c["events"]) for c in out["cases"]), "events")


if __name__ == "__main__":
    main()
