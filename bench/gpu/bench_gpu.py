#!/usr/bin/env python3
"""GPU training throughput of ctune-train: samples/s for 1..N GPUs (data
parallel in one process, NCCL) and batch sizes 64..1024, optionally beside
PyTorch on one GPU with the same net.

Each cell runs `ctune-train --device cuda --gpus G --batch-size B` for two
epochs over the first --limit Fashion-MNIST training images and reports the
second epoch's samples/s (the first one pays for CUDA/cuBLAS/NCCL start-up);
ctune-train times only the training steps (forward, backward, all-reduce,
optimiser), not evaluation. gpu_mem_mb is the trainer's peak per device.
G > 1 splits the global batch B across the GPUs (B/G rows each).

  /usr/bin/python3 bench/gpu/bench_gpu.py --build build
  /usr/bin/python3 bench/gpu/bench_gpu.py --build build --model mlp --gpus 1,2,4
  /usr/bin/python3 bench/gpu/bench_gpu.py --build build --torch   # + PyTorch, 1 GPU

Needs a CUDA device (prints "SKIP: no CUDA device" and exits 77 without one)
and a ctune-train built with the CUDA backend (`ctune-train --version` lists
"cuda").
"""
import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time

DATA = "/usr/share/datasets/fashion-mnist"
BATCHES = [64, 128, 256, 512, 1024]
WIDTHS = {"cnn": (120, 84), "mlp": (256, 128)}


def visible_gpus():
    """GPUs this process may use: CUDA_VISIBLE_DEVICES, else nvidia-smi."""
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        return len([d for d in vis.split(",") if d.strip() != ""])
    if shutil.which("nvidia-smi"):
        p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
        if p.returncode == 0:
            return len([l for l in p.stdout.splitlines() if l.startswith("GPU ")])
    return 0


def ctune(args, gpus, batch):
    l1, l2 = WIDTHS[args.model]
    argv = [os.path.join(args.build, "bin", "ctune-train"), "--device", "cuda",
            "--gpus", str(gpus), "--model", args.model, "--l1", str(l1),
            "--l2", str(l2), "--batch-size", str(batch), "--epochs", "2",
            "--data-dir", args.data_dir, "--lr", "0.01", "--momentum", "0.9",
            "--val-fraction", "0.1", "--train-limit", str(args.limit)]
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        tail = p.stderr.strip().splitlines()[-1:] or [""]
        return {"error": "exit %d: %s" % (p.returncode, tail[0])}
    last = json.loads(p.stdout.strip().splitlines()[-1])
    return {"samples_per_s": last["samples_per_s"],
            "gpu_mem_mb": last.get("gpu_mem_mb")}


def load_fmnist(data_dir, limit):
    import numpy as np
    with gzip.open(os.path.join(data_dir, "train-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(data_dir, "train-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    x = (x[:limit].astype(np.float32) / 255.0 - 0.5) / 0.5
    return x, y[:limit].astype(np.int64)


def torch_rate(args, batch, data):
    """PyTorch on one GPU, same net, data already on the device, SGD momentum;
    the second pass over the data is timed, synchronised at the end."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    torch.manual_seed(0)
    l1, l2 = WIDTHS[args.model]

    class Cnn(nn.Module):  # the PyTorch CIFAR tutorial's Net, fitted to 28x28x1
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = nn.Conv2d(1, 6, 5), nn.Conv2d(6, 16, 5)
            self.fc1, self.fc2 = nn.Linear(16 * 4 * 4, l1), nn.Linear(l1, l2)
            self.fc3 = nn.Linear(l2, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv1(x)), 2)
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            x = torch.flatten(x, 1)
            return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(784, l1), nn.Linear(l1, l2)
            self.fc3 = nn.Linear(l2, 10)

        def forward(self, x):
            x = torch.flatten(x, 1)
            return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))

    dev = torch.device("cuda:0")
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32, as ctune-train
    torch.backends.cudnn.allow_tf32 = False
    net = (Cnn() if args.model == "cnn" else Mlp()).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x = torch.from_numpy(data[0]).to(dev)
    y = torch.from_numpy(data[1]).to(dev)
    n = x.shape[0]
    rate = 0.0
    for epoch in range(2):
        perm = torch.randperm(n, device=dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(0, n, batch):
            idx = perm[i:i + batch]
            opt.zero_grad()
            loss = F.cross_entropy(net(x[idx]), y[idx])
            loss.backward()
            opt.step()
        torch.cuda.synchronize()
        rate = n / (time.perf_counter() - t0)
    return rate


def torch_only(args):
    """PyTorch's samples/s per batch in this one process (one import, one
    CUDA context): a JSON line each, or exit 77 when torch sees no GPU."""
    import torch
    if not torch.cuda.is_available():
        print("SKIP: torch %s sees no CUDA device" % torch.__version__)
        return 77
    batches = [int(b) for b in args.batches.split(",")]
    limits = ([int(n) for n in args.limits.split(",")] if args.limits
              else [args.limit] * len(batches))
    for b, n in zip(batches, limits):
        rate = torch_rate(args, b, load_fmnist(args.data_dir, int(n * 0.9)))
        print(json.dumps({"batch": b, "images": int(n * 0.9), "samples_per_s": rate,
                          "torch": torch.__version__}), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="build dir holding bin/ctune-train")
    ap.add_argument("--data-dir", default=DATA)
    ap.add_argument("--model", choices=sorted(WIDTHS), default="cnn")
    ap.add_argument("--gpus", help="comma list of GPU counts (default 1..all visible)")
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)))
    ap.add_argument("--limit", type=int, default=30000,
                    help="training images (before the 10%% validation split)")
    ap.add_argument("--torch", action="store_true", help="add PyTorch on 1 GPU")
    ap.add_argument("--json", action="store_true", help="also print JSON lines")
    ap.add_argument("--torch-only", action="store_true",
                    help="PyTorch alone, one JSON line per batch (bench/gpu/device-step)")
    ap.add_argument("--limits", help="with --torch-only: images per batch size, a comma "
                    "list beside --batches (default --limit for each)")
    args = ap.parse_args()
    if args.torch_only:
        return torch_only(args)

    n = visible_gpus()
    if n < 1:
        print("SKIP: no CUDA device (nvidia-smi finds none, or CUDA_VISIBLE_DEVICES is empty)")
        return 77
    exe = os.path.join(args.build, "bin", "ctune-train")
    ver = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    if "cuda" not in ver:
        print("%s was built without the CUDA backend: %s" % (exe, ver.strip()))
        return 2
    gpu_counts = [int(g) for g in args.gpus.split(",")] if args.gpus else list(range(1, n + 1))
    batches = [int(b) for b in args.batches.split(",")]
    name = ""
    if shutil.which("nvidia-smi"):
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True).stdout.strip().splitlines()
        name = name[0] if name else ""
    print("ctune-train %s on %d GPU(s) %s; %s, %d images, 2nd epoch timed"
          % (ver.split("(")[0].split()[-1], n, name, args.model, args.limit))
    data = load_fmnist(args.data_dir, int(args.limit * 0.9)) if args.torch else None
    head = "%-6s" % "batch" + "".join("%16s" % ("%d GPU samples/s" % g) for g in gpu_counts)
    head += "%12s" % "MiB/GPU"
    if args.torch:
        head += "%16s%8s" % ("torch 1 GPU", "ratio")
    print(head)
    for b in batches:
        row = "%-6d" % b
        first = None
        mem = None
        for g in gpu_counts:
            r = ctune(args, g, b)
            if args.json:
                print(json.dumps({"model": args.model, "gpus": g, "batch": b, **r}))
            if "error" in r:
                row += "%16s" % "error"
                print("  gpus %d batch %d: %s" % (g, b, r["error"]), file=sys.stderr)
                continue
            row += "%16.0f" % r["samples_per_s"]
            if g == 1:
                first, mem = r["samples_per_s"], r.get("gpu_mem_mb")
        row += "%12s" % ("%.0f" % mem if mem is not None else "-")
        if args.torch:
            t = torch_rate(args, b, data)
            row += "%16.0f%8s" % (t, "%.2f" % (first / t) if first else "-")
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
