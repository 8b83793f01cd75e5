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
import contextlib
import os
import shutil
import tempfile

from ._checkpoint import load_checkpoint
from ._trial import get_context
from ._trial import report as _report
from ._tuner import RunConfig

__all__ = ["Checkpoint", "RunConfig", "get_checkpoint", "get_context", "report"]


class Checkpoint(str):
    """Ray's Checkpoint of a folder: the folder's path."""

    @classmethod
    def from_directory(cls, path):
        path = os.fspath(path)
        if not os.path.isdir(path):
            raise ValueError(f"Checkpoint.from_directory({path!r}): not a folder")
        return cls(path)

    @property
    def path(self):
        return str(self)

    @contextlib.contextmanager
    def as_directory(self):
        """The folder itself (local already)."""
        yield str(self)

    def to_directory(self, path=None):
        """A copy of the folder at path (default: a new temporary folder)."""
        if path is None:
            path = tempfile.mkdtemp(prefix="ctune-checkpoint-")
        shutil.copytree(self, path, dirs_exist_ok=True)
        return os.fspath(path)

    def __repr__(self):
        return f"Checkpoint(path={str(self)!r})"


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
