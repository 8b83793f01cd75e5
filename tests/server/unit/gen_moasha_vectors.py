#!/usr/bin/python3
"""Writes moasha_vectors.json: random result streams of several objectives
with the decisions of a Python transcription of Syne Tune's MOASHA
(syne_tune/optimizer/schedulers/multiobjective/moasha.py with its default
NonDominatedPriority: non-dominated sort, an epsilon-net order inside each
front seeded by the best first objective; the rung's Bracket.on_result of
syne_tune/optimizer/schedulers/asha.py). test_asha.c replays the streams
through server/core/asha.c and must agree on every decision and on where the
new trial ranks.

Two deliberate differences from Syne Tune 0.16, both in ctune and here:
- Syne Tune's nondominated_sort indexes each front by the epsilon-net's
  ranks (not its order) and MOASHA then reads the flattened order as if it
  were each trial's rank, so its stop decision looks at whichever trial sits
  last in the order, not at the new one. Here (and in ctune) a trial's
  priority is its position in the non-dominated order, as the MOPriority
  docstring says; --oracle shows how often unmodified Syne Tune disagrees.
- A non-finite objective at a milestone stops the trial and is recorded
  outside the ranking (as ctune's single-metric ASHA does).

Modes may differ per objective: values are flipped to "smaller is better"
per objective, as Syne Tune's metric_multiplier does for all of them.

Run with Debian's python (numpy): /usr/bin/python3 gen_moasha_vectors.py
Check the transcription against the real package (from PyPI, in a venv):
  VENV/bin/python gen_moasha_vectors.py --oracle
"""
import json
import math
import random
import sys

import numpy as np


def efficient(X):
    """Syne Tune's pareto_efficient: True where no other row dominates."""
    mask = np.ones(X.shape[0], dtype=bool)
    for i, row in enumerate(X):
        if mask[i]:
            beaten = np.all(row <= X[mask], axis=1) * np.any(row < X[mask], axis=1)
            mask[mask] = ~beaten
    return mask


def spread_order(X):
    """compute_epsilon_net's order (not its ranks): the row with the least
    first objective (the first such), then each time the row farthest (by
    its least Euclidean distance) from those chosen, the first on ties."""
    left = list(range(X.shape[0]))
    first = int(np.argmin(X, axis=0)[0])
    order = [first]
    left.remove(first)
    while left:
        gaps = np.linalg.norm(X[left][:, None, :].repeat(len(order), axis=1) - X[order], axis=-1)
        pick = left[int(gaps.min(-1).argmax())]
        order.append(pick)
        left.remove(pick)
    return order


def nondominated_order(X):
    """The rows' order by fronts, each front in epsilon-net order; and the
    front of each row."""
    remaining = np.arange(X.shape[0])
    order, front_of, f = [], {}, 0
    while remaining.size > 0:
        mask = efficient(X[remaining])
        front = remaining[mask]
        for j in spread_order(X[front]):
            order.append(int(front[j]))
            front_of[int(front[j])] = f
        remaining = remaining[~mask]
        f += 1
    return order, front_of, f


class Bracket:
    def __init__(self, grace, max_t, rf, s):
        n = int(np.log(max_t / grace) / np.log(rf) - s + 1)
        self.rf = rf
        self.rungs = [(grace * rf ** (k + s), {}) for k in reversed(range(max(n, 0)))]

    def on_result(self, trial, t, vals):
        """(decision, rank) where rank is [position, ranked, front, fronts,
        continuing] for a ranked stop/continue, else None."""
        for milestone, recorded in self.rungs:
            if t < milestone or trial in recorded:
                continue
            if not all(math.isfinite(v) for v in vals):
                recorded[trial] = None
                return "stop", None
            rows = [v for v in recorded.values() if v is not None] + [vals]
            recorded[trial] = vals
            X = np.array(rows, dtype=float)
            order, front_of, nfronts = nondominated_order(X)
            n = len(rows)
            priority = np.empty(n, dtype=int)
            for pos, i in enumerate(order):
                priority[i] = pos
            ranks = np.searchsorted(sorted(priority), priority) / len(priority)
            keep = sum(1 for p in range(n) if not p / n > 1 / self.rf)
            rank = [int(priority[-1]), n, front_of[n - 1], nfronts, keep]
            return ("stop" if ranks[-1] > 1 / self.rf else "continue"), rank
        return "continue", None


def case(rng, modes, max_t, grace, rf, brackets, trials, steps, frac, grid):
    sign = [1.0 if m == "min" else -1.0 for m in modes]
    k = len(modes)
    bs = [Bracket(grace, max_t, rf, s) for s in range(brackets)]
    where, t_of, events = {}, {}, []
    for i in range(trials):
        b = rng.randrange(brackets)
        where[i], t_of[i] = b, 0.0
        events.append(["add", i, b, None, None, None])
    for _ in range(steps):
        if not where:
            break
        i = rng.choice(sorted(where))
        t_of[i] += rng.choice([1, 1, 1, 2]) if not frac else round(rng.uniform(0.3, 2.5), 3)
        r = rng.random()
        if r < 0.02:
            vals = [float("nan")] * k
        else:
            # A learning curve per objective, noisy; on a coarse grid in
            # some cases so that ties (equal points, equal distances) occur.
            vals = [rng.gauss(-t_of[i] * 0.05 * (j + 1), 1) for j in range(k)]
            vals = [round(v * 2) / 2 if grid else round(v, 6) for v in vals]
            if r < 0.03:
                vals[rng.randrange(k)] = float("inf")
        flipped = [s * v for s, v in zip(sign, vals)]
        if t_of[i] >= max_t:
            decision, rank = "stop", None
        else:
            decision, rank = bs[where[i]].on_result(i, t_of[i], flipped)
        events.append(["result", i, t_of[i], vals, decision, rank])
        if decision == "stop" or rng.random() < 0.02:
            bs[where[i]].on_result(i, t_of[i], flipped)
            events.append(["end", i, t_of[i], vals, None, None])
            del where[i]
    return {"modes": modes, "max_t": max_t, "grace_period": grace, "reduction_factor": rf,
            "brackets": brackets, "events": events}


def cases():
    rng = random.Random(20261127)
    return [
        case(rng, ["min", "min"], 10, 1, 2, 1, 40, 400, False, False),
        case(rng, ["min", "max"], 27, 1, 3, 2, 60, 500, False, False),
        case(rng, ["max", "max", "min"], 100, 1, 4, 2, 60, 500, False, False),
        case(rng, ["min", "min"], 81, 3, 3, 1, 50, 450, False, True),
        case(rng, ["min", "max", "min", "max"], 20, 1.5, 2.5, 3, 50, 400, True, False),
        case(rng, ["max", "min"], 50, 2, 1.7, 2, 60, 500, False, True),
    ]


def encode(x):
    if isinstance(x, list):
        return [encode(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def oracle(all_cases):
    """Replays every result through Syne Tune's own Bracket, with its
    pareto_efficient and compute_epsilon_net behind a priority that gives
    each row its position (the fix above), and through unmodified MOASHA's
    NonDominatedPriority; prints how many decisions each agrees on."""
    from syne_tune.optimizer.schedulers.asha import Bracket as StBracket
    from syne_tune.optimizer.schedulers.multiobjective.multiobjective_priority import (
        MOPriority, NonDominatedPriority)
    from syne_tune.optimizer.schedulers.multiobjective import non_dominated_priority as nd

    class PositionPriority(MOPriority):
        def priority_unsafe(self, objectives):
            remaining = np.arange(objectives.shape[0])
            order = []
            while remaining.size > 0:
                mask = nd.pareto_efficient(objectives[remaining])
                front = remaining[mask]
                ranks = nd.compute_epsilon_net(objectives[front], dim=0)
                order += front[np.argsort(ranks)].tolist()
                remaining = remaining[~mask]
            prio = np.empty(len(order), dtype=int)
            prio[order] = np.arange(len(order))
            return prio

    same = {"fixed": 0, "syne-tune": 0}
    total = 0
    for c in all_cases:
        sign = [1.0 if m == "min" else -1.0 for m in c["modes"]]
        for name, prio in (("fixed", PositionPriority), ("syne-tune", NonDominatedPriority)):
            bs = [StBracket(c["grace_period"], c["max_t"], c["reduction_factor"], s, prio())
                  for s in range(c["brackets"])]
            where, nan_at = {}, {}
            for e in c["events"]:
                op, i = e[0], e[1]
                if op == "add":
                    where[i] = e[2]
                    continue
                vals = [s * v for s, v in zip(sign, e[3])]
                if op == "result" and e[2] >= c["max_t"]:
                    got = "stop"
                elif all(math.isfinite(v) for v in vals):
                    got = bs[where[i]].on_result(i, e[2], dict(enumerate(vals)))
                else:
                    # ctune's deliberate difference: a non-finite objective
                    # is recorded beside the rung (never ranked) and stops.
                    got = "continue"
                    for m, r in bs[where[i]].rungs:
                        if e[2] >= m and i not in r and (m, i) not in nan_at:
                            nan_at[(m, i)] = True
                            got = "stop"
                            break
                if op == "result":
                    total += name == "fixed"
                    same[name] += str(got).lower() == e[4]
    print(f"{total} results: the fixed priority on Syne Tune's code agrees on {same['fixed']}, "
          f"unmodified Syne Tune MOASHA on {same['syne-tune']}")
    return same["fixed"] == total


def main():
    all_cases = cases()
    if "--oracle" in sys.argv:
        sys.exit(0 if oracle(all_cases) else 1)
    for c in all_cases:
        c["events"] = [[encode(x) for x in e] for e in c["events"]]
    with open("moasha_vectors.json", "w") as f:
        json.dump({"generator": "gen_moasha_vectors.py", "cases": all_cases}, f,
                  separators=(",", ":"))
        f.write("\n")
    n = sum(1 for c in all_cases for e in c["events"] if e[0] == "result")
    s = sum(1 for c in all_cases for e in c["events"] if e[0] == "result" and e[4] == "stop")
    print(f"{n} results, {s} stops")


if __name__ == "__main__":
    main()
