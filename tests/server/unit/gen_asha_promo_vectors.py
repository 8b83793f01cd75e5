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

Writes asha_promo_vectors.json next to this file. Run with /usr/bin/python3;
test_asha_promo.c replays it (also restarting from records every N events).
"""
import heapq
import json
import math
import os
import random


class AshaPromo:
    def __init__(self, grace, eta, max_t, nb, mode):
        self.eta, self.max_t = eta, max_t
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
        finite = [x for x in self.rungs[s][k] if math.isfinite(x[1])]
        other = [x for x in self.rungs[s][k] if not math.isfinite(x[1])]
        # ctune: best first, ties in arrival order, non-finite last
        return sorted(finite, key=lambda x: (-x[1], x[2])) + other

    def paused(self, trial):
        k = self.top_rung[trial]
        return (k >= 0 and trial not in self.ended and
                trial not in self.promoted[self.bracket[trial]][k] and
                math.isfinite(next(v for (i, v, _) in self.rungs[self.bracket[trial]][k]
                                   if i == trial)))

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
        v = self.sign * value if math.isfinite(value) else float("nan")
        self.rungs[s][k].append((trial, v, self.arrival))
        self.arrival += 1
        self.top_rung[trial] = k
        rank = [x[0] for x in self.ranked(s, k)].index(trial) + 1
        n = len(self.rungs[s][k])
        if not math.isfinite(v):
            return ("stop", k, 0, n)  # ctune: never promotable: ended now
        return ("pause", k, rank, n)

    def end(self, trial):
        self.ended.add(trial)

    def get_job(self, can_new):
        """-> (kind, trial, rung, top, n)"""
        for s in range(len(self.rung_t)):  # ctune: brackets in order
            for k in reversed(range(len(self.rung_t[s]))):
                n = len(self.rungs[s][k])
                top = math.floor(n / self.eta)
                candidates = [x for x in self.ranked(s, k)[:top] if math.isfinite(x[1])]
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
    quality, last_t, ends_at, errs_at = {}, {}, {}, {}
    heap, seq, now = [], 0, 0.0
    created = 0
    free = slots

    def value(trial, t):
        if rng.random() < 0.03:
            return float("nan")
        v = quality[trial] + 0.5 * math.log(t) + rng.gauss(0, 0.2)
        if rng.random() < 0.3:
            v = round(v, 1)  # ties
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
        act, k, rank, n = a.on_result(trial, t, v)
        ev.append(["result", trial, t, v if math.isfinite(v) else "nan", act, k, rank, n])
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
