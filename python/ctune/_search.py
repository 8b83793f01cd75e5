"""Search spaces, schedulers and searchers as Python objects, named and
called as in Ray Tune, each making the experiment JSON of docs/scheduling.md.

Python checks nothing itself: each object is checked, when it is made, by
the one validator (server/core/validate.c) through `ctune sample` on a
small experiment that holds it, so a bad argument raises CtuneError at once
with the server's message and the path inside the object (`lower`,
`scheduler.grace_period`). Without a `ctune` program (CTUNE_BIN_DIR, PATH)
that check waits for the submission, where the server makes the same one."""
import json
import math
import os
import sys
from collections.abc import Mapping

from . import _bin
from ._errors import CtuneError
from ._function import function_trainable

# A trainable for the probe experiments: any command will do, none runs.
_PROBE_TRAINABLE = {"type": "command", "argv": ["true"]}
_PROBE_METRIC = "_ctune_probe"


def to_json(value, where="param_space"):
    """value with every ctune object replaced by its JSON, tuples as lists,
    numpy/torch scalars as numbers. NaN and infinities have no JSON
    spelling: ValueError naming where."""
    if isinstance(value, _Spec):
        return value.to_json()
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: {value} cannot be written in JSON (no NaN or infinity)")
        return value
    if isinstance(value, Mapping):
        return {str(k): to_json(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v, f"{where}[{i}]") for i, v in enumerate(value)]
    item = getattr(value, "item", None)
    if callable(item):
        return to_json(item(), where)
    raise TypeError(f"{where}: a {type(value).__name__} ({value!r:.60}) has no JSON form")


class _Spec:
    """Something that is a piece of the experiment JSON."""

    def to_json(self):
        raise NotImplementedError

    def __repr__(self):
        return json.dumps(self.to_json())

    def __eq__(self, other):
        return isinstance(other, _Spec) and self.to_json() == other.to_json()

    __hash__ = None


_accepted = set()  # probes the validator accepted (a notebook re-runs cells)


def _check(probe, prefix, rename):
    """Run probe through the C validator; a refusal is raised with its path
    made relative to the object (prefix dropped, rename put in front)."""
    key = json.dumps(probe, sort_keys=True)
    if key in _accepted:
        return
    try:
        if _bin.sample(probe, required=False) is not None and len(_accepted) < 4096:
            _accepted.add(key)
    except CtuneError as e:
        if e.code != "invalid_config":
            raise
        path = e.path or ""
        if path == prefix or path.startswith(prefix + "."):
            path = path[len(prefix):].lstrip(".")
        path = f"{rename}.{path}" if path and rename else (rename or path)
        raise CtuneError(e.message, status=400, code="invalid_config", path=path) from None


# -- search spaces ------------------------------------------------------


class Domain(_Spec):
    """One `param_space` domain: {"type": ..., fields}."""

    def __init__(self, type_, **fields):
        self._json = {"type": type_}
        self._json.update({k: to_json(v, f"{type_}.{k}") for k, v in fields.items()
                           if v is not None})
        _check({"param_space": {"x": self._json}, "trainable": _PROBE_TRAINABLE, "seed": 0},
               "param_space.x", type_)

    def to_json(self):
        return dict(self._json)


def choice(categories):
    """One of categories, each equally likely (Ray's tune.choice)."""
    return Domain("choice", values=list(categories) if isinstance(categories, (tuple, range))
                  else categories)


def uniform(lower, upper):
    """Uniform in [lower, upper)."""
    return Domain("uniform", lower=lower, upper=upper)


def quniform(lower, upper, q):
    """round(uniform / q) * q, inside [lower, upper]."""
    return Domain("quniform", lower=lower, upper=upper, q=q)


def loguniform(lower, upper, base=10):
    """Log-uniform in [lower, upper). base is accepted as Ray takes it; the
    distribution does not depend on it."""
    return Domain("loguniform", lower=lower, upper=upper)


def qloguniform(lower, upper, q, base=10):
    """round(loguniform / q) * q, inside [lower, upper]."""
    return Domain("qloguniform", lower=lower, upper=upper, q=q)


def randint(lower, upper):
    """An integer in [lower, upper): upper excluded, as in Ray."""
    return Domain("randint", lower=lower, upper=upper)


def lograndint(lower, upper, base=10):
    """floor(loguniform(lower, upper)): upper excluded."""
    return Domain("lograndint", lower=lower, upper=upper)


def qrandint(lower, upper, q=1):
    """A multiple of q in [lower, upper], both ends included (as in Ray)."""
    return Domain("qrandint", lower=lower, upper=upper, q=q)


def randn(mean=0.0, sd=1.0):
    """Normal with this mean and standard deviation."""
    return Domain("randn", mean=mean, sd=sd)


def pow2(lower, upper):
    """2^k for k uniform over the exponents from lower to upper (powers of
    two, both included). ctune's own; Ray has none."""
    return Domain("pow2", lower=lower, upper=upper)


class GridSearch(_Spec):
    """Every value, crossed with the other grids (Ray's tune.grid_search)."""

    def __init__(self, values):
        self._values = to_json(list(values) if isinstance(values, (tuple, range)) else values,
                               "grid_search")
        _check({"param_space": {"x": {"grid_search": self._values}},
                "trainable": _PROBE_TRAINABLE, "seed": 0}, "param_space.x", "")

    def to_json(self):
        return {"grid_search": list(self._values)}


def grid_search(values):
    return GridSearch(values)


def _probe_space(mutations):
    """A param_space holding PBT's mutated keys (a list as a choice)."""
    if not isinstance(mutations, Mapping):
        return {}
    out = {}
    for k, v in mutations.items():
        if isinstance(v, list) and v:
            out[k] = {"type": "choice", "values": v}
        elif isinstance(v, Mapping) and "type" not in v:
            out[k] = _probe_space(v)
        else:
            out[k] = v
    return out


# -- schedulers -----------------------------------------------------------


class Scheduler(_Spec):
    """A `scheduler` object. metric and mode, which Ray's schedulers take,
    are the experiment's (its top-level `metric` and `mode`)."""

    TYPE = None

    def __init__(self, metric=None, mode=None, **fields):
        self.metric = metric
        self.mode = mode
        self._json = {"type": self.TYPE}
        self._json.update({k: to_json(v, f"scheduler.{k}") for k, v in fields.items()
                           if v is not None})
        probe = {"metric": metric if metric is not None else _PROBE_METRIC,
                 "mode": mode if mode is not None else "min", "scheduler": self._json,
                 "param_space": _probe_space(self._json.get("hyperparam_mutations")),
                 "trainable": _PROBE_TRAINABLE, "seed": 0}
        _check(probe, "", "")

    def to_json(self):
        return dict(self._json)

    def __repr__(self):
        extra = {k: v for k, v in (("metric", self.metric), ("mode", self.mode)) if v}
        return json.dumps({**extra, "scheduler": self.to_json()} if extra else self.to_json())


class FIFO(Scheduler):
    """Every trial to its end; with max_t, stop at time_attr >= max_t."""
    TYPE = "fifo"

    def __init__(self, time_attr=None, max_t=None):
        super().__init__(time_attr=time_attr, max_t=max_t)


class ASHA(Scheduler):
    """Asynchronous successive halving (Ray's ASHAScheduler). promotion=True
    picks the promotion variant (ctune's own)."""
    TYPE = "asha"

    def __init__(self, time_attr=None, metric=None, mode=None, max_t=None, grace_period=None,
                 reduction_factor=None, brackets=None, promotion=None):
        super().__init__(metric, mode, time_attr=time_attr, max_t=max_t,
                         grace_period=grace_period, reduction_factor=reduction_factor,
                         brackets=brackets, promotion=promotion)


class HyperBand(Scheduler):
    """Synchronous HyperBand (Ray's HyperBandScheduler)."""
    TYPE = "hyperband"

    def __init__(self, time_attr=None, metric=None, mode=None, max_t=None,
                 reduction_factor=None):
        super().__init__(metric, mode, time_attr=time_attr, max_t=max_t,
                         reduction_factor=reduction_factor)


class PBT(Scheduler):
    """Population based training, asynchronous (Ray's
    PopulationBasedTraining). hyperparam_mutations holds domains, lists
    and nested dicts, as in Ray."""
    TYPE = "pbt"

    def __init__(self, time_attr=None, metric=None, mode=None, perturbation_interval=None,
                 burn_in_period=None, hyperparam_mutations=None, quantile_fraction=None,
                 resample_probability=None, perturbation_factors=None):
        super().__init__(metric, mode, time_attr=time_attr,
                         perturbation_interval=perturbation_interval,
                         burn_in_period=burn_in_period,
                         hyperparam_mutations=hyperparam_mutations,
                         quantile_fraction=quantile_fraction,
                         resample_probability=resample_probability,
                         perturbation_factors=perturbation_factors)


class MedianStopping(Scheduler):
    """Ray's MedianStoppingRule."""
    TYPE = "median_stopping"

    def __init__(self, time_attr=None, metric=None, mode=None, grace_period=None,
                 min_samples_required=None, min_time_slice=None, hard_stop=None):
        super().__init__(metric, mode, time_attr=time_attr, grace_period=grace_period,
                         min_samples_required=min_samples_required,
                         min_time_slice=min_time_slice, hard_stop=hard_stop)


# -- searchers ------------------------------------------------------------


class Searcher(_Spec):
    """A `search_alg` object (None: no search_alg key, the default)."""

    def __init__(self, json_):
        self._json = json_
        if json_ is not None:
            _check({"metric": _PROBE_METRIC, "mode": "min", "search_alg": json_,
                    "param_space": {"x": {"type": "uniform", "lower": 0, "upper": 1}},
                    "trainable": _PROBE_TRAINABLE, "seed": 0}, "", "")

    def to_json(self):
        return None if self._json is None else dict(self._json)


class TPE(Searcher):
    """Tree-structured Parzen Estimator, Optuna 5's TPESampler (the options
    of docs/scheduling.md "TPE"; unset ones take the server's defaults)."""

    def __init__(self, n_startup_trials=None, n_ei_candidates=None, prior_weight=None,
                 consider_prior=None, consider_magic_clip=None, consider_endpoints=None,
                 multivariate=None, constant_liar=None, gamma=None, gamma_max=None,
                 weights=None):
        opts = dict(n_startup_trials=n_startup_trials, n_ei_candidates=n_ei_candidates,
                    prior_weight=prior_weight, consider_prior=consider_prior,
                    consider_magic_clip=consider_magic_clip,
                    consider_endpoints=consider_endpoints, multivariate=multivariate,
                    constant_liar=constant_liar, gamma=gamma, gamma_max=gamma_max,
                    weights=weights)
        j = {"type": "tpe"}
        j.update({k: to_json(v, f"search_alg.{k}") for k, v in opts.items() if v is not None})
        super().__init__(j)


class Random(Searcher):
    """Random search (and the grid), the default."""

    def __init__(self):
        super().__init__({"type": "random"})


class Grid(Searcher):
    """The grid_search values of param_space, num_samples times, the other
    domains drawn per trial: no search_alg key."""

    def __init__(self):
        super().__init__(None)

    def __repr__(self):
        return "ctune.Grid()"


# -- the experiment -------------------------------------------------------


class TuneConfig:
    """Ray's TuneConfig: what the experiment optimises and how. Unset fields
    are left out of the JSON (the server's defaults)."""

    FIELDS = ("metric", "mode", "search_alg", "scheduler", "num_samples",
              "max_concurrent_trials", "time_budget_s", "seed", "max_failures")

    def __init__(self, metric=None, mode=None, search_alg=None, scheduler=None, num_samples=None,
                 max_concurrent_trials=None, time_budget_s=None, seed=None, max_failures=None):
        for k in self.FIELDS:
            setattr(self, k, locals()[k])

    def __repr__(self):
        args = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.FIELDS
                         if getattr(self, k) is not None)
        return f"ctune.TuneConfig({args})"


def script_trainable(path, args=(), python=None):
    """A command trainable running the Python script at path with this
    interpreter (or python), in the script's folder, with this package on
    PYTHONPATH (a trial's environment is built from nothing)."""
    path = os.path.abspath(os.fspath(path))
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return {"type": "command", "argv": [python or sys.executable, path, *map(str, args)],
            "cwd": os.path.dirname(path), "env": {"PYTHONPATH": pkg}}


def _set(out, key, value, source):
    if value is None:
        return
    if key in out and out[key] != value:
        raise ValueError(f"{key} is given twice, as {out[key]!r} and as {value!r} ({source}): "
                         f"give it once")
    out[key] = value


def experiment(trainable, param_space=None, tune_config=None, *, name=None, metric=None,
               mode=None, num_samples=None, scheduler=None, search_alg=None,
               resources_per_trial=None, max_concurrent_trials=None, stop=None,
               time_budget_s=None, seed=None, max_failures=None, points_to_evaluate=None,
               check=True):
    """The experiment JSON (a dict) for these Ray-style arguments.

    trainable: a dict (the `trainable` JSON as it is), the path of a
    Python script (run by this interpreter, see script_trainable), or a
    function train_fn(config) that calls ctune.report (run in the trial
    process, see _function.py; a lambda is refused).
    Arguments given both directly and in tune_config (or a scheduler's
    metric/mode) must agree. check: run the whole config through the C
    validator now (`ctune sample`; skipped when no `ctune` program is found)."""
    out = {}
    if name is not None:
        out["name"] = name
    tc = tune_config or TuneConfig()
    direct = dict(metric=metric, mode=mode, scheduler=scheduler, search_alg=search_alg,
                  num_samples=num_samples, max_concurrent_trials=max_concurrent_trials,
                  time_budget_s=time_budget_s, seed=seed, max_failures=max_failures)
    merged = {}
    for k in TuneConfig.FIELDS:
        _set(merged, k, getattr(tc, k), "TuneConfig")
        _set(merged, k, direct[k], "an argument")
    sched = merged.pop("scheduler", None)
    if sched is not None:
        if not isinstance(sched, Scheduler):
            raise TypeError(f"scheduler: a ctune scheduler (ctune.ASHA(...), ...), not "
                            f"{type(sched).__name__}")
        _set(merged, "metric", sched.metric, "the scheduler's metric")
        _set(merged, "mode", sched.mode, "the scheduler's mode")
    alg = merged.pop("search_alg", None)
    if alg is not None and not isinstance(alg, Searcher):
        raise TypeError(f"search_alg: a ctune searcher (ctune.TPE(...), ctune.Random(), "
                        f"ctune.Grid()), not {type(alg).__name__}")
    for k in ("metric", "mode", "num_samples", "max_concurrent_trials", "seed", "max_failures",
              "time_budget_s"):
        if k in merged:
            out[k] = to_json(merged[k], k)
    if param_space is not None:
        out["param_space"] = to_json(param_space)
    if sched is not None:
        out["scheduler"] = sched.to_json()
    if alg is not None and alg.to_json() is not None:
        out["search_alg"] = alg.to_json()
    if points_to_evaluate is not None:
        out["points_to_evaluate"] = to_json(points_to_evaluate, "points_to_evaluate")
    if stop is not None:
        out["stop"] = to_json(stop, "stop")
    if resources_per_trial is not None:
        out["resources_per_trial"] = to_json(resources_per_trial, "resources_per_trial")
    if isinstance(trainable, (str, os.PathLike)):
        trainable = script_trainable(trainable)
    elif callable(trainable):
        trainable = function_trainable(trainable)
    elif not isinstance(trainable, Mapping):
        raise TypeError("trainable: a function train_fn(config), the path of a Python script, "
                        "or a `trainable` dict ({'type': 'command', 'argv': [...]} or "
                        "{'type': 'builtin', ...})")
    out["trainable"] = to_json(trainable, "trainable")
    if check:
        _bin.sample(out, required=False)
    return out


# Ray Tune's names.
ASHAScheduler = AsyncHyperBandScheduler = ASHA
HyperBandScheduler = HyperBand
PopulationBasedTraining = PBT
MedianStoppingRule = MedianStopping
FIFOScheduler = FIFO
BasicVariantGenerator = Random
