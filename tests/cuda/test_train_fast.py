#!/usr/bin/env python3
"""ctune-train's CUDA fast steps on the CUDA test double (libctune-cuda-
double.so, whose counters mock_cuda_report.c writes at exit to
$CTUNE_MOCK_COUNTS): the data set goes to the device once, each step is one
graph replay, the loss is read every 64 steps (BACKEND_CUDA_LOSS_EVERY) and
at the end of an epoch. Checks that the per-epoch losses are the CPU
trainer's, that the host waits at most once per 64 steps (plus a few per
epoch for evaluation), and that a divergence is still exit 5.

usage: test_train_fast.py PATH/TO/ctune-train-cudadouble"""
import json
import math
import os
import subprocess
import sys
import tempfile

EXE = os.path.abspath(sys.argv[1])
DATA = os.environ.get("CTUNE_DATA_DIR", "/usr/share/datasets/fashion-mnist")
BASE = ["--model", "mlp", "--l1", "64", "--l2", "32", "--dataset",
        "fashion-mnist", "--data-dir", DATA, "--momentum", "0.9",
        "--threads", "1", "--seed", "5"]
LOSS_EVERY = 64


def run(args, tmp):
    counts = os.path.join(tmp, "counts.json")
    if os.path.exists(counts):
        os.unlink(counts)
    env = dict(os.environ, CTUNE_MOCK_GPUS="1", CTUNE_MOCK_COUNTS=counts)
    p = subprocess.run([EXE] + args, cwd=tmp, env=env, capture_output=True,
                       text=True, timeout=100)
    c = None
    if os.path.exists(counts):
        with open(counts) as f:
            c = json.load(f)
    return p, c


def results(p):
    return [json.loads(l) for l in p.stdout.splitlines() if l.strip()]


def check(cond, what, p=None):
    if not cond:
        extra = "" if p is None else "\nexit %d\nstdout:\n%s\nstderr:\n%s" % (
            p.returncode, p.stdout, p.stderr[-3000:])
        print("FAIL: " + what + extra)
        sys.exit(1)
    print("ok: " + what)


def close(a, b, rel=1e-4):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


def main():
    if not os.path.isdir(DATA):
        print("SKIP: %s missing" % DATA)
        return 77
    with tempfile.TemporaryDirectory(prefix="ctune-train-fast-") as tmp:
        # 1600 training images at batch 8: 200 steps an epoch, 2 epochs
        args = BASE + ["--train-limit", "2000", "--epochs", "2",
                       "--batch-size", "8", "--lr", "0.01"]
        steps = 2 * 200
        p, c = run(["--device", "cuda"] + args, tmp)
        gpu = results(p)
        check(p.returncode == 0 and len(gpu) == 2, "two epochs on cuda", p)
        check("loss read every %d steps" % LOSS_EVERY in p.stderr,
              "the log says the fast steps are on", p)
        check(c is not None, "the double wrote its counters", p)
        print("counts: %s for %d steps" % (c, steps))
        # the first step is host-fed (it sizes the buffers); every other is
        # one graph replay
        check(c["graph_launches"] >= steps - 1,
              "one graph launch per step: %s" % c)
        # reads: ceil(200/64) = 4 an epoch; a few more for the one-off
        # set-up, each evaluation and the end of the run
        budget = steps // LOSS_EVERY + 8 * 2 + 8
        check(c["syncs"] <= budget,
              "at most one host wait per %d steps: %d waits for %d steps "
              "(budget %d)" % (LOSS_EVERY, c["syncs"], steps, budget))
        p, _ = run(["--device", "cpu"] + args, tmp)
        cpu = results(p)
        check(p.returncode == 0 and len(cpu) == 2, "two epochs on cpu", p)
        for g, h in zip(gpu, cpu):
            for k in ("loss", "train_loss", "accuracy"):
                check(close(g[k], h[k]), "epoch %d %s: cuda %.8g, cpu %.8g"
                      % (g["training_iteration"], k, g[k], h[k]))

        # a divergence is still exit 5, seen at most 64 steps late
        p, _ = run(["--device", "cuda"] + BASE +
                   ["--train-limit", "2000", "--epochs", "1",
                    "--batch-size", "8", "--lr", "10"], tmp)
        err = None
        for line in p.stderr.splitlines():
            if line.startswith("{"):
                err = json.loads(line).get("error")
        check(p.returncode == 5 and err and err["code"] == "diverged"
              and "between samples" in err["message"],
              "lr 10 diverges: exit 5 %s" % err, p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
