"""Finding and running the C programs (ctune, ctune-server) from Python.

The one validator of an experiment is the C one (server/core/validate.c);
Python never checks a config itself. `check()` runs `ctune sample` on a
config so that a bad argument raises at once, with the server's own path
and message."""
import json
import os
import subprocess

from ._errors import CtuneError

_NOT_FOUND = object()
_found = {}
# Where an install that ships the C programs with the package puts them.
PACKAGE_BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin")


def _is_program(path):
    """An executable file that is not a script: the C programs are never
    scripts, while pip's `ctune` console entry (this package) is one, so
    the lookup can never find the entry point itself."""
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return False
    try:
        with open(path, "rb") as f:
            return f.read(2) != b"#!"
    except OSError:
        return False


def find(name):
    """The path of the C program `name`: in $CTUNE_BIN_DIR, else in the
    package's own bin/ folder (an install that ships the programs with the
    package), else on PATH; a script of that name (pip's `ctune` entry
    point) is passed over. None when none has it."""
    d = os.environ.get("CTUNE_BIN_DIR")
    if d and _is_program(os.path.join(d, name)):
        return os.path.join(d, name)
    beside = os.path.join(PACKAGE_BIN, name)
    if _is_program(beside):
        return beside
    key = (name, os.environ.get("PATH"))
    hit = _found.get(key)
    if hit is None:
        hit = _NOT_FOUND
        for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
            p = os.path.join(folder or os.curdir, name)
            if _is_program(p):
                hit = os.path.abspath(p)
                break
        _found[key] = hit
    return None if hit is _NOT_FOUND else hit


def need(name):
    """find(name), or CtuneError code "no_binary" saying where it looked."""
    p = find(name)
    if p is None:
        raise CtuneError(f"cannot find the {name} program (ctune's C programs): set "
                         f"CTUNE_BIN_DIR to the folder holding it (e.g. build/bin), or put it "
                         f"on PATH", code="no_binary", path=name)
    return p


def _parse_rejection(stderr):
    """(path, message) of `ctune sample`'s "ctune: FILE: rejected: PATH:
    MESSAGE (400 invalid_config)" line, else None."""
    for line in stderr.splitlines():
        at = line.find(": rejected: ")
        if at < 0:
            continue
        rest = line[at + len(": rejected: "):]
        tail = " (400 invalid_config)"
        if rest.endswith(tail):
            rest = rest[:-len(tail)]
        path, sep, message = rest.partition(": ")
        return (path, message) if sep else ("", rest)
    return None


def sample(config, required=True):
    """`ctune sample --json` on config (a dict): the dry run's answer, as the
    server would give it. Raises CtuneError(status=400,
    code="invalid_config", path=..., message=...) with the C validator's
    path and message for a config it refuses. With required=False and no
    `ctune` program found, returns None (nothing checked)."""
    prog = find("ctune") if not required else need("ctune")
    if prog is None:
        return None
    text = json.dumps(config)
    try:
        p = subprocess.run([prog, "sample", "/dev/stdin", "--json"], input=text.encode(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CtuneError(f"running {prog} sample failed: {e}", code="no_binary",
                         path=prog) from None
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode == 0:
        try:
            return json.loads(p.stdout)
        except ValueError:
            raise CtuneError(f"{prog} sample printed no JSON", code="bad_response",
                             path=prog) from None
    got = _parse_rejection(err)
    if got is None:
        raise CtuneError(f"{prog} sample failed (exit {p.returncode}): {err.strip()[:500]}",
                         code="sample_failed", path=prog)
    raise CtuneError(got[1], status=400, code="invalid_config", path=got[0])
