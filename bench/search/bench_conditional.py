#!/usr/bin/env python3
"""ctune's TPE on a conditional space (an optimizer whose options hold their
own parameters: docs/scheduling.md#conditional-spaces) next to Optuna 5.0's
TPESampler, define-by-run, with its defaults and with group=True, and
random search: median best value over S seeds of N trials.

The objective: the learning-rate decade matters for every optimizer; each
optimizer's own parameters matter only when it is chosen; the optimum 0 is
adam with lr 1e-3, beta1 0.9 and beta2 0.999.

Usage: bench_conditional.py [--build build] [--seeds 20] [--trials 60]
Reuses bench_search.py's driver (tpe_driver) and Optuna venv.
"""
import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_search as bs  # noqa: E402

SPACE = {
    "lr": {"type": "loguniform", "lower": 1e-5, "upper": 1},
    "optimizer": {"type": "choice", "values": [
        {"name": "sgd", "momentum": {"type": "uniform", "lower": 0, "upper": 1},
         "nesterov": {"type": "choice", "values": [True, False]}},
        {"name": "adam", "beta1": {"type": "uniform", "lower": 0.5, "upper": 0.999},
         "beta2": {"type": "uniform", "lower": 0.9, "upper": 0.9999}},
        {"name": "rmsprop", "rho": {"type": "uniform", "lower": 0, "upper": 1}},
    ]},
}


def objective(c):
    o = c["optimizer"]
    v = (math.log10(c["lr"]) + 3) ** 2 / 4
    if o["name"] == "sgd":
        return v + 0.5 + 4 * (o["momentum"] - 0.9) ** 2 + (0 if o["nesterov"] else 0.2)
    if o["name"] == "adam":
        return v + 20 * (o["beta1"] - 0.9) ** 2 + 400 * (o["beta2"] - 0.999) ** 2
    return v + 0.3 + 4 * (o["rho"] - 0.9) ** 2


def optuna_worker(args):
    import warnings
    import optuna
    warnings.filterwarnings("ignore")
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def suggest(t):
        name = t.suggest_categorical("optimizer", ["sgd", "adam", "rmsprop"])
        c = {"lr": t.suggest_float("lr", 1e-5, 1, log=True), "optimizer": {"name": name}}
        o = c["optimizer"]
        if name == "sgd":
            o["momentum"] = t.suggest_float("momentum", 0, 1)
            o["nesterov"] = t.suggest_categorical("nesterov", [True, False])
        elif name == "adam":
            o["beta1"] = t.suggest_float("beta1", 0.5, 0.999)
            o["beta2"] = t.suggest_float("beta2", 0.9, 0.9999)
        else:
            o["rho"] = t.suggest_float("rho", 0, 1)
        return c

    out = {"version": optuna.__version__}
    for key, kw in (("default", {}), ("group", {"multivariate": True, "group": True})):
        bests = []
        for seed in range(args.seeds):
            study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed, **kw))
            study.optimize(lambda t: objective(suggest(t)), n_trials=args.trials)
            bests.append(study.best_value)
        out[key] = bests
    json.dump(out, sys.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--optuna-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.optuna_worker:
        optuna_worker(args)
        return 0
    bs.ensure_optuna()
    driver = os.path.join(args.build, "bin", "tpe_driver")
    if not os.access(driver, os.X_OK):
        sys.exit(f"bench_conditional: {driver} not found (build the tree first)")
    t0 = time.time()
    opt = subprocess.Popen([bs.VENV_PY, os.path.abspath(__file__), "--optuna-worker",
                            "--seeds", str(args.seeds), "--trials", str(args.trials)],
                           stdout=subprocess.PIPE, text=True)
    drv = bs.Driver(driver)
    best = {}
    for label, alg in (("ctune TPE default", {"type": "tpe"}),
                       ("ctune multivariate=false", {"type": "tpe", "multivariate": False}),
                       ("random", {"type": "tpe", "n_startup_trials": 10 ** 5})):
        best[label] = [bs.run_ctune(drv, SPACE, objective, s, args.trials, alg)
                       for s in range(args.seeds)]
    drv.close()
    out, _ = opt.communicate()
    if opt.returncode:
        sys.exit("bench_conditional: the Optuna run failed")
    o = json.loads(out)
    best[f"Optuna {o['version']} TPESampler()"] = o["default"]
    best["Optuna multivariate, group=True"] = o["group"]
    print(f"{args.trials} trials x {args.seeds} seeds; best value found (optimum 0, lower is "
          "better): median [25th-75th percentile]")
    print("| method | best |")
    print("|---|---|")
    for label, xs in best.items():
        lo, med, hi = bs.quartiles(xs)
        print(f"| {label} | {med:.3f} [{lo:.3f}, {hi:.3f}] |")
    print(f"\nmachine: {platform.machine()}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f} at the end; took {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
