"""ctune: Python helpers for ctune trainables and a client for its REST API.

In a trainable (a command the ctune-worker runs)::

    import ctune
    config = ctune.get_config({"lr": 0.01})        # the trial's config
    state = ctune.load_checkpoint()                 # None unless resumed
    ctune.apply_config(optimizer, config)           # after optimizer.load_state_dict
    for epoch in range(...):
        ...
        ctune.report(loss=loss, mean_accuracy=acc)  # one JSON line, flushed
        ctune.save_checkpoint(some_dir_or_file_or_object)

A trial of several processes (torchrun's variables): ctune.get_context()
has world_size, rank, local_rank, master_addr/port and gpu_ids; only rank 0's
report() and save_checkpoint() count. ctune.torch_memory_fraction() holds
PyTorch to a fractional gpu's memory share.

Experiments in Python, as in Ray Tune::

    tuner = ctune.Tuner(train_fn, param_space={"lr": ctune.loguniform(1e-4, 1e-1)},
                        tune_config=ctune.TuneConfig(metric="loss", mode="min",
                                                     scheduler=ctune.ASHA(max_t=8)))
    with tuner.fit() as grid:                       # `ctune run` here, a ResultGrid
                                                    # (train_fn: a function or "train.py")
        print(grid.get_best_result().config)
    with ctune.open("ctune-results/train.db") as grid:   # read back later
        print(grid.get_dataframe())

For people and notebooks::

    c = ctune.Client()                              # CTUNE_SERVER, CTUNE_TOKEN
    exp = c.submit("examples/quick.json")
    c.wait(exp)
    print(c.best(exp))

Standard library only; numpy and torch scalars are accepted when present.
docs/python.md documents the whole API."""

__version__ = "0.1.0"

from ._errors import CtuneError
from ._function import FunctionNotShippable
from ._checkpoint import checkpoint_dir, load_checkpoint, save_checkpoint, CHECKPOINT_FILE
from ._trial import (TrialContext, apply_config, checkpoint_requested, get_config, get_context,
                     gpu_memory_fraction, in_trial, is_resumed, on_checkpoint_request, on_stop,
                     report, stop_requested, torch_memory_fraction)
from ._client import Client
from ._results import Result, ResultGrid
from ._open import open_db as open  # noqa: A001 (ctune.open, shadowing nothing here)
from ._tuner import RunConfig, Tuner, run
from ._search import (ASHA, FIFO, PBT, TPE, ASHAScheduler, AsyncHyperBandScheduler,
                      BasicVariantGenerator, Domain, FIFOScheduler, Grid, GridSearch, HyperBand,
                      HyperBandScheduler, MedianStopping, MedianStoppingRule,
                      PopulationBasedTraining, Random, Scheduler, Searcher, TuneConfig, choice,
                      experiment, grid_search, lograndint, loguniform, pow2, qloguniform,
                      qrandint, quniform, randint, randn, script_trainable, uniform)

__all__ = [
    "CHECKPOINT_FILE", "Client", "CtuneError", "FunctionNotShippable", "TrialContext", "apply_config",
    "checkpoint_dir", "checkpoint_requested", "get_config", "get_context", "in_trial", "is_resumed",
    "load_checkpoint", "on_checkpoint_request", "on_stop", "report", "save_checkpoint", "stop_requested",
    "__version__",
    # GPUs: the trial's memory share
    "gpu_memory_fraction", "torch_memory_fraction",
    # search spaces, schedulers, searchers (Ray Tune's names too)
    "ASHA", "ASHAScheduler", "AsyncHyperBandScheduler", "BasicVariantGenerator", "Domain", "FIFO",
    "FIFOScheduler", "Grid", "GridSearch", "HyperBand", "HyperBandScheduler", "MedianStopping",
    "MedianStoppingRule", "PBT", "PopulationBasedTraining", "Random", "Scheduler", "Searcher",
    "TPE", "TuneConfig", "choice", "experiment", "grid_search", "lograndint", "loguniform",
    "pow2", "qloguniform", "qrandint", "quniform", "randint", "randn", "script_trainable",
    "uniform",
    # results
    "Result", "ResultGrid", "open",
    # running an experiment here
    "RunConfig", "Tuner", "run",
]
