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
from ._client import Client
from ._open import open_db
from ._results import ResultGrid
from ._search import experiment

RESULTS_DIR = "ctune-results"
# `ctune run`'s exit codes that still leave a finished experiment to read:
# 0 done, 1 cancelled (fail_fast), 6 every trial in ERROR (docs/cli.md).
_FINISHED = (0, 1, 6)
_UNFINISHED = ("PENDING", "RUNNING", "PAUSED")
# Seconds between tables in a notebook, where each one replaces the last.
NOTEBOOK_INTERVAL_S = 1


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


def _notebook_kernel():
    """True when this runs under a Jupyter kernel (IPython with a kernel)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:  # noqa: BLE001 (an odd IPython: no notebook)
        return False
    return shell is not None and getattr(shell, "kernel", None) is not None


class _NotebookTable:
    """The reporter's "== Status ==" blocks as one output area that each new
    block replaces (IPython.display's update); other lines (a trial's end,
    the best trial) printed below it as they come."""

    def __init__(self):
        from IPython.display import display, Pretty
        self._pretty = Pretty
        self._handle = display(Pretty(""), display_id=True)
        self._block = None

    def line(self, text):
        if text.startswith("== Status =="):
            self._block = [text]
        elif self._block is not None:
            if text.strip():
                self._block.append(text)
                return
            self._handle.update(self._pretty("".join(self._block)))
            self._block = None
        else:
            sys.stdout.write(text)
            sys.stdout.flush()

    def close(self):
        if self._block:
            self._handle.update(self._pretty("".join(self._block)))


class _Lines:
    """Lines copied to sys.stdout (a pipe, or an IPython without a kernel)."""

    def line(self, text):
        sys.stdout.write(text)
        sys.stdout.flush()

    def close(self):
        pass


def _relay(proc, out):
    """Copy the child's output to out line by line (a notebook's cell shows
    sys.stdout, not file descriptor 1)."""
    for line in iter(proc.stdout.readline, b""):
        out.line(line.decode("utf-8", "replace"))


def _inherit_stdout():
    try:
        return sys.stdout.isatty() and sys.stdout.fileno() == 1
    except (AttributeError, ValueError, OSError):
        return False


def _follow(argv):
    """Run a reporting `ctune` command (run, watch) to its end, its table in
    the terminal, in the notebook (updated in place) or line by line on
    sys.stdout; returns its exit status. Ctrl-C passes one SIGINT on (a
    second Ctrl-C a second one) and raises KeyboardInterrupt."""
    tty = _inherit_stdout()
    notebook = not tty and _notebook_kernel()
    if notebook:
        argv = argv + ["--interval", str(NOTEBOOK_INTERVAL_S)]
    out = None if tty else (_NotebookTable() if notebook else _Lines())
    # Its own session: a terminal's Ctrl-C reaches only Python, which
    # passes exactly one SIGINT on (two would be `ctune run`'s "stop now").
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                            stdout=None if tty else subprocess.PIPE,
                            stderr=subprocess.STDOUT if not tty else None,
                            start_new_session=True)
    try:
        if out:
            _relay(proc, out)
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        try:
            if out:
                _relay(proc, out)
            proc.wait()
        except KeyboardInterrupt:  # a second Ctrl-C: stop now, as ctune's second
            proc.send_signal(signal.SIGINT)
            proc.wait()
        raise
    finally:
        if out:
            out.close()
        if proc.stdout:
            proc.stdout.close()


def _run_remote(prog, cfg, name, resume, path):
    """CTUNE_SERVER set: submit there (or, with resume, follow the newest
    unfinished experiment of that name) and follow it with `ctune watch`.
    The server's workers run the trials; Ctrl-C stops following only."""
    client = Client()  # CTUNE_SERVER, CTUNE_TOKEN, CTUNE_CA_FILE, as the CLI reads them
    exp_id = None
    if resume:
        mine = [e for e in client.experiments()
                if e.get("name") == name and e.get("status") in _UNFINISHED]
        exp_id = max((e["id"] for e in mine), default=None)
    if exp_id is None:
        exp_id = client.submit(cfg)
    print(f"ctune: experiment {exp_id} ({name}) on {client.url}", flush=True)
    try:
        rc = _follow([prog, "watch", str(exp_id)])
    except KeyboardInterrupt:
        print(f"ctune: stopped following experiment {exp_id}; it goes on at {client.url} "
              f"(`ctune cancel {exp_id}` ends it, resume=True follows it again)",
              file=sys.stderr, flush=True)
        raise
    if rc != 0:
        raise CtuneError(f"ctune watch {exp_id} failed (exit {rc}); its output above says why",
                         code="run_failed", path=path)
    return ResultGrid(exp_id, client=client)


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
    The returned grid holds a private server: close it (or use `with`).

    With CTUNE_SERVER set (and CTUNE_TOKEN, CTUNE_CA_FILE as the CLI reads
    them) the experiment is submitted there instead and followed with
    `ctune watch` to its end; that server's workers run the trials.
    resume=True then follows the newest unfinished experiment of that name
    on the server; Ctrl-C stops following only."""
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
    if os.environ.get("CTUNE_SERVER"):
        if cpus is not None or gpus is not None:
            raise ValueError("cpus and gpus size the local worker of `ctune run`; with "
                             "CTUNE_SERVER set, that server's workers run the trials: unset "
                             "CTUNE_SERVER to run here")
        return _run_remote(prog, cfg, name, resume, path)
    argv = [prog, "run", path]
    if resume:
        argv.append("--resume")
    if cpus is not None:
        argv += ["--cpus", str(cpus)]
    if gpus is not None:
        argv += ["--gpus", str(gpus)]
    rc = _follow(argv)
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
