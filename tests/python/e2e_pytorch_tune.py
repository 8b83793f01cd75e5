#!/usr/bin/env python3
"""examples/pytorch/tune_fmnist.py, the Ray Tune script ported by its
imports (docs/python.md#port-a-ray-tune-script), run exactly as the docs
say with --smoke-test: its Tuner block tunes the training function (a
function trainable of __main__) with ASHA through the embedded server, and
the best result's checkpoint, loaded into the model, scores the best
result's accuracy. Then ctune.open reads the database it left. Exits 77
without the binaries, torch or the data set."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, os.path.join(REPO, "python", "tests"))

import ctune  # noqa: E402
import ctune_procs  # noqa: E402

SCRIPT = os.path.join(REPO, "examples", "pytorch", "tune_fmnist.py")


def main():
    ctune_procs.need_bins("ctune", "ctune-server", "ctune-worker")
    ctune_procs.need_torch_and_fmnist()
    tmp = tempfile.mkdtemp(prefix="ctune-tune-")
    try:
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
        p = subprocess.run(["/usr/bin/python3", SCRIPT, "--smoke-test"], cwd=tmp, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=200)
        print(p.stdout[-3000:])
        assert p.returncode == 0, f"exit {p.returncode}"
        acc = float(re.search(r"best model's validation accuracy: (\S+)", p.stdout).group(1))
        with ctune.open(os.path.join(tmp, "ctune-results", "train_fmnist.db")) as grid:
            assert (len(grid), grid.num_terminated) == (2, 2), grid.experiment
            best = grid.get_best_result()
            assert f"best config: {best.config}" in p.stdout, best.config
            assert abs(best.metrics["mean_accuracy"] - acc) < 1e-9, (best.metrics, acc)
            assert grid.experiment["config"]["scheduler"]["type"] == "asha"
        print("ok: the ported script tuned, its best checkpoint scores", acc)
    finally:
        shutil.rmtree(tmp, True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
