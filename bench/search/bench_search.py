#!/usr/bin/env python3
"""ctune's TPE (server/core/tpe.c through tpe_driver) next to Optuna's
TPESampler and random search on Branin, Hartmann6 and a mixed space
(categorical + integer + pow2 + log-scale), N trials each over S seeds:
median best value and IQR per method; then ctune's suggestion time with
1,000 and 10,000 finished trials (and Optuna's with 1,000).

The headline compares the defaults as users get them: ctune's
{"type": "tpe"} alone (the defaults a new experiment gets written in) with
Optuna's TPESampler(); it passes when ctune's median is no worse than
Optuna's on every objective. Both are also run with the independent
(univariate) model: ctune "multivariate": false, Optuna multivariate=False.

With --suite mo (use --trials 100): several objectives, ZDT1 (5 variables,
reference point (1.1, 11)) and DTLZ2 (3 objectives, 12 variables, reference
point (1.1, 1.1, 1.1)): the median final hypervolume (computed here, in
Python) of ctune's {"type": "tpe"} against Optuna's TPESampler() and
NSGAIISampler(), ctune set up as Optuna 5.0's MOTPE, and random search; it
passes when ctune's default median is no lower than both of Optuna's.

Each single-objective run also prints the defaults paired seed by seed
(the same seed for both; the metric is the best value in N trials): the
median and mean of ctune - Optuna, wins/losses, an exact two-sided sign test
and the Wilcoxon signed-rank test (normal approximation, ties and zeros as
dropped) - the medians alone move with a few seeds.

Usage: bench_search.py [--build build] [--seeds 20] [--trials 40] [--quick]
                       [--suite so|mo] [--seed-start 0] [--save F]
                       [--optuna-from F] [--only-default]
--save F writes every per-seed value as JSON; --optuna-from F takes
Optuna's values from such a file (or from the worker's own JSON) instead of
running Optuna again (its runs are deterministic for a seed);
--only-default runs ctune's default alone (not random, not independent).
Optuna runs in ~/.cache/ctune/optuna-5.0.0 (scripts/install-deps with
CTUNE_BENCH_DEPS=1 installs it; this script runs that when it is missing).
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
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VENV = os.path.expanduser("~/.cache/ctune/optuna-5.0.0")
VENV_PY = os.path.join(VENV, "bin", "python")

# ---------- objectives (minimised) ----------

BRANIN_SPACE = {"x1": {"type": "uniform", "lower": -5, "upper": 10},
                "x2": {"type": "uniform", "lower": 0, "upper": 15}}


def branin(c):
    x1, x2 = c["x1"], c["x2"]
    b, cc, r, s, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 6, 10, 1 / (8 * math.pi)
    return (x2 - b * x1 ** 2 + cc * x1 - r) ** 2 + s * (1 - t) * math.cos(x1) + s


HART_A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
          [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
HART_P = [[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
          [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]]
HART_ALPHA = [1.0, 1.2, 3.0, 3.2]
HART_SPACE = {f"x{i}": {"type": "uniform", "lower": 0, "upper": 1} for i in range(6)}


def hartmann6(c):
    x = [c[f"x{i}"] for i in range(6)]
    total = 0.0
    for i in range(4):
        inner = sum(HART_A[i][j] * (x[j] - HART_P[i][j] * 1e-4) ** 2 for j in range(6))
        total += HART_ALPHA[i] * math.exp(-inner)
    return -total


# A network-like mixed space: the optimiser picks the best learning rate
# decade; layers and width are integers; optimum 0 at adam, lr 1e-3,
# 4 layers, width 128.
MIXED_SPACE = {"optimizer": {"type": "choice", "values": ["sgd", "adam", "rmsprop"]},
               "lr": {"type": "loguniform", "lower": 1e-5, "upper": 1},
               "layers": {"type": "randint", "lower": 1, "upper": 9},
               "width": {"type": "pow2", "lower": 8, "upper": 1024}}
MIXED_CENTRE = {"sgd": (-1.0, 0.3), "adam": (-3.0, 0.0), "rmsprop": (-2.5, 0.5)}


def mixed(c):
    centre, offset = MIXED_CENTRE[c["optimizer"]]
    return ((math.log10(c["lr"]) - centre) ** 2 + 0.125 * (c["layers"] - 4) ** 2 +
            0.25 * (math.log2(c["width"]) - 7) ** 2 + offset)


OBJECTIVES = [("branin", BRANIN_SPACE, branin, 0.397887),
              ("hartmann6", HART_SPACE, hartmann6, -3.32237),
              ("mixed", MIXED_SPACE, mixed, 0.0)]

# ---------- several objectives (both minimised) ----------

ZDT1_N = 5
ZDT1_SPACE = {f"x{i}": {"type": "uniform", "lower": 0, "upper": 1} for i in range(ZDT1_N)}


def zdt1(c):
    x = [c[f"x{i}"] for i in range(ZDT1_N)]
    g = 1 + 9 * sum(x[1:]) / (ZDT1_N - 1)
    return [x[0], g * (1 - math.sqrt(x[0] / g))]


# DTLZ2 with 3 objectives and k = 10 distance variables (Deb et al.'s
# choice): 12 variables in [0, 1]; the front is the unit sphere's octant.
DTLZ2_M, DTLZ2_N = 3, 12
DTLZ2_SPACE = {f"x{i}": {"type": "uniform", "lower": 0, "upper": 1} for i in range(DTLZ2_N)}


def dtlz2(c):
    x = [c[f"x{i}"] for i in range(DTLZ2_N)]
    g = sum((xi - 0.5) ** 2 for xi in x[DTLZ2_M - 1:])
    f = []
    for m in range(DTLZ2_M):
        v = 1 + g
        for xi in x[:DTLZ2_M - 1 - m]:
            v *= math.cos(xi * math.pi / 2)
        if m:
            v *= math.sin(x[DTLZ2_M - 1 - m] * math.pi / 2)
        f.append(v)
    return f


MO_OBJECTIVES = [("zdt1", ZDT1_SPACE, zdt1, [1.1, 11.0]),
                 ("dtlz2", DTLZ2_SPACE, dtlz2, [1.1, 1.1, 1.1])]


def hypervolume(points, ref):
    """Exact hypervolume of minimised points up to ref (2 or 3 objectives),
    written here independently of ctune's C code: a sweep in 2-D, slices
    along the last objective in 3-D."""
    pts = [p for p in points if all(a < r for a, r in zip(p, ref))]
    if not pts:
        return 0.0
    if len(ref) == 2:
        vol, ybest = 0.0, ref[1]
        for x, y in sorted(pts):
            if y < ybest:
                vol += (ref[0] - x) * (ybest - y)
                ybest = y
        return vol
    pts.sort(key=lambda p: p[2])
    vol = 0.0
    for i, p in enumerate(pts):
        top = pts[i + 1][2] if i + 1 < len(pts) else ref[2]
        if top > p[2]:
            vol += hypervolume([q[:2] for q in pts[:i + 1]], ref[:2]) * (top - p[2])
    return vol

# ---------- ctune through tpe_driver ----------


class Driver:
    def __init__(self, path):
        self.p = subprocess.Popen([path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, bufsize=1)

    def call(self, **cmd):
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        r = json.loads(self.p.stdout.readline())
        if "error" in r:
            raise RuntimeError(f"tpe_driver: {r}")
        return r

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def run_ctune(drv, space, f, seed, trials, alg):
    drv.call(cmd="create", param_space=space, search_alg=alg, mode="min", seed=seed)
    best = math.inf
    for i in range(trials):
        cfg = drv.call(cmd="suggest", index=i)["config"]
        v = f(cfg)
        best = min(best, v)
        drv.call(cmd="observe", id=i, config=cfg, value=v, state="finished")
    return best


def run_ctune_mo(drv, space, f, ref, seed, trials, alg):
    drv.call(cmd="create", param_space=space, search_alg=alg, modes=["min"] * len(ref), seed=seed)
    pts = []
    for i in range(trials):
        cfg = drv.call(cmd="suggest", index=i)["config"]
        v = f(cfg)
        pts.append(v)
        drv.call(cmd="observe", id=i, config=cfg, values=v, state="finished")
    return hypervolume(pts, ref)


def ctune_timing(drv, space, f, n, repeats):
    """Median tpe_suggest time (ms) with n finished random trials."""
    rnd = {"type": "tpe", "n_startup_trials": 10 ** 5}
    drv.call(cmd="create", param_space=space, search_alg=rnd, mode="min", seed=1)
    cfgs = [drv.call(cmd="suggest", index=i)["config"] for i in range(n)]
    out = {}
    for alg in ({"type": "tpe", "multivariate": False}, {"type": "tpe", "multivariate": True}):
        drv.call(cmd="create", param_space=space, search_alg=alg, mode="min", seed=1)
        for i, c in enumerate(cfgs):
            drv.call(cmd="observe", id=i, config=c, value=f(c), state="finished")
        times = [drv.call(cmd="suggest", index=n + k)["us"] / 1000 for k in range(repeats)]
        out["multivariate" if alg.get("multivariate") else "independent"] = statistics.median(times)
    return out

# ---------- Optuna (runs inside the venv: --optuna-worker) ----------


def optuna_worker(args):
    import warnings
    import optuna
    warnings.filterwarnings("ignore")
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def suggest(trial, name):
        if name == "branin":
            return {"x1": trial.suggest_float("x1", -5, 10), "x2": trial.suggest_float("x2", 0, 15)}
        if name == "hartmann6":
            return {f"x{i}": trial.suggest_float(f"x{i}", 0, 1) for i in range(6)}
        return {"optimizer": trial.suggest_categorical("optimizer", ["sgd", "adam", "rmsprop"]),
                "lr": trial.suggest_float("lr", 1e-5, 1, log=True),
                "layers": trial.suggest_int("layers", 1, 8),
                "width": 2 ** trial.suggest_int("width_exp", 3, 10)}

    if args.suite == "mo":
        result = {"version": optuna.__version__, "hv": {}}
        for label, make in (("motpe", lambda s: optuna.samplers.TPESampler(seed=s)),
                            ("nsga2", lambda s: optuna.samplers.NSGAIISampler(seed=s))):
            result["hv"][label] = {}
            for name, space, f, ref in MO_OBJECTIVES:
                hvs = []
                for seed in seed_range(args):
                    study = optuna.create_study(directions=["minimize"] * len(ref),
                                                sampler=make(seed))
                    study.optimize(lambda t: f({k: t.suggest_float(k, 0, 1) for k in space}),
                                   n_trials=args.trials)
                    hvs.append(hypervolume([t.values for t in study.trials], ref))
                result["hv"][label][name] = hvs
        json.dump(result, sys.stdout)
        return

    fns = {name: f for name, _, f, _ in OBJECTIVES}
    # TPESampler() as users create it (Optuna 5.0: multivariate, constant
    # liar), and with multivariate=False (the independent model).
    result = {"version": optuna.__version__, "best": {}, "best_ind": {}, "timing_ms": None,
              "seeds": [args.seed_start, args.seeds], "trials": args.trials}
    for key, kw in (("best", {}), ("best_ind", {"multivariate": False})):
        for name, _, f, _ in OBJECTIVES:
            bests = []
            for seed in seed_range(args):
                study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed, **kw))
                study.optimize(lambda t: fns[name](suggest(t, name)), n_trials=args.trials)
                bests.append(study.best_value)
            result[key][name] = bests
    if not args.quick:
        # Suggestion time with 1,000 finished trials (Hartmann6, defaults).
        study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=1))
        dists = {f"x{i}": optuna.distributions.FloatDistribution(0, 1) for i in range(6)}
        rng = random.Random(1)
        for _ in range(1000):
            params = {k: rng.random() for k in dists}
            study.add_trial(optuna.trial.create_trial(params=params, distributions=dists,
                                                      value=hartmann6(params)))
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            trial = study.ask()
            suggest(trial, "hartmann6")
            times.append((time.perf_counter() - t0) * 1000)
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        result["timing_ms"] = statistics.median(times)
    json.dump(result, sys.stdout)

# ---------- main ----------


def ensure_optuna():
    if os.access(VENV_PY, os.X_OK):
        return
    print("optuna venv missing: running scripts/install-deps with CTUNE_BENCH_DEPS=1", flush=True)
    env = dict(os.environ, CTUNE_BENCH_DEPS="1")
    subprocess.call([os.path.join(ROOT, "scripts", "install-deps")], env=env)
    if not os.access(VENV_PY, os.X_OK):
        sys.exit(f"bench_search: Optuna is not installed ({VENV_PY} missing after "
                 "CTUNE_BENCH_DEPS=1 scripts/install-deps); cannot compare")


def seed_range(args):
    return range(args.seed_start, args.seed_start + args.seeds)


def seed_text(args):
    return f"seeds {args.seed_start}-{args.seed_start + args.seeds - 1}"


class OptunaFromFile:
    """Stands for the Optuna worker's process: its JSON from a file."""

    def __init__(self, args):
        with open(args.optuna_from) as f:
            o = json.load(f)
        o = o.get("optuna", o)
        lists = o["hv"]["motpe"] if args.suite == "mo" else o["best"]
        if any(len(v) != args.seeds for v in lists.values()):
            sys.exit(f"bench_search: {args.optuna_from} holds other seeds than {seed_text(args)}")
        if o.get("seeds", [args.seed_start])[0] != args.seed_start:
            sys.exit(f"bench_search: {args.optuna_from} starts at seed {o['seeds'][0]}, "
                     f"not {args.seed_start}")
        self.text, self.returncode = json.dumps(o), 0

    def communicate(self):
        return self.text, None


def save(args, data, o):
    """--save: every per-seed value, ctune's by method and Optuna's as its
    worker gave them."""
    if not args.save:
        return
    ours = {}
    for (name, label), vals in data.items():
        ours.setdefault(label, {})[name] = vals
    with open(args.save, "w") as f:
        json.dump({"suite": args.suite, "seeds": [args.seed_start, args.seeds],
                   "trials": args.trials, "by_method": ours, "optuna": o}, f)


def quartiles(xs):
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], statistics.median(xs), q[2]


def sign_test(diffs):
    """Exact two-sided sign test of the nonzero differences: p-value."""
    pos = sum(d > 0 for d in diffs)
    neg = sum(d < 0 for d in diffs)
    n, k = pos + neg, min(pos, neg)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


def wilcoxon(diffs):
    """Wilcoxon signed-rank test, zeros dropped, ties given their mean
    rank, normal approximation with the tie correction: (W+, z, two-sided
    p). Negative z: the differences lean negative."""
    d = sorted((abs(x), x > 0) for x in diffs if x != 0)
    n = len(d)
    if n == 0:
        return 0.0, 0.0, 1.0
    wplus, tie, i = 0.0, 0.0, 0
    while i < n:
        j = i
        while j + 1 < n and d[j + 1][0] == d[i][0]:
            j += 1
        rank, t = (i + j) / 2 + 1, j - i + 1
        tie += t ** 3 - t
        wplus += rank * sum(1 for k in range(i, j + 1) if d[k][1])
        i = j + 1
    mean = n * (n + 1) / 4
    var = n * (n + 1) * (2 * n + 1) / 24 - tie / 48
    z = (wplus - mean) / math.sqrt(var) if var > 0 else 0.0
    return wplus, z, math.erfc(abs(z) / math.sqrt(2))


def print_paired(head, names, ours, theirs, data, better):
    """Per-seed pairs data[(name, ours)][i] against data[(name, theirs)][i]
    (the same seed): the difference ours - theirs, where better is "lower"
    or "higher"."""
    print(f"| {head} | median diff | mean diff | ctune better / worse / tie | "
          "sign test p | Wilcoxon z, p |")
    print("|---|---|---|---|---|---|")
    for title, key in names:
        a, b = data[(key, ours)], data[(key, theirs)]
        diffs = [x - y for x, y in zip(a, b)]
        good = sum((x < 0) if better == "lower" else (x > 0) for x in diffs)
        bad = sum((x > 0) if better == "lower" else (x < 0) for x in diffs)
        _, z, p = wilcoxon(diffs)
        print(f"| {title} | {statistics.median(diffs):+.3f} | {statistics.mean(diffs):+.3f} | "
              f"{good} / {bad} / {len(diffs) - good - bad} | {sign_test(diffs):.3f} | "
              f"{z:+.2f}, {p:.3f} |")


def print_table(head, labels, rows, data):
    """A markdown table: one row per (title, key), one column per label,
    each cell data[(key, label)]'s median [25th, 75th percentile]."""
    print(f"| {head} | " + " | ".join(labels) + " |")
    print("|---" * (len(labels) + 1) + "|")
    for title, key in rows:
        cells = []
        for lab in labels:
            lo, med, hi = quartiles(data[(key, lab)])
            cells.append(f"{med:.3f} [{lo:.3f}, {hi:.3f}]")
        print(f"| {title} | " + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--seed-start", type=int, default=0, help="first seed (default 0)")
    ap.add_argument("--quick", action="store_true", help="skip the timing part")
    ap.add_argument("--suite", choices=["so", "mo"], default="so",
                    help="so: Branin, Hartmann6, mixed (best value); mo: ZDT1 and DTLZ2 "
                         "(final hypervolume; use --trials 100)")
    ap.add_argument("--save", help="write every per-seed value to this JSON file")
    ap.add_argument("--optuna-from", help="Optuna's per-seed values from this JSON file "
                    "(a --save file or the Optuna worker's output) instead of running it")
    ap.add_argument("--only-default", action="store_true",
                    help="ctune's default alone (so: no independent or random runs)")
    ap.add_argument("--optuna-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.optuna_worker:
        optuna_worker(args)
        return 0

    driver = os.path.join(args.build, "bin", "tpe_driver")
    if not os.access(driver, os.X_OK):
        sys.exit(f"bench_search: {driver} not found (build the tree first)")
    t0 = time.time()
    if args.optuna_from:
        opt = OptunaFromFile(args)
    else:
        ensure_optuna()
        wargs = [VENV_PY, os.path.abspath(__file__), "--optuna-worker", "--seeds",
                 str(args.seeds), "--seed-start", str(args.seed_start), "--trials",
                 str(args.trials), "--suite", args.suite] + (["--quick"] if args.quick else [])
        opt = subprocess.Popen(wargs, stdout=subprocess.PIPE, text=True)

    drv = Driver(driver)
    if args.suite == "mo":
        return main_mo(args, drv, opt, t0)
    methods = [("ctune TPE default", {"type": "tpe"}),
               ("ctune multivariate=false", {"type": "tpe", "multivariate": False}),
               ("random", {"type": "tpe", "n_startup_trials": 10 ** 5})]
    if args.only_default:
        methods = methods[:1]
    best = {}
    for name, space, f, _ in OBJECTIVES:
        for label, alg in methods:
            best[(name, label)] = [run_ctune(drv, space, f, s, args.trials, alg)
                                   for s in seed_range(args)]
    timing = {}
    if not args.quick:
        for n in (1000, 10000):
            timing[("hartmann6", n)] = ctune_timing(drv, HART_SPACE, hartmann6, n, 21)
            timing[("mixed", n)] = ctune_timing(drv, MIXED_SPACE, mixed, n, 21)
    drv.close()
    out, _ = opt.communicate()
    if opt.returncode:
        sys.exit("bench_search: the Optuna run failed")
    o = json.loads(out)
    optuna_mv = f"Optuna {o['version']} TPESampler()"
    optuna_ind = "Optuna multivariate=False"
    for name, _, _, _ in OBJECTIVES:
        best[(name, optuna_mv)] = o["best"][name]
        best[(name, optuna_ind)] = o["best_ind"][name]

    save(args, best, o)
    print(f"{args.trials} trials x {args.seeds} seeds ({seed_text(args)}); best value found (lower is better): "
          "median [25th-75th percentile]")
    labels = ["ctune TPE default", optuna_mv, "ctune multivariate=false", optuna_ind, "random"]
    if args.only_default:
        labels = labels[:2]
    rows = [(f"{name} ({opt_v:g})", name) for name, _, _, opt_v in OBJECTIVES]
    print_table("objective (optimum)", labels, rows, best)
    print()
    print(f"Paired by seed, ctune TPE default - {optuna_mv} (best value; negative: ctune better):")
    print_paired("objective", rows, "ctune TPE default", optuna_mv, best, "lower")
    verdict, defaults_ok = [], True
    pairs = (("ctune TPE default", optuna_mv), ("ctune multivariate=false", optuna_ind))
    for name, _, _, opt_v in OBJECTIVES:
        rd = quartiles(best[(name, "random")]) if not args.only_default else None
        # The defaults: ctune's median no worse than Optuna's median. The
        # independent pair, for information: within Optuna's 75th percentile.
        for ours, theirs in pairs[:1] if args.only_default else pairs:
            ct, op = quartiles(best[(name, ours)]), quartiles(best[(name, theirs)])
            default = ours == "ctune TPE default"
            ok = ct[1] <= op[1 if default else 2]
            defaults_ok = defaults_ok and (ok or not default)
            line = (f"{name}: {ours} median {ct[1]:.3f} vs {theirs} "
                    f"{'median' if default else '75th percentile'} "
                    f"{op[1 if default else 2]:.3f}: {'ok' if ok else 'WORSE'}")
            if rd:
                line += (f"; beats random (median {rd[1]:.3f}): ctune "
                         f"{'yes' if ct[1] < rd[1] else 'NO'}, Optuna {'yes' if op[1] < rd[1] else 'NO'}")
            verdict.append(line)
    print()
    for v in verdict:
        print(v)
    print("defaults: ctune's median no worse than Optuna's on every objective: "
          + ("yes" if defaults_ok else "NO"))
    if timing:
        print()
        print("suggestion time (median of 21, ms), with N finished trials:")
        print("| space | N | ctune independent | ctune multivariate |")
        print("|---|---|---|---|")
        for (space, n), t in sorted(timing.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            print(f"| {space} | {n} | {t['independent']:.2f} | {t['multivariate']:.2f} |")
        if o.get("timing_ms") is not None:
            print(f"Optuna {o['version']} TPESampler (multivariate default), hartmann6, "
                  f"1000 finished: {o['timing_ms']:.0f} ms per trial (median of 5)")
    print()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f} at the end; took {time.time() - t0:.0f} s")
    return 0


def main_mo(args, drv, opt, t0):
    # "as Optuna 5.0": the independent model and flat below weights, what
    # TPESampler() does with several objectives.
    methods = [("ctune TPE default", {"type": "tpe"}),
               ("ctune as Optuna 5.0", {"type": "tpe", "multivariate": False,
                                        "below_weights": "flat"}),
               ("random", {"type": "tpe", "n_startup_trials": 10 ** 5})]
    if args.only_default:
        methods = methods[:1]
    hv = {}
    for name, space, f, ref in MO_OBJECTIVES:
        for label, alg in methods:
            hv[(name, label)] = [run_ctune_mo(drv, space, f, ref, s, args.trials, dict(alg))
                                 for s in seed_range(args)]
    drv.close()
    out, _ = opt.communicate()
    if opt.returncode:
        sys.exit("bench_search: the Optuna run failed")
    o = json.loads(out)
    mv, ns = f"Optuna {o['version']} TPESampler()", "Optuna NSGAIISampler()"
    for name, _, _, _ in MO_OBJECTIVES:
        hv[(name, mv)] = o["hv"]["motpe"][name]
        hv[(name, ns)] = o["hv"]["nsga2"][name]
    save(args, hv, o)
    print(f"{args.trials} trials x {args.seeds} seeds ({seed_text(args)}); final hypervolume (higher is better): "
          "median [25th-75th percentile]")
    labels = ["ctune TPE default", mv, ns, "ctune as Optuna 5.0", "random"]
    if args.only_default:
        labels = [labels[0], mv, ns]
    rows = [(f"{name} ({', '.join(f'{r:g}' for r in ref)})", name)
            for name, _, _, ref in MO_OBJECTIVES]
    print_table("problem (reference point)", labels, rows, hv)
    for lab in (mv, ns):
        print()
        print(f"Paired by seed, ctune TPE default - {lab} (hypervolume; positive: ctune better):")
        print_paired("problem", rows, labels[0], lab, hv, "higher")
    ok = True
    for name, _, _, ref in MO_OBJECTIVES:
        ours = statistics.median(hv[(name, labels[0])])
        for lab in (mv, ns):
            ok = ok and ours >= statistics.median(hv[(name, lab)])
    print()
    print("ctune's default median >= Optuna's MOTPE and NSGA-II on both: " + ("yes" if ok else "NO"))
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f} at the end; took {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
