"""Checkpoint requests: a worker given a preemption notice asks each running
trial to checkpoint before it stops it (docs/worker.md#preemption). It sends
SIGUSR1, only to a process that catches it, and creates CHECKPOINT_NOW in the
trial's checkpoint dir (CTUNE_CHECKPOINT_DIR), which any program may poll.

on_checkpoint_request(fn) (or a first checkpoint_requested()) installs the
SIGUSR1 handler; the handler only records the request (it may run in the
middle of a write to stdout). The next report() then saves fn()'s state
with its line, or report(checkpoint=...) given by the caller satisfies it.
The worker stops the trial (SIGTERM) as soon as that checkpoint's line
arrives, or after a third of its grace."""
import os
import signal
import threading


REQUEST_FILE = "CHECKPOINT_NOW"

_lock = threading.Lock()
state = {"signalled": False, "installed": False, "saver": None}


def _on_sigusr1(signum, frame):
    state["signalled"] = True


def install():
    """The SIGUSR1 handler (main thread only; elsewhere the file still works)."""
    with _lock:
        if state["installed"]:
            return
        try:
            signal.signal(signal.SIGUSR1, _on_sigusr1)
            state["installed"] = True
        except ValueError:
            pass  # not the main thread: the worker does not signal, the file says it


def _file():
    d = os.environ.get("CTUNE_CHECKPOINT_DIR")
    return os.path.join(d, REQUEST_FILE) if d else None


def requested():
    """True after SIGUSR1 or while CHECKPOINT_NOW exists (until a save)."""
    if state["signalled"]:
        return True
    f = _file()
    return bool(f) and os.path.exists(f)


def satisfied():
    """A checkpoint was saved: the request is answered."""
    state["signalled"] = False
    f = _file()
    if f:
        try:
            os.unlink(f)
        except OSError:
            pass


def pending_state():
    """What report() saves now: the saver's state when a request waits."""
    saver = state["saver"]
    if saver is None or not requested():
        return None
    return saver()


def set_saver(fn):
    state["saver"] = fn
    install()

