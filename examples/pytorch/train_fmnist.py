#!/usr/bin/python3
"""Fashion-MNIST with PyTorch, tuned by ctune: the Ray Tune tutorial's
train_cifar, ported. Differences from the Ray version are marked "ctune:".

    build/bin/ctune run examples/pytorch/experiment.json   # from the repo root
    python3 examples/pytorch/train_fmnist.py               # by hand, defaults

Config keys: l1, l2 (hidden widths), lr, momentum, batch_size, epochs,
train_limit (the first N training images: the small-subset knob; 20% of them
are held out for validation), data_dir, seed. Each epoch logs the lr it
trains with and reports it as "lr"; with PBT (pbt.json) a restored optimizer
gets the config's lr back (ctune.apply_config)."""
import gzip
import os
import struct
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import ctune  # ctune: instead of `from ray import train, tune`

DATA_DIR = "/usr/share/datasets/fashion-mnist"
DEFAULTS = {"l1": 64, "l2": 32, "lr": 0.01, "momentum": 0.9, "batch_size": 32, "epochs": 5,
            "train_limit": 10000, "data_dir": DATA_DIR, "seed": 0}


def read_idx(path, magic, count, item_bytes):
    """The first `count` items of a gzipped IDX file (the format of
    trainer/data.c): a big-endian header, then unsigned bytes."""
    with gzip.open(path, "rb") as f:
        header_len = 16 if magic == 2051 else 8
        header = f.read(header_len)
        got_magic, n = struct.unpack(">II", header[:8])
        if got_magic != magic:
            raise SystemExit(f"{path}: not an IDX file (magic {got_magic}, want {magic})")
        count = min(count, n)
        data = f.read(count * item_bytes)
    return np.frombuffer(data, dtype=np.uint8).copy(), count


def load_data(data_dir, limit):
    x, n = read_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz"), 2051, limit, 784)
    y, _ = read_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz"), 2049, n, 1)
    # Same normalisation as ctune-train: Fashion-MNIST's mean and std.
    x = (torch.from_numpy(x).float().div_(255.0).view(n, 1, 28, 28) - 0.2860) / 0.3530
    y = torch.from_numpy(y).long()
    n_val = max(1, n // 5)
    return (x[n_val:], y[n_val:]), (x[:n_val], y[:n_val])


class Net(nn.Module):
    """The Ray Tune tutorial's CNN, for 1x28x28 inputs."""

    def __init__(self, l1=120, l2=84):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 4 * 4, l1)
        self.fc2 = nn.Linear(l1, l2)
        self.fc3 = nn.Linear(l2, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def evaluate(net, x, y, batch=1000):
    net.eval()
    loss, correct = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            out = net(x[i:i + batch])
            loss += F.cross_entropy(out, y[i:i + batch], reduction="sum").item()
            correct += (out.argmax(1) == y[i:i + batch]).sum().item()
    net.train()
    return loss / len(x), correct / len(x)


def train_fmnist(config):
    torch.manual_seed(int(config["seed"]))
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    (x_train, y_train), (x_val, y_val) = load_data(config["data_dir"], int(config["train_limit"]))

    net = Net(int(config["l1"]), int(config["l2"]))
    optimizer = torch.optim.SGD(net.parameters(), lr=config["lr"], momentum=config["momentum"])

    # ctune: load_checkpoint() instead of train.get_checkpoint(); it gives the
    # folder back that report(checkpoint=...) saved, or None on a fresh start.
    start_epoch = 0
    checkpoint = ctune.load_checkpoint()
    if checkpoint:
        state = torch.load(os.path.join(checkpoint, "checkpoint.pt"))
        net.load_state_dict(state["net"])
        optimizer.load_state_dict(state["optimizer"])
        # The restored optimizer state holds the lr it was saved with: after a
        # PBT exploit that is the donor's, while config["lr"] is the explored
        # one. Put the config's values back (Ray's PBT guide resets the
        # param_groups the same way); it says so in the log when they differ.
        ctune.apply_config(optimizer, config, keys=("lr", "momentum"))
        start_epoch = state["epoch"]
        print(f"resumed after epoch {start_epoch}", flush=True)

    # ctune: SIGTERM (the scheduler stopped the trial, or the worker drains)
    # exits 0; the checkpoint of the last epoch is already saved.
    ctune.on_stop()

    gen = torch.Generator().manual_seed(int(config["seed"]))
    batch = int(config["batch_size"])
    for epoch in range(start_epoch, int(config["epochs"])):
        lr = optimizer.param_groups[0]["lr"]
        print(f"epoch {epoch + 1}: lr {lr!r}", flush=True)  # the lr this epoch trains with
        order = torch.randperm(len(x_train), generator=gen)
        running = 0.0
        for i in range(0, len(order), batch):
            idx = order[i:i + batch]
            optimizer.zero_grad()
            loss = F.cross_entropy(net(x_train[idx]), y_train[idx])
            loss.backward()
            optimizer.step()
            running += loss.item() * len(idx)
        val_loss, val_acc = evaluate(net, x_val, y_val)

        with tempfile.TemporaryDirectory() as d:
            torch.save({"net": net.state_dict(), "optimizer": optimizer.state_dict(),
                        "epoch": epoch + 1}, os.path.join(d, "checkpoint.pt"))
            # ctune: report(...) instead of train.report(...,
            # checkpoint=Checkpoint.from_directory(d)); training_iteration,
            # time_this_iter_s and time_total_s are added, the line flushed.
            ctune.report({"loss": val_loss, "mean_accuracy": val_acc,
                          "train_loss": running / len(order), "lr": lr}, checkpoint=d)


if __name__ == "__main__":
    # ctune: the worker runs this script once per trial; get_config() is the
    # trial's config (the defaults fill what param_space leaves out).
    train_fmnist(ctune.get_config(DEFAULTS))
