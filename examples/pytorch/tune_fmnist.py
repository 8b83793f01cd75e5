"""Fashion-MNIST tuned by ctune with Ray Tune's API: tune_fmnist_ray.py
ported, with only its imports changed (`diff tune_fmnist_ray.py
tune_fmnist.py`). The training function runs in each trial's process.

    CTUNE_BIN_DIR=build/bin PYTHONPATH=python python3 examples/pytorch/tune_fmnist.py
    ... --smoke-test                  # 2 trials on 600 images: a few seconds"""
import argparse
import os
import tempfile

import torch
import torch.nn.functional as F
from ctune import train, tune
from ctune.train import Checkpoint
from ctune import ASHAScheduler

from train_fmnist import DATA_DIR, Net, evaluate, load_data


def train_fmnist(config):
    (x_train, y_train), (x_val, y_val) = load_data(DATA_DIR, config["train_limit"])
    net = Net(config["l1"], config["l2"])
    optimizer = torch.optim.SGD(net.parameters(), lr=config["lr"], momentum=0.9)
    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "checkpoint.pt"))
        net.load_state_dict(state["net"])
        start = state["epoch"]
    for epoch in range(start, config["epochs"]):
        for i in range(0, len(x_train), 32):
            optimizer.zero_grad()
            F.cross_entropy(net(x_train[i:i + 32]), y_train[i:i + 32]).backward()
            optimizer.step()
        loss, acc = evaluate(net, x_val, y_val)
        with tempfile.TemporaryDirectory() as d:
            torch.save({"net": net.state_dict(), "epoch": epoch + 1},
                       os.path.join(d, "checkpoint.pt"))
            train.report({"loss": loss, "mean_accuracy": acc},
                         checkpoint=Checkpoint.from_directory(d))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke-test", action="store_true", help="2 trials, 600 images")
    smoke = parser.parse_args().smoke_test
    tuner = tune.Tuner(
        train_fmnist,
        param_space={"l1": tune.choice([16, 32, 64, 128]), "l2": tune.choice([16, 32, 64]),
                     "lr": tune.loguniform(1e-3, 1e-1), "epochs": 3 if smoke else 8,
                     "train_limit": 600 if smoke else 10000},
        tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=2 if smoke else 8,
                                    scheduler=ASHAScheduler(max_t=3 if smoke else 8,
                                                            grace_period=1)),
    )
    results = tuner.fit()
    best = results.get_best_result()
    with best.checkpoint.as_directory() as d:
        state = torch.load(os.path.join(d, "checkpoint.pt"))
    model = Net(best.config["l1"], best.config["l2"])
    model.load_state_dict(state["net"])
    (_, _), (x_val, y_val) = load_data(DATA_DIR, best.config["train_limit"])
    print("best config:", best.config)
    print("best model's validation accuracy:", evaluate(model, x_val, y_val)[1])
