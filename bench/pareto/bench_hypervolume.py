#!/usr/bin/env python3
"""ctune's exact hypervolume (server/core/hypervolume.c, through
bench/pareto/hv_driver) against Optuna 5.0's (optuna._hypervolume.
compute_hypervolume, in the venv bench/search uses) on the same point sets:
random points in the unit cube (most dominated) and points that are all on
the front (on the unit sphere's positive part), 2 to 4 objectives,
reference point 1.1 on each. Prints one row per set: the relative
difference of the two values and each one's time (best of 3).

  cmake --build build-test --target hv_driver
  python3 bench/pareto/bench_hypervolume.py --driver build-test/bin/hv_driver [--quick]
"""
import argparse
import json
import math
import os
import random
import subprocess
import sys

VENV_PY = os.path.expanduser("~/.cache/ctune/optuna-5.0.0/bin/python")

OPTUNA_WORKER = r"""
import json, sys, time
import numpy as np
from optuna._hypervolume import compute_hypervolume
for line in sys.stdin:
    s = json.loads(line)
    pts, ref = np.array(s["points"], dtype=float), np.array(s["ref"], dtype=float)
    best, hv = 1e300, None
    for _ in range(3):
        t0 = time.perf_counter()
        hv = compute_hypervolume(pts, ref)
        best = min(best, time.perf_counter() - t0)
    print(json.dumps([hv, best]), flush=True)
"""


def sets(quick):
    rnd = random.Random(20261127)
    sizes = {2: [100, 1000, 10000], 3: [100, 1000, 10000], 4: [100, 1000]}
    front = {2: [100, 1000, 5000], 3: [100, 300, 1000], 4: [50, 200]}
    if quick:
        sizes, front = {2: [100], 3: [100], 4: [50]}, {2: [50], 3: [50], 4: [30]}
    for k in (2, 3, 4):
        for n in sizes[k]:
            yield "random", k, [[rnd.random() for _ in range(k)] for _ in range(n)]
        for n in front[k]:
            pts = []
            for _ in range(n):
                g = [abs(rnd.gauss(0, 1)) for _ in range(k)]
                norm = math.sqrt(sum(x * x for x in g))
                pts.append([x / norm for x in g])
            yield "front", k, pts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--quick", action="store_true", help="small sets only (a smoke run)")
    args = ap.parse_args()
    if not os.access(VENV_PY, os.X_OK):
        sys.exit("bench_hypervolume: no Optuna venv at " + VENV_PY + " (see bench/search/bench_search.py)")
    ours = subprocess.Popen([args.driver], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    theirs = subprocess.Popen([VENV_PY, "-c", OPTUNA_WORKER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    worst = 0.0
    print("| set | k | n | ctune ms | Optuna 5.0 ms | relative difference |")
    print("|---|---|---|---|---|---|")
    try:
        for kind, k, pts in sets(args.quick):
            ref = [1.1] * k
            ours.stdin.write("%d %d\n%s\n%s\n" % (k, len(pts), "\n".join(
                " ".join(repr(x) for x in p) for p in pts), " ".join(repr(x) for x in ref)))
            ours.stdin.flush()
            line = ours.stdout.readline().split()
            theirs.stdin.write(json.dumps({"points": pts, "ref": ref}) + "\n")
            theirs.stdin.flush()
            hv_o, t_o = json.loads(theirs.stdout.readline())
            if line[0] == "error":
                print("| %s | %d | %d | not computed (%s) | %.2f | - |" % (kind, k, len(pts), line[1], 1e3 * t_o))
                continue
            hv_c, t_c = float(line[0]), float(line[1])
            diff = abs(hv_c - hv_o) / max(abs(hv_o), 1e-300)
            worst = max(worst, diff)
            print("| %s | %d | %d | %.2f | %.2f | %.1e |" % (kind, k, len(pts), 1e3 * t_c, 1e3 * t_o, diff), flush=True)
    finally:
        for p in (ours, theirs):
            p.stdin.close()
            p.wait(timeout=60)
    print("worst relative difference: %.1e" % worst)
    sys.exit(0 if worst <= 1e-9 else 1)


if __name__ == "__main__":
    main()
