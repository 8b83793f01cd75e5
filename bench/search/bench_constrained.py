#!/usr/bin/env python3
"""Outcome constraints: ctune's constrained TPE (server/core/tpe.c through
tpe_driver, each trial's total violation given as the server gives it)
next to Optuna 5's TPESampler with trial.set_constraint, ctune's TPE not
told the violations (the values alone), and random search, on two constrained problems, N trials over S seeds: the median
best *feasible* value (inf when a run found none) and how many runs found
a feasible trial.

- branin-disk: Branin subject to (x1 - 2.5)^2 + (x2 - 7.5)^2 <= 50 (two of
  Branin's three minima lie outside the disk; the optimum 0.397887 at
  (pi, 2.275) inside).
- hartmann6-l1: Hartmann6 subject to x1 + ... + x6 <= 2 (the unconstrained
  optimum sums to 2.07: the constraint is active).

Usage: bench_constrained.py [--build build-test] [--seeds 20] [--trials 40]
Optuna runs in the venv bench_search.py uses (~/.cache/ctune/optuna-5.0.0).
"""
import argparse
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_search import (BRANIN_SPACE, HART_SPACE, ROOT, VENV_PY, Driver,  # noqa: E402
                          branin, ensure_optuna, hartmann6, quartiles)


def disk(c):
    return (c["x1"] - 2.5) ** 2 + (c["x2"] - 7.5) ** 2 - 50


def l1(c):
    return sum(c[f"x{i}"] for i in range(6)) - 2


PROBLEMS = [("branin-disk", BRANIN_SPACE, branin, disk),
            ("hartmann6-l1", HART_SPACE, hartmann6, l1)]


def run_ctune(drv, space, f, g, seed, trials, tell=True):
    drv.call(cmd="create", param_space=space, search_alg={"type": "tpe"}, mode="min", seed=seed)
    best = math.inf
    for i in range(trials):
        cfg = drv.call(cmd="suggest", index=i)["config"]
        v, c = f(cfg), g(cfg)
        if c <= 0:
            best = min(best, v)
        extra = {"violation": max(c, 0)} if tell else {}
        drv.call(cmd="observe", id=i, config=cfg, value=v, state="finished", **extra)
    return best


def run_random(space, f, g, seed, trials):
    r = random.Random(seed)
    best = math.inf
    for _ in range(trials):
        cfg = {k: r.uniform(d["lower"], d["upper"]) for k, d in space.items()}
        if g(cfg) <= 0:
            best = min(best, f(cfg))
    return best


def optuna_worker(args):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = {"version": optuna.__version__, "best": {}}
    for name, space, f, g in PROBLEMS:
        bests = []
        for seed in range(1, args.seeds + 1):
            study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
            best = math.inf
            for _ in range(args.trials):
                trial = study.ask()
                cfg = {k: trial.suggest_float(k, d["lower"], d["upper"]) for k, d in space.items()}
                v, c = f(cfg), g(cfg)
                trial.set_constraint("c", c)
                study.tell(trial, v)
                if c <= 0:
                    best = min(best, v)
            bests.append(best)
        out["best"][name] = bests
    print(json.dumps(out))


def fmt(xs):
    finite = [x for x in xs if math.isfinite(x)]
    med = statistics.median(xs)
    q1, _, q3 = quartiles(xs) if len(finite) == len(xs) else (math.nan, 0, math.nan)
    return f"{med:.4f} [{q1:.4f}, {q3:.4f}] ({len(finite)}/{len(xs)} feasible)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build-test"))
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--optuna-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.optuna_worker:
        optuna_worker(args)
        return 0
    ensure_optuna()
    drv = Driver(os.path.join(args.build, "bin", "tpe_driver"))
    res = {}
    for name, space, f, g in PROBLEMS:
        res[(name, "ctune tpe")] = [run_ctune(drv, space, f, g, s, args.trials)
                                    for s in range(1, args.seeds + 1)]
        res[(name, "ctune tpe, no violations")] = [run_ctune(drv, space, f, g, s, args.trials, False)
                                                   for s in range(1, args.seeds + 1)]
        res[(name, "random")] = [run_random(space, f, g, s, args.trials)
                                 for s in range(1, args.seeds + 1)]
    drv.close()
    o = json.loads(subprocess.run([VENV_PY, os.path.abspath(__file__), "--optuna-worker",
                                   "--seeds", str(args.seeds), "--trials", str(args.trials)],
                                  check=True, capture_output=True, text=True).stdout)
    optuna_label = f"Optuna {o['version']} TPESampler + set_constraint"
    for name, _, _, _ in PROBLEMS:
        res[(name, optuna_label)] = o["best"][name]
    print(f"{args.trials} trials, {args.seeds} seeds, {platform.machine()}; "
          "median best feasible value [IQR]")
    methods = ("ctune tpe", optuna_label, "ctune tpe, no violations", "random")
    print("| problem | " + " | ".join(methods) + " |")
    print("|---" * (len(methods) + 1) + "|")
    for name, _, _, _ in PROBLEMS:
        print(f"| {name} | " + " | ".join(fmt(res[(name, m)]) for m in methods) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
