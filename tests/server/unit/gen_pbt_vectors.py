#!/usr/bin/python3
"""Writes pbt_ray_vectors.json: random result streams with the decisions of a
Python transcription of Ray Tune's PopulationBasedTraining (asynchronous
mode: ray/tune/schedulers/pbt.py, on_trial_result, _quantiles,
_checkpoint_or_exploit, _exploit, _explore). test_pbt.c replays the streams
through server/core/pbt.c and must agree on every decision, donor and
explored config.

How the draws line up. Ray draws from Python's global `random`; ctune draws
from its own generator (server/core/rng.c), seeded per decision from
rng_mix(rng_mix(seed, trial idx), bits of t) so that a restarted server
draws the same. The transcription keeps Ray's logic and the order of its
draws, and takes each draw from a Python port of ctune's generator:
  random.random()        -> rng_uniform (53 bits)
  random.choice(seq)     -> seq[rng_int_range(0, len(seq))]
  Domain.sample(None)    -> one rng_next() seeds space_generate's stream for
                            the one-key space {"v": domain} (ported here for
                            uniform, loguniform, randint and choice)
So the vectors check Ray's structure (which trials are in which quantile,
when a decision is made, which draw decides what) bit for bit against
ctune's numbers, not against numpy's or Python's generator.

ctune's deliberate differences, kept here too: a NaN metric scores as -inf
(worst); PBT never pauses a trial to let waiting ones run (Ray's
time-multiplexing when other trials are PENDING or PAUSED).

Run: /usr/bin/python3 gen_pbt_vectors.py
"""
import copy
import json
import math
import random as pyrandom
import struct

M64 = (1 << 64) - 1


# ---- a port of server/core/rng.c ----
def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return x, z ^ (z >> 31)


def rng_mix(a, b):
    _, h = splitmix64(a)
    _, r = splitmix64(h ^ b)
    return r


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M64


class Rng:
    def __init__(self, seed):
        x, self.s = seed, []
        for _ in range(4):
            x, z = splitmix64(x)
            self.s.append(z)

    def next(self):
        s = self.s
        result = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def uniform(self):
        return (self.next() >> 11) * 2.0 ** -53

    def uniform_range(self, lo, hi):
        v = lo + (hi - lo) * self.uniform()
        return v if v < hi else lo

    def int_range(self, lo, hi):
        span = hi - lo
        if span <= 0:
            return lo
        limit = M64 - (M64 % span)
        while True:
            x = self.next()
            if x < limit:
                return lo + x % span

    # Python's random API, as Ray calls it
    def random(self):
        return self.uniform()

    def choice(self, seq):
        return seq[self.int_range(0, len(seq))]


def sample_domain(dom, seed):
    """space_generate({"v": dom}, 1, seed)[0]["v"] for the ported domains."""
    r = Rng(rng_mix(seed, 0))
    kind = dom["type"]
    if kind == "uniform":
        return r.uniform_range(dom["lower"], dom["upper"])
    if kind == "loguniform":
        lo, hi = dom["lower"], dom["upper"]
        v = math.exp(r.uniform_range(math.log(lo), math.log(hi)))
        if v < lo:
            v = lo
        if v >= hi:
            v = math.nextafter(hi, lo)
        return v
    if kind == "randint":
        return r.int_range(int(dom["lower"]), int(dom["upper"]))
    if kind == "choice":
        return dom["values"][r.int_range(0, len(dom["values"]))]
    raise ValueError(kind)


def t_bits(t):
    t = float(t)
    if t == 0:
        t = 0.0
    return struct.unpack("<Q", struct.pack("<d", t))[0]


# ---- Ray's _explore, with `random` the decision's stream ----
def explore(config, mutations, resample_probability, perturbation_factors, random):
    new_config = copy.deepcopy(config)
    for key, distribution in mutations.items():
        if isinstance(distribution, dict) and "type" not in distribution:
            new_config.update({key: explore(config[key], mutations[key],
                                            resample_probability,
                                            perturbation_factors, random)})
        elif isinstance(distribution, (list, tuple)):
            if random.random() < resample_probability or config[key] not in distribution:
                new_config[key] = random.choice(distribution)
            else:
                shift = random.choice([-1, 1])
                old_idx = distribution.index(config[key])
                new_idx = min(max(old_idx + shift, 0), len(distribution) - 1)
                new_config[key] = distribution[new_idx]
        else:  # a Domain
            if random.random() < resample_probability:
                new_config[key] = sample_domain(distribution, random.next())
            else:
                perturbation_factor = random.choice(perturbation_factors)
                new_config[key] = config[key] * perturbation_factor
            if isinstance(config[key], int):
                new_config[key] = int(new_config[key])
    return new_config


class TrialState:
    def __init__(self, idx, config):
        self.idx = idx
        self.config = config
        self.finished = False
        self.last_score = None
        self.last_checkpoint = None
        self.last_perturbation_time = 0
        self.last_train_time = 0


class PBT:
    def __init__(self, seed, mode, interval, burn_in, mutations, q, p, factors):
        self.seed = seed
        self._metric_op = 1.0 if mode == "max" else -1.0
        self._perturbation_interval = interval
        self._burn_in_period = burn_in
        self._hyperparam_mutations = mutations
        self._quantile_fraction = q
        self._resample_probability = p
        self._perturbation_factors = factors
        self._trial_state = {}  # insertion order = creation order

    def on_trial_add(self, trial, idx, config):
        self._trial_state[trial] = TrialState(idx, config)

    def on_trial_result(self, trial, time, value):
        state = self._trial_state[trial]
        if time < self._burn_in_period:
            return None
        if time - state.last_perturbation_time < self._perturbation_interval:
            return None
        # _save_trial_state (ctune: NaN scores as -inf)
        score = float("-inf") if math.isnan(value) else self._metric_op * value
        state.last_score = score
        state.last_train_time = time
        state.last_perturbation_time = time
        lower, upper = self._quantiles()
        random = Rng(rng_mix(rng_mix(self.seed, state.idx), t_bits(time)))
        return self._checkpoint_or_exploit(trial, upper, lower, random)

    def _checkpoint_or_exploit(self, trial, upper, lower, random):
        state = self._trial_state[trial]
        if trial in upper:
            state.last_checkpoint = True
        else:
            state.last_checkpoint = None
        out = {"exploit": False}
        if trial in lower:
            trial_to_clone = random.choice(upper)
            assert trial is not trial_to_clone
            clone_state = self._trial_state[trial_to_clone]
            if not clone_state.last_checkpoint:
                return out  # "no checkpoint for trial ...; skip exploit"
            new_config = explore(clone_state.config, self._hyperparam_mutations,
                                 self._resample_probability,
                                 self._perturbation_factors, random)
            state.config = new_config
            state.last_perturbation_time = clone_state.last_perturbation_time
            state.last_train_time = clone_state.last_train_time
            out = {"exploit": True, "donor": trial_to_clone, "config": new_config}
        return out

    def _quantiles(self):
        trials = [t for t, s in self._trial_state.items()
                  if s.last_score is not None and not s.finished]
        trials.sort(key=lambda t: self._trial_state[t].last_score)
        if len(trials) <= 1:
            return [], []
        n = int(math.ceil(len(trials) * self._quantile_fraction))
        if n > len(trials) / 2:
            n = int(math.floor(len(trials) / 2))
        return trials[:n], trials[-n:]


MUTATION_SETS = [
    ({"lr": {"type": "loguniform", "lower": 1e-4, "upper": 1e-1},
      "momentum": [0.5, 0.8, 0.9, 0.95, 0.99]},
     {"lr": {"type": "loguniform", "lower": 1e-4, "upper": 1e-1},
      "momentum": {"type": "choice", "values": [0.5, 0.8, 0.9, 0.95, 0.99]},
      "fixed": "x"}),
    ({"batch_size": {"type": "randint", "lower": 16, "upper": 256},
      "opt": {"wd": {"type": "uniform", "lower": 0.0001, "upper": 0.01},
              "name": ["sgd", "adam", "rmsprop"]},
      "dropout": {"type": "uniform", "lower": 0.05, "upper": 0.5}},
     {"batch_size": {"type": "randint", "lower": 16, "upper": 256},
      "opt": {"wd": {"type": "uniform", "lower": 0.0001, "upper": 0.01},
              "name": {"type": "choice", "values": ["sgd", "adam", "rmsprop"]}},
      "dropout": {"type": "choice", "values": [0.1, 0.2, 0.3, 0.7]}}),
]


def initial_config(space, r):
    out = {}
    for k, v in space.items():
        if isinstance(v, dict) and "type" in v:
            out[k] = sample_domain(v, r.next())
        elif isinstance(v, dict):
            out[k] = initial_config(v, r)
        else:
            out[k] = v
    return out


def case(rng, seed, mode, interval, burn_in, q, p, factors, mset, ntrials, steps, frac):
    mutations, space = MUTATION_SETS[mset]
    pbt = PBT(seed, mode, interval, burn_in, mutations, q, p, factors)
    cfg_rng = Rng(seed ^ 0xABCDEF)
    trials, events, t_of, ids = [], [], {}, []
    for i in range(ntrials):
        tid = 100 + 7 * i  # ids need not be contiguous
        cfg = initial_config(space, cfg_rng)
        pbt.on_trial_add(tid, i, cfg)
        trials.append({"id": tid, "idx": i, "config": cfg})
        t_of[tid] = 0
        ids.append(tid)
    live = list(ids)
    for _ in range(steps):
        if not live:
            break
        tid = rng.choice(live)
        if rng.random() < 0.01 and len(live) > 2:
            live.remove(tid)
            pbt._trial_state[tid].finished = True
            events.append({"end": tid})
            continue
        t_of[tid] += round(rng.uniform(0.4, 1.6), 2) if frac else 1
        t = t_of[tid]
        base = 0.1 * t + (0.5 if "lr" in pbt._trial_state[tid].config else 0)
        value = float("nan") if rng.random() < 0.02 else round(rng.gauss(base, 1.0), 6)
        out = pbt.on_trial_result(tid, t, value)
        ev = {"trial": tid, "t": t, "value": None if math.isnan(value) else value,
              "decided": out is not None, "exploit": bool(out and out["exploit"])}
        if out and out["exploit"]:
            ev["donor"] = out["donor"]
            ev["config"] = out["config"]
            # it resumes from the donor's latest checkpoint: its time continues
            t_of[tid] = t_of[out["donor"]]
        events.append(ev)
    return {"seed": seed, "mode": mode, "perturbation_interval": interval,
            "burn_in_period": burn_in, "quantile_fraction": q,
            "resample_probability": p, "perturbation_factors": factors,
            "hyperparam_mutations": mutations, "trials": trials, "events": events}


def main():
    rng = pyrandom.Random(13)
    cases = [
        case(rng, 1, "max", 2, 0, 0.25, 0.25, [1.2, 0.8], 0, 4, 200, False),
        case(rng, 2, "min", 3, 4, 0.25, 0.25, [1.2, 0.8], 0, 8, 400, False),
        case(rng, 3, "max", 1.5, 0, 0.5, 0.5, [2.0, 0.5, 1.1], 1, 6, 400, True),
        case(rng, 4, "min", 2, 2, 0.1, 0.0, [1.2, 0.8], 1, 12, 600, False),
        case(rng, 5, "max", 4, 0, 0.0, 0.25, [1.2, 0.8], 0, 5, 200, False),
        case(rng, 6, "max", 1, 0, 0.3, 1.0, [1.2, 0.8], 1, 9, 500, True),
        case(rng, 2 ** 52 + 11, "min", 2, 0, 0.25, 0.25, [1.2, 0.8], 1, 3, 200, False),
    ]
    n = sum(len(c["events"]) for c in cases)
    x = sum(1 for c in cases for e in c["events"] if e.get("exploit"))
    d = sum(1 for c in cases for e in c["events"] if e.get("decided"))
    with open("pbt_ray_vectors.json", "w") as f:
        json.dump({"cases": cases}, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"{len(cases)} cases, {n} events, {d} at perturbation points, {x} exploits")


if __name__ == "__main__":
    main()
