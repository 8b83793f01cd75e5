#!/usr/bin/env python3
"""MO-ASHA (ctune's asha with two objectives, through sched_driver) against
random search that stops nothing, on a synthetic learning-curve family with
a known Pareto front: both run the same N random configs on W asynchronous
workers; the figure is the hypervolume of the trials' last results and the
trial-iterations spent.

The family (a multi-fidelity ZDT1 read as "model size vs error"): a config
x in [0, 1]^3 has size(x) = x0, known from the start like a parameter count,
and an error curve that falls to ZDT1's second objective at max_t:
  err(x, t) = g (1 - sqrt(x0 / g)) + S (0.5 + x2)(1 + x0)(t^-1/2 - max_t^-1/2)
              + noise (sd 0.01),  g = 1 + 9 x1,  S = --slow (1),
so bigger models learn more slowly (their curves cross), x2 only changes
the speed, and the front at max_t is x1 = 0: err = 1 - sqrt(size). One
iteration takes 0.5 + x0 time units (bigger models are slower). The
hypervolume (both minimised, reference point (1.1, 11): ZDT1's, or --ref)
is computed here exactly; the true front's is printed first.

The criterion (issue: MO-ASHA reaches >= 95% of the no-stopping random
search's hypervolume with at most half its trial-iterations) is checked on
the median over seeds.

Usage: bench_moasha.py [--build build] [--seeds 10] [--trials 200]
       [--workers 8] [--max-t 81] [--rf 3] [--grace 1] [--brackets 1]
       [--ref 1.1 11] [--slow 1]
"""
import argparse
import math
import os
import random
import statistics
import subprocess
import sys
import json

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
REF = (1.1, 11.0)


SLOW = 1.0  # --slow: how far early curves sit above their end


def curve(x, t, max_t, rng):
    g = 1 + 9 * x[1]
    final = g * (1 - math.sqrt(x[0] / g))
    slow = SLOW * (0.5 + x[2]) * (1 + x[0]) * (t ** -0.5 - max_t ** -0.5)
    return final + slow + rng.gauss(0, 0.01)


def hypervolume(points, ref):
    """Exact 2-D hypervolume (both minimised) of the points that dominate ref."""
    pts = sorted((a, b) for a, b in points if a < ref[0] and b < ref[1])
    hv, best_b = 0.0, ref[1]
    for a, b in pts:
        if b < best_b:
            hv += (ref[0] - a) * (best_b - b)
            best_b = b
    return hv


class Driver:
    def __init__(self, exe, cfg):
        self.p = subprocess.Popen([exe], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ask(json.dumps(cfg))

    def ask(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        r = self.p.stdout.readline().strip()
        if r.startswith("error") or not r:
            raise RuntimeError(f"sched_driver: {r!r} after {line!r}")
        return r

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def synthetic(seed, n, max_t):
    """The synthetic family: step(i, t) -> ((size, err), duration)."""
    cfg_rng = random.Random(seed)
    configs = [[cfg_rng.random() for _ in range(3)] for _ in range(n)]
    noise = random.Random(seed * 7919 + 1)

    def step(i, t):
        x = configs[i]
        return (x[0], curve(x, t, max_t, noise)), 0.5 + x[0]
    return step


def run(seed, n, workers, max_t, rf, driver_exe, ref, grace=1, brackets=1, step=None,
        objectives=(("size", "min"), ("err", "min")), score=lambda v: v):
    """One simulated experiment; driver_exe None: no stopping (fifo).
    step(i, t) -> (the result's objective values, its duration) of the i-th
    trial's t-th iteration (the synthetic family by default); score maps a
    result to the minimised pair the hypervolume takes."""
    step = step or synthetic(seed, n, max_t)
    drv = None
    if driver_exe:
        drv = Driver(driver_exe, {
            "metric": [m for m, _ in objectives], "mode": [d for _, d in objectives],
            "num_samples": n, "seed": seed,
            "scheduler": {"type": "asha", "max_t": max_t, "grace_period": grace,
                          "reduction_factor": rf, "brackets": brackets},
            "trainable": {"type": "command", "argv": ["true"]}})
    clock = [0.0] * workers
    running = [None] * workers  # [trial index, t]
    nxt, iters, last, stops = 0, 0, {}, 0
    while True:
        for w in range(workers):
            if running[w] is None and nxt < n:
                running[w] = [nxt, 0]
                if drv:
                    drv.ask(f"add {nxt} {nxt}")
                nxt += 1
        live = [w for w in range(workers) if running[w] is not None]
        if not live:
            break
        w = min(live, key=lambda i: (clock[i], i))
        i, t = running[w]
        t += 1
        running[w][1] = t
        v, took = step(i, t)
        clock[w] += took
        iters += 1
        last[i] = score(v)
        stop = t >= max_t
        if drv:
            d = drv.ask(f"result {i} {t} " + " ".join(repr(float(x)) for x in v))
            if d.startswith("stop"):
                stop = True
                stops += t < max_t
                drv.ask(f"end {i} {t}")
        if stop:
            running[w] = None
    if drv:
        drv.close()
    return {"hv": hypervolume(last.values(), ref), "iters": iters, "stopped": stops,
            "makespan": max(clock)}


# ---------- the real Fashion-MNIST cnn: accuracy vs parameter count ----------

def fmnist_table(path, train_bin, n, max_t, seed, jobs, train_limit):
    """Every config's whole learning curve, trained once with ctune-train
    (deterministic: a trial stopped at t saw exactly the table's first t
    results), cached in path: [{"config", "params", "curve": [[accuracy,
    time_this_iter_s], ...]}]."""
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    import re
    rng = random.Random(seed)
    configs = [{"l1": 2 ** rng.randint(2, 8), "l2": 2 ** rng.randint(2, 8),
                "lr": round(10 ** rng.uniform(-3, -0.7), 6),
                "batch_size": rng.choice([16, 32, 64])} for _ in range(n)]
    table, procs, todo = [None] * n, {}, list(range(n))
    while todo or procs:
        while todo and len(procs) < jobs:
            i = todo.pop(0)
            c = configs[i]
            argv = [train_bin, "--model", "cnn", "--dataset", "fashion-mnist", "--epochs",
                    str(max_t), "--train-limit", str(train_limit), "--threads", "1", "--seed",
                    "1", "--momentum", "0.9"] + [a for k, v in c.items()
                                                  for a in ("--" + k.replace("_", "-"), str(v))]
            procs[i] = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)
        done = [i for i, p in procs.items() if p.poll() is not None]
        if not done:
            next(iter(procs.values())).wait()
            continue
        for i in done:
            out, err = procs.pop(i).communicate()
            lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
            m = re.search(r"(\d+) params", err)
            if len(lines) != max_t or not m:
                raise RuntimeError(f"ctune-train config {configs[i]}: {err[-500:]}")
            table[i] = {"config": configs[i], "params": int(m.group(1)),
                        "curve": [[x["accuracy"], x["time_this_iter_s"]] for x in lines]}
            print(f"trained {i + 1}/{n}: {configs[i]} -> {lines[-1]['accuracy']}", flush=True)
    with open(path, "w") as f:
        json.dump(table, f)
    return table


def compare(args, exe, ref, n, setup):
    """Per seed: random search without stopping, MO-ASHA, and random search
    given MO-ASHA's iterations ("same budget": its first iters / max_t
    configs run to the end, the control that shows the hypervolume tells a
    smaller budget apart). setup(seed) -> run()'s step/objectives/score.
    Returns the three ratio lists."""
    print("seed | random HV | MO-ASHA HV | HV ratio | same-budget random HV | random iters | "
          "MO-ASHA iters | iter ratio | stopped early")
    ratios, iratios, sratios = [], [], []
    for seed in range(1, args.seeds + 1):
        kw = setup(seed)
        a = run(seed, n, args.workers, args.max_t, args.rf, None, ref, **kw)
        b = run(seed, n, args.workers, args.max_t, args.rf, exe, ref, args.grace, args.brackets,
                **kw)
        c = run(seed, max(1, math.ceil(b["iters"] / args.max_t)), args.workers, args.max_t,
                args.rf, None, ref, **kw)
        ratios.append(b["hv"] / a["hv"])
        iratios.append(b["iters"] / a["iters"])
        sratios.append(c["hv"] / a["hv"])
        print(f"{seed} | {a['hv']:.4f} | {b['hv']:.4f} | {ratios[-1]:.3f} | {c['hv']:.4f} "
              f"({sratios[-1]:.3f}) | {a['iters']} | {b['iters']} | {iratios[-1]:.3f} | "
              f"{b['stopped']}")
    return ratios, iratios, sratios


def fmnist_main(args, exe):
    table = fmnist_table(args.fmnist, os.path.join(args.build, "bin", "ctune-train"),
                         args.trials, args.max_t, 20261127, args.jobs, args.train_limit)
    pmax = max(x["params"] for x in table)
    ref = (0.5, 1.1)  # (error, params / the largest model's)

    def score(v):
        return (1 - v[0], v[1] / pmax)

    def setup(seed):
        order = list(range(len(table)))
        random.Random(seed).shuffle(order)  # another arrival order per seed

        def step(i, t):
            x = table[order[i]]
            return (x["curve"][t - 1][0], x["params"]), x["curve"][t - 1][1]
        return dict(step=step, objectives=(("accuracy", "max"), ("params", "min")), score=score)
    print(f"Fashion-MNIST cnn, {len(table)} configs (train_limit {args.train_limit}), "
          f"{args.workers} workers, max_t {args.max_t}, grace {args.grace}, rf {args.rf}; "
          f"hypervolume of (1 - accuracy, params / {pmax}) to {ref}")
    return compare(args, exe, ref, len(table), setup)


def synthetic_main(args, exe, ref):
    # The true front's hypervolume (x1 = 0: err = 1 - sqrt(size)), numerically.
    front = [(s / 10000, 1 - math.sqrt(s / 10000)) for s in range(10001)]
    print(f"front's hypervolume (ref {ref}): {hypervolume(front, ref):.4f}")
    print(f"{args.trials} trials, {args.workers} workers, max_t {args.max_t}, "
          f"grace {args.grace}, brackets {args.brackets}, rf {args.rf}, slow {args.slow}, "
          f"{args.seeds} seeds")
    return compare(args, exe, ref, args.trials, lambda seed: {})


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--max-t", type=int, default=81)
    ap.add_argument("--rf", type=float, default=3)
    ap.add_argument("--ref", type=float, nargs=2, default=REF,
                    help="reference point (size, err); ZDT1's (1.1, 11) by default")
    ap.add_argument("--grace", type=float, default=1)
    ap.add_argument("--brackets", type=int, default=1)
    ap.add_argument("--fmnist", metavar="TABLE",
                    help="the real cnn instead: learning curves cached in TABLE (made with "
                         "BUILD/bin/ctune-train when missing)")
    ap.add_argument("--jobs", type=int, default=2, help="--fmnist: trainings at once")
    ap.add_argument("--train-limit", type=int, default=6000, help="--fmnist: images per run")
    ap.add_argument("--slow", type=float, default=1.0,
                    help="scale of the early-curve term: larger makes early ranks lie more")
    args = ap.parse_args()
    ref = tuple(args.ref)
    global SLOW
    SLOW = args.slow
    exe = os.path.join(args.build, "bin", "sched_driver")
    if not os.path.exists(exe):
        sys.exit(f"{exe} missing: cmake --build {args.build} --target sched_driver")
    if args.fmnist:
        ratios, iratios, sratios = fmnist_main(args, exe)
    else:
        ratios, iratios, sratios = synthetic_main(args, exe, ref)
    hv, it = statistics.median(ratios), statistics.median(iratios)
    print(f"median HV ratio {hv:.3f} (min {min(ratios):.3f}), median iteration ratio "
          f"{it:.3f} (max {max(iratios):.3f}); same-budget random: median HV ratio "
          f"{statistics.median(sratios):.3f}")
    ok = hv >= 0.95 and it <= 0.5
    print("PASS" if ok else "FAIL", "(>= 0.95 of the hypervolume with <= 0.5 of the iterations)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
