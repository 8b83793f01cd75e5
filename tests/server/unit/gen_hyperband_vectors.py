#!/usr/bin/python3
"""Writes hyperband_ray_vectors.json: simulated experiments driven through a
Python transcription of Ray Tune's HyperBandScheduler (bands, brackets,
successive halving, choose_trial_to_run by completion percentage), with the
adaptations ctune makes (docs/scheduling.md, "HyperBand"), each marked
"ctune:" below. test_hyperband.c replays every event through
server/core/hyperband.c and must agree on every decision, every trial a
halving stopped or readied, and every choice.

With several objectives (mode a list; ctune's MO-HyperBand) a halving
ranks the live trials by the non-dominated order of gen_moasha_vectors.py
(Syne Tune's MOASHA priority: fronts, an epsilon-net within each, ties to
the earlier trial), vectors with a non-finite value below all.

Run with Debian's python (numpy): /usr/bin/python3 gen_hyperband_vectors.py
"""
import json
import math
import random

import numpy as np

from gen_moasha_vectors import nondominated_order

RUNNING, PAUSED = "running", "paused"


class Slot:
    """One trial of a bracket. ctune: trials are created on demand, so a slot
    may be not yet created; it then acts as Ray's PENDING trial with no
    result (time 0)."""

    def __init__(self, idx):
        self.idx = idx
        self.created = False
        self.status = RUNNING
        self.result = None  # (t, value) of the last result


class Bracket:
    def __init__(self, band, s, n0, r0, max_t, eta):
        self.band, self.s = band, s
        self.live = []  # insertion order, as Ray's dict
        self.n = self.n0 = n0
        self.r = self.r0 = r0
        self.max_t = max_t
        self.cumul_r = r0
        self.eta = eta
        self.halves = s
        self.total_work = self.calc_total_work(n0, r0, s)
        self.progress = 0
        self.to_unpause = set()
        self.count = 0

    def calc_total_work(self, n, r, s):
        work = 0
        cumulative_r = r
        for _ in range(s + 1):
            work += int(n) * int(r)
            n /= self.eta
            n = int(np.ceil(n))
            r *= self.eta
            r = int(min(r, self.max_t - cumulative_r))
        return work

    @staticmethod
    def rtime(slot):
        return 0 if slot.result is None else slot.result[0]

    def cur_iter_done(self):
        return all(self.rtime(x) >= self.cumul_r for x in self.live)

    def finished(self):
        return self.halves == 0 and self.cur_iter_done()

    def continue_trial(self, slot):
        return self.rtime(slot) < self.cumul_r

    def completion(self):
        if self.finished():
            return 1.0
        return min(self.progress / self.total_work, 1.0)

    def successive_halving(self, sign):
        assert self.halves > 0
        self.halves -= 1
        self.n = int(np.ceil(self.n / self.eta))
        self.r *= self.eta
        self.r = int(min(self.r, self.max_t))
        self.cumul_r = self.r

        def key(x):
            # ctune: a missing or non-finite metric ranks below every value
            # (Ray's sort with NaN keys has no defined order).
            v = x.result[1]
            return (0, 0.0) if not math.isfinite(v) else (1, sign * v)

        if isinstance(sign, list):
            # several objectives: flipped so that smaller is better; worst
            # first = the non-finite ones, then the order from its end
            fin = [x for x in self.live if all(math.isfinite(v) for v in x.result[1])]
            bad = [x for x in self.live if x not in fin]
            order = nondominated_order(np.array(
                [[f * v for f, v in zip(sign, x.result[1])] for x in fin]))[0] if fin else []
            ordered = bad + [fin[i] for i in reversed(order)]
        else:
            ordered = sorted(self.live, key=key)
        good, bad = ordered[-self.n:], ordered[:-self.n]
        return good, bad

    def update(self, slot, t):
        last = self.rtime(slot)
        self.progress += t - last


class HyperBand:
    def __init__(self, max_t, eta, mode, num_trials):
        self.eta = eta
        self.max_t = max_t
        if isinstance(mode, list):
            self.sign = [1.0 if m == "min" else -1.0 for m in mode]
        else:
            self.sign = 1.0 if mode == "max" else -1.0
        self.s_max_1 = int(np.round(np.log(max_t) / np.log(eta))) + 1
        self.bands = [[]]
        self.cur = None
        self.slot_of = {}
        self.num_trials = num_trials
        self.next_idx = 0
        # ctune: Ray adds every trial when it is generated (all of them up
        # front with the random/grid generator); the bracket of trial idx is
        # therefore fixed by idx. ctune lays the slots out at creation.
        for idx in range(num_trials):
            self.on_trial_add(idx)

    def get_n0(self, s):
        return int(np.ceil(self.s_max_1 / (s + 1) * self.eta ** s))

    def get_r0(self, s):
        return int(self.max_t * self.eta ** (-s))

    def on_trial_add(self, idx):
        if self.cur is None or self.cur.count == self.cur.n0:
            while True:
                if len(self.bands[-1]) == self.s_max_1:
                    self.bands.append([])
                band = self.bands[-1]
                s = len(band)
                if self.get_r0(s) == 0:
                    band.append(None)
                    continue
                self.cur = Bracket(len(self.bands) - 1, s, self.get_n0(s), self.get_r0(s),
                                   self.max_t, self.eta)
                band.append(self.cur)
                break
        slot = Slot(idx)
        self.cur.live.append(slot)
        self.cur.count += 1
        self.slot_of[idx] = (self.cur, slot)

    def bracket_id(self, b):
        return b.band * self.s_max_1 + b.s

    # --- events; each returns what test_hyperband.c checks ---

    def create(self):
        idx = self.next_idx
        self.next_idx += 1
        b, slot = self.slot_of[idx]
        slot.created = True
        return idx

    def on_result(self, idx, t, value):
        b, slot = self.slot_of[idx]
        out = {"stopped": [], "unpause": []}
        if slot not in b.live:
            return "stop", out
        b.update(slot, t)
        slot.result = (t, value)
        slot.status = RUNNING
        b.to_unpause.discard(slot)
        if b.continue_trial(slot):
            return "continue", out
        # ctune: at the last rung a trial that reached it can never continue;
        # Ray pauses it until the bracket finishes and then stops it, ctune
        # stops it at once (same trials stopped, no idle checkpoint).
        if b.halves == 0 and not b.finished():
            return "stop", out
        return self.process(b, slot, out), out

    def process(self, b, cur, out):
        action = "pause"
        # ctune: halves again while the rung is still complete. Ray processes
        # once per event; when a halving readies nobody (int() truncation can
        # leave r unchanged, e.g. eta 1.6) its paused trials wait for an event
        # that never comes.
        while b.cur_iter_done():
            if b.finished():
                for x in list(b.live):
                    if x.status == PAUSED:
                        b.live.remove(x)
                        out["stopped"].append(x.idx)
                if cur is not None and cur in b.live:
                    b.live.remove(cur)
                return "stop"
            good, bad = b.successive_halving(self.sign)
            for x in bad:
                b.live.remove(x)
                if x is cur:
                    action = "stop"
                else:
                    out["stopped"].append(x.idx)
            for x in good:
                if b.continue_trial(x):
                    if x.status == PAUSED:
                        b.to_unpause.add(x)
                        out["unpause"].append(x.idx)
                    elif x is cur:
                        action = "continue"
                elif b.finished():
                    b.live.remove(x)
                    if x is cur:
                        action = "stop"
                    else:
                        out["stopped"].append(x.idx)
        if action == "pause" and cur is not None:
            cur.status = PAUSED
        return action

    def on_end(self, idx):
        b, slot = self.slot_of[idx]
        out = {"stopped": [], "unpause": []}
        if slot not in b.live:
            return out
        b.live.remove(slot)
        b.to_unpause.discard(slot)
        # ctune: every removal processes the bracket (Ray's is_being_processed
        # flag is set at the first halving and never cleared).
        if not b.finished():
            self.process(b, None, out)
        return out

    def choose(self):
        for band in self.bands:
            scrubbed = [b for b in band if b is not None]
            for b in sorted(scrubbed, key=lambda b: b.completion()):
                for x in b.live:
                    if x.status == PAUSED and x in b.to_unpause:
                        x.status = RUNNING
                        return "resume", x.idx
                    if not x.created:
                        # ctune: any not-yet-created trial means "create the
                        # next one" (its index is the lowest not created).
                        return "new", self.create()
        return "wait", None


def case(rng, mode, max_t, eta, num_trials, slots, err_p, frac):
    hb = HyperBand(max_t, eta, mode, num_trials)
    running = {}   # idx -> current t
    last_t = {}
    events = []
    guard = 0
    while guard < 20000:
        guard += 1
        while len(running) < slots:
            kind, idx = hb.choose()
            events.append(["choose", kind, -1 if idx is None else idx])
            if kind == "wait":
                break
            running[idx] = last_t.get(idx, 0)
        if not running:
            break
        idx = rng.choice(sorted(running))
        if rng.random() < err_p:
            out = hb.on_end(idx)
            events.append(["end", idx, out["stopped"], out["unpause"]])
            del running[idx]
            continue
        step = rng.choice([1, 1, 1, 2]) if not frac else round(rng.uniform(0.4, 2.5), 3)
        t = running[idx] + step
        r = rng.random()
        value = float("nan") if r < 0.02 else round(rng.gauss(t * 0.05, 1), 6)
        if isinstance(mode, list):
            # a second objective on a coarse grid (ties), more as noise
            value = [value] + [round(rng.gauss(-t * 0.03, 1) * 2) / 2 for _ in mode[1:]]
        action, out = hb.on_result(idx, t, value)
        events.append(["result", idx, t, value, action, out["stopped"], out["unpause"]])
        last_t[idx] = t
        running[idx] = t
        if action == "continue":
            continue
        del running[idx]
        if action == "stop":
            out = hb.on_end(idx)
            events.append(["end", idx, out["stopped"], out["unpause"]])
    return {"mode": mode, "max_t": max_t, "reduction_factor": eta,
            "num_trials": num_trials, "events": events}


def encode(x):
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def main():
    rng = random.Random(20261313)
    cases = [
        case(rng, "max", 9, 3, 12, 2, 0.0, False),
        case(rng, "min", 27, 3, 40, 3, 0.0, False),
        case(rng, "max", 81, 3, 60, 4, 0.01, False),
        case(rng, "min", 16, 2, 50, 2, 0.02, False),
        case(rng, "max", 30, 3.5, 45, 5, 0.01, True),
        case(rng, "min", 100, 4, 70, 3, 0.005, False),
        case(rng, "max", 5, 3, 30, 8, 0.03, False),
        case(rng, "min", 3.7, 1.6, 25, 2, 0.02, True),
        # several objectives (MO-HyperBand)
        case(rng, ["max", "min"], 27, 3, 60, 3, 0.01, False),
        case(rng, ["min", "max", "min"], 16, 2, 50, 4, 0.02, False),
        case(rng, ["max", "max"], 81, 3, 80, 5, 0.005, False),
    ]
    for c in cases:
        c["events"] = [[[encode(v) for v in x] if isinstance(x, list) and x and
                        isinstance(x[0], float) else encode(x) for x in e] for e in c["events"]]
    with open("hyperband_ray_vectors.json", "w") as f:
        json.dump({"generator": "gen_hyperband_vectors.py", "cases": cases}, f,
                  separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
