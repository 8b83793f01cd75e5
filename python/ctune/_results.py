"""ResultGrid and Result, as Ray Tune's, over the REST client: one
experiment's trials, their configs, metrics and checkpoints."""
import os
import shutil
import tempfile
import weakref

from ._checkpoint import load_checkpoint, read_manifest
from ._client import Client
from ._errors import CtuneError


def _pandas():
    """The pandas module, or None when it is not installed."""
    try:
        import pandas
    except ImportError:
        return None
    return pandas


def _frame(rows):
    """A pandas DataFrame of rows when pandas is there, else the list."""
    pd = _pandas()
    return pd.DataFrame.from_records(rows) if pd is not None else rows


class Result:
    """One trial of a ResultGrid: config, last metrics, every result, error,
    checkpoint. Made by ResultGrid; not meant to be built by hand."""

    def __init__(self, grid, trial):
        self._grid = grid
        self._trial = trial
        self._checkpoint = None

    trial_id = property(lambda self: self._trial["id"])
    trial_name = property(lambda self: self._trial.get("name"))
    status = property(lambda self: self._trial.get("status"))
    config = property(lambda self: dict(self._trial.get("config") or {}))

    @property
    def metrics(self):
        """The trial's last result (a dict; {} before its first)."""
        return dict(self._trial.get("last_result") or {})

    @property
    def error(self):
        """Why the trial failed (a string) when its status is ERROR, else None."""
        return self._trial.get("error") if self.status == "ERROR" else None

    @property
    def metrics_dataframe(self):
        """Every result of the trial in order: a pandas DataFrame when pandas
        is installed, else a list of dicts."""
        return _frame(self._grid.client.results(self.trial_id))

    @property
    def checkpoint(self):
        """The trial's stored checkpoint as a local path, downloaded on first
        use into the grid's folder: a checkpoint of a folder (Ray's
        Checkpoint.from_directory, ctune.report(checkpoint=folder)) is that
        folder, of a file that file; any other (an object, bytes) is the
        checkpoint file itself, for ctune.load_checkpoint(file=...). None
        when the trial stored none."""
        if self._checkpoint is None:
            if not self._trial.get("has_checkpoint"):
                return None
            d = os.path.join(self._grid._folder(), f"trial-{self.trial_id}")
            os.makedirs(d, exist_ok=True)
            got = self._grid.client.download_checkpoint(self.trial_id,
                                                         os.path.join(d, "checkpoint.bin"))
            manifest = read_manifest(got["path"])
            if manifest is not None and manifest.get("kind") in ("dir", "file"):
                self._checkpoint = load_checkpoint(file=got["path"],
                                                   into=os.path.join(d, "checkpoint"))
                if manifest["kind"] == "dir":  # Ray's Checkpoint: as_directory() works
                    from .train import Checkpoint  # train imports this module's users
                    self._checkpoint = Checkpoint(self._checkpoint)
            else:
                self._checkpoint = got["path"]
        return self._checkpoint

    def __repr__(self):
        return (f"Result(trial={self.trial_name!r}, status={self.status!r}, "
                f"config={self.config!r}, metrics={self.metrics!r}"
                + (f", error={self.error!r}" if self.error else "") + ")")


class ResultGrid:
    """An experiment's trials as Ray's ResultGrid: results[i], iteration,
    len(), get_best_result(), get_dataframe(), num_errors, num_terminated,
    errors; pareto_front() for several objectives.

    grid = ctune.ResultGrid(experiment, client=None, storage_path=None)
    experiment: an id or a name; client: a ctune.Client (default: from
    CTUNE_SERVER / CTUNE_TOKEN). Checkpoints are downloaded into
    storage_path, else a temporary folder that close() (or the end of the
    program) removes. The trials are read when it is made; refresh() reads
    them again."""

    def __init__(self, experiment, client=None, storage_path=None):
        self.client = client if client is not None else Client()
        self.experiment_id = self.client.experiment_id(experiment)
        self._storage = storage_path
        self._tmp = None
        self._cleanup = None
        self.refresh()

    def refresh(self):
        """Read the experiment and its trials again."""
        self.experiment = self.client.experiment(self.experiment_id)
        self._results = [Result(self, t) for t in self.client.trials(self.experiment_id)]
        return self

    def _folder(self):
        if self._storage is not None:
            os.makedirs(self._storage, exist_ok=True)
            return self._storage
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix=f"ctune-results-{self.experiment_id}-")
            self._cleanup = weakref.finalize(self, shutil.rmtree, self._tmp, True)
        return self._tmp

    def close(self):
        """Remove the temporary checkpoint folder (not a storage_path)."""
        if self._cleanup is not None:
            self._cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __len__(self):
        return len(self._results)

    def __iter__(self):
        return iter(list(self._results))

    def __getitem__(self, i):
        return self._results[i]

    def _by_id(self, trial_id):
        for r in self._results:
            if r.trial_id == trial_id:
                return r
        self.refresh()  # a trial made since
        for r in self._results:
            if r.trial_id == trial_id:
                return r
        raise CtuneError(f"trial {trial_id} is not in experiment {self.experiment_id}",
                         code="not_found")

    @property
    def num_errors(self):
        return sum(r.status == "ERROR" for r in self._results)

    @property
    def num_terminated(self):
        return sum(r.status == "TERMINATED" for r in self._results)

    @property
    def errors(self):
        """The errors of the failed trials (strings)."""
        return [r.error for r in self._results if r.status == "ERROR"]

    def get_best_result(self, metric=None, mode=None, scope="last"):
        """The best trial's Result, chosen by the server (Client.best): by
        the experiment's metric and mode unless given; scope last, avg,
        last-5-avg, last-10-avg or all. With several objectives name one
        metric, or use pareto_front()."""
        best = self.client.best(self.experiment_id, metric=metric, mode=mode, scope=scope)
        return self._by_id(best["trial_id"])

    def pareto_front(self, scope="last"):
        """With several objectives: the Results of the trials on the Pareto
        front (Client.pareto), in the server's order."""
        front = self.client.pareto(self.experiment_id, scope=scope)
        return [self._by_id(t["trial_id"]) for t in front["trials"]]

    def get_dataframe(self, filter_metric=None, filter_mode=None):
        """One row per trial: trial_id, trial_name, status, error, the
        metrics of its last result (with filter_metric and filter_mode, of
        its best result by that metric) and config/<key>. A pandas DataFrame
        when pandas is installed, else a list of dicts."""
        if (filter_metric is None) != (filter_mode is None):
            raise ValueError("filter_metric and filter_mode go together")
        if filter_mode not in (None, "min", "max"):
            raise ValueError(f"filter_mode {filter_mode!r} is not 'min' or 'max'")
        best = {}
        if filter_metric is not None:
            sign = 1 if filter_mode == "min" else -1
            for row in self.client.experiment_results(self.experiment_id):
                res, tid = row.get("result") or {}, row.get("trial_id")
                v = res.get(filter_metric)
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    if tid not in best or sign * v < sign * best[tid][filter_metric]:
                        best[tid] = res
        rows = []
        for r in self._results:
            row = {"trial_id": r.trial_id, "trial_name": r.trial_name, "status": r.status,
                   "error": r.error}
            row.update(best.get(r.trial_id, r.metrics) if filter_metric else r.metrics)
            row.update({f"config/{k}": v for k, v in _flat(r.config).items()})
            rows.append(row)
        return _frame(rows)

    def __repr__(self):
        return (f"ResultGrid(experiment={self.experiment_id}, "
                f"status={self.experiment.get('status')!r}, trials={len(self)}, "
                f"terminated={self.num_terminated}, errors={self.num_errors})")


def _flat(config, prefix=""):
    out = {}
    for k, v in config.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = v
    return out
