"""ctune.run(...) and ctune.Tuner(...).fit() for a function, script or
command trainable: write
the experiment JSON, run `ctune run` on it (the embedded server and a
local worker, ./ctune-results/<name>.db, its Ctrl-C and --resume), and
return the experiment's ResultGrid read back with ctune.open."""
import json
import os
import re
import signal
import subprocess
import sys

from . import _bin
from ._errors import CtuneError
from ._function import describe
from ._open import open_db
from ._search import experiment

RESULTS_DIR = "ctune-results"
# `ctune run`'s exit codes that still leave a finished experiment to read:
# 0 done, 1 cancelled (fail_fast), 6 every trial in ERROR (docs/cli.md).
_FINISHED = (0, 1, 6)


class RunConfig:
    """Ray's RunConfig, as far as ctune has it: the experiment's name (also
    its database, ./ctune-results/<name>.db) and its stop rules."""

    def __init__(self, name=None, stop=None):
        self.name = name
        self.stop = stop

    def __repr__(self):
        return f"ctune.RunConfig(name={self.name!r}, stop={self.stop!r})"


def _default_name(trainable):
    if isinstance(trainable, (str, os.PathLike)):
        stem = os.path.splitext(os.path.basename(os.fspath(trainable)))[0]
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", stem)[:128]
        if stem:
            return stem
    fn_name = getattr(trainable, "__name__", "")
    if callable(trainable) and re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", fn_name):
        return fn_name
    return "experiment"


def _relay(proc):
    """Copy the child's output to sys.stdout line by line (a notebook's
    cell shows sys.stdout, not file descriptor 1)."""
    for line in iter(proc.stdout.readline, b""):
        sys.stdout.write(line.decode("utf-8", "replace"))
        sys.stdout.flush()


def _inherit_stdout():
    try:
        return sys.stdout.isatty() and sys.stdout.fileno() == 1
    except (AttributeError, ValueError, OSError):
        return False


def run(trainable, param_space=None, tune_config=None, *, name=None, metric=None, mode=None,
        num_samples=None, scheduler=None, search_alg=None, resources_per_trial=None,
        max_concurrent_trials=None, stop=None, time_budget_s=None, seed=None,
        max_failures=None, points_to_evaluate=None, resume=False, cpus=None, gpus=None):
    """Run an experiment here, as `ctune run` does, and return its ResultGrid.

    trainable: a function train_fn(config) that calls ctune.report (it runs
    in the trial process: resources, limits, checkpoints and resume as for
    any command; a lambda is refused), the path of a Python script
    (ctune.get_config / ctune.report inside), or a `trainable` dict. The other arguments as
    ctune.experiment takes them. name (default the script's name) names
    the database ./ctune-results/<name>.db; the config is written beside it
    (<name>.experiment.json), so `ctune run` of that file does the same.
    resume=True continues the newest unfinished experiment of that name
    (`ctune run --resume`). cpus, gpus: the local worker's (`--cpus`,
    `--gpus`). Ctrl-C stops the run as `ctune run` does (the trials stop
    with a checkpoint; resume=True goes on) and raises KeyboardInterrupt.
    The returned grid holds a private server: close it (or use `with`)."""
    name = name or _default_name(trainable)
    cfg = experiment(trainable, param_space, tune_config, name=name, metric=metric, mode=mode,
                     num_samples=num_samples, scheduler=scheduler, search_alg=search_alg,
                     resources_per_trial=resources_per_trial,
                     max_concurrent_trials=max_concurrent_trials, stop=stop,
                     time_budget_s=time_budget_s, seed=seed, max_failures=max_failures,
                     points_to_evaluate=points_to_evaluate)
    prog = _bin.need("ctune")
    os.makedirs(RESULTS_DIR, exist_ok=True)
    path = os.path.join(RESULTS_DIR, f"{name}.experiment.json")
    tmp = path + ".part"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    argv = [prog, "run", path]
    if resume:
        argv.append("--resume")
    if cpus is not None:
        argv += ["--cpus", str(cpus)]
    if gpus is not None:
        argv += ["--gpus", str(gpus)]
    tty = _inherit_stdout()
    # Its own session: a terminal's Ctrl-C reaches only Python, which
    # passes exactly one SIGINT on (two would be `ctune run`'s "stop now").
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                            stdout=None if tty else subprocess.PIPE,
                            stderr=subprocess.STDOUT if not tty else None,
                            start_new_session=True)
    try:
        if not tty:
            _relay(proc)
        rc = proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        try:
            if not tty:
                _relay(proc)
            proc.wait()
        except KeyboardInterrupt:  # a second Ctrl-C: stop now, as ctune's second
            proc.send_signal(signal.SIGINT)
            proc.wait()
        raise
    finally:
        if proc.stdout:
            proc.stdout.close()
    if rc not in _FINISHED:
        raise CtuneError(f"ctune run {path} failed (exit {rc}); its output above says why",
                         code="run_failed", path=path)
    return open_db(os.path.join(RESULTS_DIR, f"{name}.db"), experiment=name)


class Tuner:
    """Ray's Tuner: ctune.Tuner(trainable, param_space=..., tune_config=
    ctune.TuneConfig(...), run_config=ctune.RunConfig(...)).fit() runs it
    here (ctune.run) and returns the ResultGrid. The trainable: a function
    train_fn(config), a script path or a trainable dict, as for ctune.run.
    A function that cannot be shipped (a lambda, ...) is refused here, at
    once, not at fit()."""

    def __init__(self, trainable, param_space=None, tune_config=None, run_config=None,
                 **run_options):
        if callable(trainable) and not isinstance(trainable, (str, os.PathLike)):
            describe(trainable)  # raises now, with what to do instead
        self.trainable = trainable
        self.param_space = param_space
        self.tune_config = tune_config
        self.run_config = run_config or RunConfig()
        self.run_options = run_options

    def fit(self):
        return run(self.trainable, self.param_space, self.tune_config,
                   name=self.run_config.name, stop=self.run_config.stop, **self.run_options)
