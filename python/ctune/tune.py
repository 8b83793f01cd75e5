"""Ray Tune's names, so that `from ctune import tune` stands for `from ray
import tune`: tune.Tuner, tune.TuneConfig, tune.run, tune.report, the
search spaces (tune.choice, tune.loguniform, ...), tune.grid_search.
Schedulers and searchers under Ray's names are on ctune itself
(`from ctune import ASHAScheduler`)."""
from ._search import (TuneConfig, choice, grid_search, lograndint, loguniform, qloguniform,
                      qrandint, quniform, randint, randn, uniform)
from ._trial import get_context, report
from ._tuner import RunConfig, Tuner, run

__all__ = ["RunConfig", "TuneConfig", "Tuner", "choice", "get_context", "grid_search",
           "lograndint", "loguniform", "qloguniform", "qrandint", "quniform", "randint", "randn",
           "report", "run", "uniform"]
