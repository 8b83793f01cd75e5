#!/usr/bin/env python3
"""ctune in a notebook: a real Jupyter kernel (nbclient and ipykernel from
PyPI, in the venv `scripts/install-deps --test` makes over Debian's
python3-torch) runs cells that define a PyTorch model and train_fn in the
notebook, tune it with ctune.Tuner and ASHA on a small Fashion-MNIST
subset (the embedded server and a local worker), load the best result's
checkpoint into the model, and read the experiment back with ctune.open
after that server is gone. The fit cell's progress table is one display
that each table replaced (no table printed as text).

Exits 77 when the binaries, torch or the data set are missing; a missing
venv fails (install-deps --test makes it; offline once made)."""
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
VENV = os.path.expanduser(os.environ.get("CTUNE_NB_VENV", "~/.cache/ctune/notebook-0.11.0"))
DATA = "/usr/share/datasets/fashion-mnist"

SETUP = f"""
import os, sys
sys.path.insert(0, {os.path.join(REPO, "python")!r})
sys.path.insert(0, {os.path.join(REPO, "examples", "pytorch")!r})
os.chdir(os.environ["NB_WORKDIR"])
import torch
import torch.nn as nn
import torch.nn.functional as F
import ctune
from train_fmnist import load_data, evaluate   # an importable module's functions
"""

MODEL = """
class Net(nn.Module):                           # defined here: shipped by its source
    def __init__(self, width):
        super().__init__()
        self.fc1 = nn.Linear(784, width)
        self.fc2 = nn.Linear(width, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))

LIMIT = 600                                     # a global the function uses

def train_fn(config):
    torch.manual_seed(0)
    (x, y), (xv, yv) = load_data("%s", LIMIT)
    net = Net(config["width"])
    opt = torch.optim.SGD(net.parameters(), lr=config["lr"], momentum=0.9)
    for epoch in range(3):
        for i in range(0, len(x), 32):
            opt.zero_grad()
            F.cross_entropy(net(x[i:i + 32]), y[i:i + 32]).backward()
            opt.step()
        loss, acc = evaluate(net, xv, yv)
        ctune.report({"loss": loss, "mean_accuracy": acc}, checkpoint=net.state_dict())
""" % DATA

FIT = """
tuner = ctune.Tuner(train_fn,
    param_space={"width": ctune.choice([16, 32]), "lr": ctune.loguniform(1e-2, 1e-1)},
    tune_config=ctune.TuneConfig(metric="loss", mode="min", num_samples=2, seed=3,
                                 scheduler=ctune.ASHAScheduler(max_t=3, grace_period=1,
                                                               reduction_factor=2)),
    run_config=ctune.RunConfig(name="nb"))
results = tuner.fit()
best = results.get_best_result()
model = Net(best.config["width"])
model.load_state_dict(ctune.load_checkpoint(file=best.checkpoint))
(_, _), (xv, yv) = load_data("%s", LIMIT)
best_acc = evaluate(model, xv, yv)[1]
assert abs(best_acc - best.metrics["mean_accuracy"]) < 1e-9, (best_acc, best.metrics)
summary = {"n": len(results), "terminated": results.num_terminated, "config": best.config,
           "acc": best_acc}
results.close()
print("FIT", summary)
""" % DATA

REOPEN = """
with ctune.open("ctune-results/nb.db") as grid:
    again = grid.get_best_result()
    assert again.config == best.config, (again.config, best.config)
    assert grid.experiment["status"] == "TERMINATED"
    print("REOPEN", len(grid), again.trial_name, again.metrics["mean_accuracy"])
"""


def skip(why):
    print("SKIP: " + why, file=sys.stderr)
    sys.exit(77)


def in_venv():
    """Re-run this file with the venv's python (nbclient lives there)."""
    py = os.path.join(VENV, "bin", "python")
    if not os.path.isfile(os.path.join(VENV, ".installed")):
        raise SystemExit(f"FAIL: {VENV} is missing: run scripts/install-deps --test (it makes "
                         f"the pinned venv notebook-0.11.0: nbclient, ipykernel)")
    os.execv(py, [py, os.path.abspath(__file__)] + sys.argv[1:])


def main():
    bins = os.environ.get("CTUNE_BIN_DIR", "")
    if not all(os.access(os.path.join(bins, b), os.X_OK)
               for b in ("ctune", "ctune-server", "ctune-worker")):
        skip("set CTUNE_BIN_DIR to the folder of ctune, ctune-server and ctune-worker")
    if not os.path.isfile(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        skip(f"no Fashion-MNIST in {DATA}")
    try:
        import nbclient
        import nbformat  # noqa: F401 (new_notebook below)
    except ImportError:
        in_venv()
    try:
        import torch  # noqa: F401
    except ImportError:
        skip(f"{sys.executable} has no torch (Debian's python3-torch)")
    from nbformat.v4 import new_code_cell, new_notebook
    tmp = tempfile.mkdtemp(prefix="ctune-nb-")
    try:
        nb = new_notebook(cells=[new_code_cell(c) for c in (SETUP, MODEL, FIT, REOPEN)])
        env = dict(os.environ, NB_WORKDIR=tmp)
        t0 = time.monotonic()
        client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                         resources={"metadata": {"path": tmp}})
        os.environ.update(env)  # the kernel inherits it
        try:
            client.execute()
        except nbclient.exceptions.CellExecutionError as e:
            raise AssertionError(f"a cell failed:\n{e}") from None
        took = time.monotonic() - t0
        fit = nb.cells[2].outputs
        text = "".join(o.get("text", "") for o in fit if o.output_type == "stream")
        tables = [o for o in fit if o.output_type == "display_data"]
        print(text[-3000:])
        assert "FIT {'n': 2" in text, text
        assert "== Status ==" not in text, "the table was printed, not displayed"
        assert len(tables) == 1, [o.output_type for o in fit]
        table = tables[0]["data"]["text/plain"]
        assert "== Status ==" in table and "TERMINATED" in table, table
        again = "".join(o.get("text", "") for o in nb.cells[3].outputs)
        assert again.startswith("REOPEN 2 nb_"), again
        print(table)
        print(again.strip())
        print(json.dumps({"notebook_s": round(took, 1)}))
    finally:
        shutil.rmtree(tmp, True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
