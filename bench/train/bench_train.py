#!/usr/bin/env python3
"""Side-by-side training throughput: ctune-train vs PyTorch, one thread each.

Trains the tutorial cnn (and, with --models cnn,mlp, an mlp 784-256-128-10)
on Fashion-MNIST for one epoch (48,000 images) at batch sizes 2 to 1024 and
prints, per cell, interleaved in one run: one core's fp32 peak measured just
before by fma_peak.c (a VM's nominal clock is not the clock it runs at),
ctune-train's samples/s, its GFLOP/s (the multiply-adds of the convolutions
and linear layers, forward and backward) and their fraction of the peak,
PyTorch's samples/s and the ratio. PyTorch times only its training steps
(forward, backward, optimiser), not data loading or evaluation, on
ready-made in-memory tensors (no DataLoader), which favours it;
ctune-train's time is its whole process (below).

Rates are per second of CPU time by default (the trainer's CPU time of the
whole process, training steps and its fixed cost: ~15 ms a process on the
2-vCPU EPYC, a third of it checksumming the 47 MB data cache, ~3% of a
19,200-image run; the baseline build keeps its own data cache;
PyTorch's process time of its loop): on a shared machine wall time counts
the other processes' turns on the core. --clock wall uses the
trainer's own samples_per_s and PyTorch's wall time. Run with Debian's python
(/usr/bin/python3), which has torch and numpy:

  /usr/bin/python3 bench/train/bench_train.py --build build
  /usr/bin/python3 bench/train/bench_train.py --build build --limit 6000  # quick
  /usr/bin/python3 bench/train/bench_train.py --build build --repeat 3   # busy machine
  # against an earlier build, alternately in each cell (its own column)
  /usr/bin/python3 bench/train/bench_train.py --build build --baseline /tmp/old-build
"""
import argparse
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VAL_FRACTION = 0.01


def flop_per_sample(model):
    """Multiply-adds x 2 of one training step per image: forward, weight
    gradients, input gradients (none for the first layer's input)."""
    if model == "cnn":  # conv 1->6 5x5 on 28x28, pool, conv 6->16, pool, fc
        convs = [(1 * 25, 6, 24 * 24), (6 * 25, 16, 8 * 8)]
        fcs = [(16 * 4 * 4, 120), (120, 84), (84, 10)]
    else:
        convs, fcs = [], [(784, 256), (256, 128), (128, 10)]
    macs = []  # (macs, first layer)
    for i, (k, m, p) in enumerate(convs):
        macs.append((k * m * p, i == 0))
    for i, (a, b) in enumerate(fcs):
        macs.append((a * b, not convs and i == 0))
    return sum(2 * mac * (2 if first else 3) for mac, first in macs)


def build_peak(cc="cc"):
    d = tempfile.mkdtemp(prefix="ctune-fma-peak-")
    exe = os.path.join(d, "fma_peak")
    subprocess.run([cc, "-O2", "-o", exe, os.path.join(HERE, "fma_peak.c")],
                   check=True)
    return exe, d


def peak_gflops(exe):
    out = subprocess.run([exe, "0.3"], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)["gflops"]

DATA = "/usr/share/datasets/fashion-mnist"


def ctune(bin_dir, model, batch, limit, data_dir, cache_dir, clock):
    # --train-limit keeps limit/(1 - val fraction) images so that the
    # training split holds `limit`; the small validation split keeps the
    # evaluation out of the CPU time
    n = limit or 48000
    argv = [os.path.join(bin_dir, "ctune-train"), "--model", model,
            "--l1", "256" if model == "mlp" else "120",
            "--l2", "128" if model == "mlp" else "84",
            "--batch-size", str(batch), "--epochs", "1", "--threads", "1",
            "--data-dir", data_dir, "--lr", "0.01", "--momentum", "0.9",
            "--val-fraction", str(VAL_FRACTION), "--data-cache", cache_dir,
            "--train-limit", str(round(n / (1 - VAL_FRACTION)))]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    rep = json.loads(out.strip().splitlines()[-1])
    if clock == "wall":
        return rep["samples_per_s"]
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return n / cpu


def load_fmnist(data_dir):
    import numpy as np
    with gzip.open(os.path.join(data_dir, "train-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(data_dir, "train-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    x = (x.astype(np.float32) / 255.0 - 0.5) / 0.5
    return x, y.astype(np.int64)


def torch_rate(model, batch, limit, data, clock):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    torch.set_num_threads(1)
    torch.manual_seed(0)

    class Net(nn.Module):  # the PyTorch CIFAR tutorial's Net, fitted to 28x28x1
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 6, 5)
            self.pool = nn.MaxPool2d(2, 2)
            self.conv2 = nn.Conv2d(6, 16, 5)
            self.fc1 = nn.Linear(16 * 4 * 4, 120)
            self.fc2 = nn.Linear(120, 84)
            self.fc3 = nn.Linear(84, 10)

        def forward(self, x):
            x = self.pool(F.relu(self.conv1(x)))
            x = self.pool(F.relu(self.conv2(x)))
            x = torch.flatten(x, 1)
            return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(784, 256)
            self.fc2 = nn.Linear(256, 128)
            self.fc3 = nn.Linear(128, 10)

        def forward(self, x):
            x = torch.flatten(x, 1)
            return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))

    net = Net() if model == "cnn" else Mlp()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    x, y = data
    n = limit or int(len(x) * 0.8)
    xs = torch.from_numpy(x[:n].copy())
    ys = torch.from_numpy(y[:n].copy())
    perm = torch.randperm(n)
    xs, ys = xs[perm], ys[perm]
    now = time.perf_counter if clock == "wall" else time.process_time
    t0 = now()
    for i in range(0, n, batch):
        xb, yb = xs[i:i + batch], ys[i:i + batch]
        opt.zero_grad()
        loss = crit(net(xb), yb)
        loss.backward()
        opt.step()
    return n / (now() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="build dir holding bin/")
    ap.add_argument("--data-dir", default=DATA)
    ap.add_argument("--limit", type=int, default=0,
                    help="training images per run (0: the full 48,000)")
    ap.add_argument("--batches", default="2,4,16,64,256,1024")
    ap.add_argument("--models", default="cnn")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    ap.add_argument("--no-torch", action="store_true",
                    help="ctune-train and the peak only")
    ap.add_argument("--baseline", default="",
                    help="another build dir (holding bin/ctune-train) run "
                         "alternately with --build in every cell: its "
                         "samples/s and the speed-up over it")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per cell, best kept (a shared machine's noise "
                         "only ever slows a run down)")
    a = ap.parse_args()
    bin_dir = os.path.join(a.build, "bin")
    have_torch = not a.no_torch
    if have_torch:
        try:
            import torch  # noqa: F401
            data = load_fmnist(a.data_dir)
        except ImportError as e:
            print(f"# PyTorch not available ({e}): ctune-train only",
                  file=sys.stderr)
            have_torch = False
    peak_exe, tmp = build_peak()
    try:
        # the first run builds the decoded data cache, outside the timing;
        # the baseline keeps its own (an older cache format would make each
        # build rebuild the other's file on every run)
        ctune(bin_dir, "mlp", 64, 64, a.data_dir, tmp, a.clock)
        base_dir = os.path.join(a.baseline, "bin") if a.baseline else ""
        base_cache = os.path.join(tmp, "baseline-cache")
        if base_dir:
            ctune(base_dir, "mlp", 64, 64, a.data_dir, base_cache, a.clock)
        load = os.getloadavg()
        print(f"# one thread each, {a.limit or 48000} training images per run, "
              f"samples/s per {a.clock} second of the trainer's run, best of "
              f"{a.repeat}; load average {load[0]:.2f} {load[1]:.2f} "
              f"{load[2]:.2f}")
        bcol = f" {'baseline':>9} {'speed-up':>8}" if base_dir else ""
        print(f"{'model':6} {'batch':>5} {'peak GF/s':>9} {'ctune-train':>12} "
              f"{'GF/s':>6} {'of peak':>7} {'pytorch':>8} {'ratio':>6}{bcol}",
              flush=True)
        for model in a.models.split(","):
            for b in [int(s) for s in a.batches.split(",")]:
                peak = c = t = base = 0.0
                for _ in range(a.repeat):
                    peak = max(peak, peak_gflops(peak_exe))
                    c = max(c, ctune(bin_dir, model, b, a.limit, a.data_dir,
                                     tmp, a.clock))
                    if base_dir:
                        base = max(base, ctune(base_dir, model, b, a.limit,
                                               a.data_dir, base_cache,
                                               a.clock))
                    if have_torch:
                        t = max(t, torch_rate(model, b, a.limit, data,
                                              a.clock))
                gf = c * flop_per_sample(model) / 1e9
                tcol = f"{t:8.0f} {c / t:6.2f}" if have_torch else \
                    f"{'-':>8} {'-':>6}"
                bval = f" {base:9.0f} {c / base:8.2f}" if base_dir else ""
                print(f"{model:6} {b:5d} {peak:9.1f} {c:12.0f} {gf:6.1f} "
                      f"{gf / peak:7.0%} {tcol}{bval}", flush=True)
        load = os.getloadavg()
        print(f"# load average at the end {load[0]:.2f} {load[1]:.2f} "
              f"{load[2]:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
