#!/usr/bin/env python3
"""Side-by-side training throughput: ctune-train vs PyTorch, one thread each.

Trains the tutorial cnn and an mlp 784-256-128-10 on Fashion-MNIST for one
epoch (48,000 images: the 80% training split) at batch sizes 4, 16 and 64 and
prints samples/s of each and the ratio. Both sides time only the training
steps (forward, backward, optimiser), not data loading or evaluation; PyTorch
gets its data as ready-made in-memory tensors (no DataLoader), which favours
it. Run with Debian's python (/usr/bin/python3), which has torch and numpy:

  /usr/bin/python3 bench/train/bench_train.py --build build
  /usr/bin/python3 bench/train/bench_train.py --build build --limit 6000  # quick
  /usr/bin/python3 bench/train/bench_train.py --build build --repeat 3   # busy machine
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import time

DATA = "/usr/share/datasets/fashion-mnist"


def ctune(bin_dir, model, batch, limit, data_dir):
    # --train-limit keeps limit/0.8 images so the training split holds `limit`
    argv = [os.path.join(bin_dir, "ctune-train"), "--model", model,
            "--l1", "256" if model == "mlp" else "120",
            "--l2", "128" if model == "mlp" else "84",
            "--batch-size", str(batch), "--epochs", "1", "--threads", "1",
            "--data-dir", data_dir, "--lr", "0.01", "--momentum", "0.9"]
    if limit:
        argv += ["--train-limit", str(int(limit / 0.8))]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["samples_per_s"]


def load_fmnist(data_dir):
    import numpy as np
    with gzip.open(os.path.join(data_dir, "train-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(data_dir, "train-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    x = (x.astype(np.float32) / 255.0 - 0.5) / 0.5
    return x, y.astype(np.int64)


def torch_rate(model, batch, limit, data):
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
    t0 = time.perf_counter()
    for i in range(0, n, batch):
        xb, yb = xs[i:i + batch], ys[i:i + batch]
        opt.zero_grad()
        loss = crit(net(xb), yb)
        loss.backward()
        opt.step()
    return n / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="build dir holding bin/")
    ap.add_argument("--data-dir", default=DATA)
    ap.add_argument("--limit", type=int, default=0,
                    help="training images per run (0: the full 48,000)")
    ap.add_argument("--batches", default="4,16,64")
    ap.add_argument("--models", default="cnn,mlp")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per cell, best kept (a shared machine's noise "
                         "only ever slows a run down)")
    a = ap.parse_args()
    bin_dir = os.path.join(a.build, "bin")
    try:
        import torch  # noqa: F401
        data = load_fmnist(a.data_dir)
        have_torch = True
    except ImportError as e:
        print(f"# PyTorch not available ({e}): ctune-train only", file=sys.stderr)
        have_torch = False
    print(f"# one thread each, {a.limit or 48000} training images per run, "
          f"samples/s of the training steps, best of {a.repeat}")
    print(f"{'model':6} {'batch':>5} {'ctune-train':>12} {'pytorch':>10} {'ratio':>6}")
    for model in a.models.split(","):
        for b in [int(s) for s in a.batches.split(",")]:
            c = max(ctune(bin_dir, model, b, a.limit, a.data_dir)
                    for _ in range(a.repeat))
            if have_torch:
                t = max(torch_rate(model, b, a.limit, data)
                        for _ in range(a.repeat))
                print(f"{model:6} {b:5d} {c:12.0f} {t:10.0f} {c / t:6.2f}",
                      flush=True)
            else:
                print(f"{model:6} {b:5d} {c:12.0f} {'-':>10} {'-':>6}",
                      flush=True)


if __name__ == "__main__":
    main()
