"""SIGTERM ("stop: save a checkpoint and exit 0") and the sections it must not
cut short. A stop that arrives while save_checkpoint writes (the worker
often sends it right after the result that precedes the save: ASHA's stop, or
max_t) waits for the checkpoint to be renamed into place, then exits.

The handler itself only raises SystemExit(0): it may run in the middle of
any bytecode, even inside a write to stdout, where a callback that prints
would fail ("reentrant call"). The on_stop callbacks run at exit instead
(atexit), after the stack has unwound, with everything they refer to alive."""
import atexit
import os
import signal
import sys
import threading
import traceback
from contextlib import contextmanager

_lock = threading.RLock()
state = {"requested": False, "pending": False, "callbacks": [], "installed": False,
         "exit": True, "defer": 0}


def _stop_now():
    state["pending"] = False
    if state["exit"]:
        raise SystemExit(0)  # SIGTERM is "stop": exit 0, finally blocks run


def _on_sigterm(signum, frame):
    state["requested"] = True
    if state["defer"] > 0:
        state["pending"] = True  # the section's end stops
        return
    _stop_now()


def _at_exit():
    if not state["requested"]:
        return
    for fn in reversed(state["callbacks"]):
        try:
            fn()
        except BaseException:
            # A stop whose save failed must not look like a clean one.
            traceback.print_exc()
            for f in (sys.stdout, sys.stderr):
                try:
                    f.flush()
                except (OSError, ValueError, AttributeError):
                    pass
            os._exit(1)


@contextmanager
def deferred():
    """A section a SIGTERM does not interrupt: the stop happens at its end."""
    state["defer"] += 1
    try:
        yield
    finally:
        state["defer"] -= 1
        if state["defer"] == 0 and state["pending"]:
            _stop_now()


def install(fn, exit):
    with _lock:
        if not state["installed"]:
            signal.signal(signal.SIGTERM, _on_sigterm)  # ValueError off the main thread
            atexit.register(_at_exit)
            state["installed"] = True
        if fn is not None:
            state["callbacks"].append(fn)
        state["exit"] = exit
