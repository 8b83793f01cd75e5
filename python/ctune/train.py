"""Ray Train's names for a trainable, so that a Ray Tune training function
runs unchanged: `from ctune import train` (for `from ray import train`) and
`from ctune.train import Checkpoint` (for `from ray.train import
Checkpoint`).

    checkpoint = train.get_checkpoint()          # None on a fresh start
    if checkpoint:
        with checkpoint.as_directory() as d: ...
    train.report({"loss": l}, checkpoint=Checkpoint.from_directory(d))

A Checkpoint is a local folder's path (a str): also what
Result.checkpoint of a folder checkpoint is."""
import os

from ._checkpoint import Checkpoint, load_checkpoint
from ._trial import get_context
from ._trial import report as _report
from ._tuner import RunConfig

__all__ = ["Checkpoint", "RunConfig", "get_checkpoint", "get_context", "report"]


def get_checkpoint():
    """The trial's restored checkpoint as a Checkpoint (a folder), or None on
    a fresh start (ctune.load_checkpoint, for a folder checkpoint)."""
    got = load_checkpoint()
    if got is None:
        return None
    if not isinstance(got, str) or not os.path.isdir(got):
        raise TypeError("train.get_checkpoint(): the checkpoint is not a folder (it was "
                        "saved as a file or an object): use ctune.load_checkpoint()")
    return Checkpoint(got)


def report(metrics, *, checkpoint=None):
    """Ray's train.report(metrics, checkpoint=None): ctune.report."""
    return _report(metrics, checkpoint=None if checkpoint is None else os.fspath(checkpoint))
