"""Checkpoints of a trial: <checkpoint dir>/checkpoint.bin, one file.

The worker puts checkpoint.bin back before a resumed attempt
(docs/protocol.md#builtin-and-command) and uploads the file a stdout line
names: after renaming it into place, save_checkpoint (and report) print which
file it is ({"_checkpoint": {"ino", "size"}}, docs/protocol.md#checkpoints-in-band),
so the worker labels it with that exact result whatever the timing. So
save_checkpoint packs what it is given (a directory, a file, bytes or any
picklable object) into one uncompressed tar written to a temporary file and
renamed. A manifest member records what was packed and the last reported
training_iteration/time_total_s, so a resumed attempt continues counting even
where the worker does not pass CTUNE_START_ITERATION."""
import io
import json
import os
import pickle
import posixpath
import shutil
import sys
import tarfile
import tempfile
import threading
import time

from . import _stopping
from ._errors import CtuneError

CHECKPOINT_FILE = "checkpoint.bin"
MANIFEST = "ctune-checkpoint.json"
FORMAT = 1

_local_dir = None
_lock = threading.Lock()
# The last result report() wrote: the manifest records it (set by _trial).
last_reported = {"training_iteration": None, "time_total_s": None}
# The reserved result key naming the checkpoint file saved at a line: the
# worker reads it and never stores it.
CKPT_KEY = "_checkpoint"


def file_ref(path):
    """{"ino", "size"} of the checkpoint file just renamed into place: what a
    line tells the worker so that it takes exactly this file."""
    st = os.stat(path)
    return {"ino": st.st_ino, "size": st.st_size}


def _note(msg):
    print(f"ctune: {msg}", file=sys.stderr, flush=True)


def checkpoint_dir():
    """The folder that holds checkpoint.bin: CTUNE_CHECKPOINT_DIR in a trial
    (the trial's own dir). Outside a trial, a fresh temporary folder for this
    process (set CTUNE_CHECKPOINT_DIR to choose one and test a resume)."""
    global _local_dir
    d = os.environ.get("CTUNE_CHECKPOINT_DIR")
    if d:
        return d
    with _lock:
        if _local_dir is None:
            _local_dir = tempfile.mkdtemp(prefix="ctune-local-")
            _note(f"not in a trial (CTUNE_CHECKPOINT_DIR unset): checkpoints go to {_local_dir}")
        return _local_dir


def checkpoint_path():
    return os.path.join(checkpoint_dir(), CHECKPOINT_FILE)


def _add_bytes(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
    tar.addfile(info, io.BytesIO(data))


def _add_tree(tar, root):
    """Regular files and folders under root as data/...; links and special
    files are left out (loudly): load_checkpoint would refuse them."""
    tar.add(root, arcname="data", recursive=False)
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        rel = os.path.relpath(dirpath, root)
        arc = "data" if rel == "." else posixpath.join("data", *rel.split(os.sep))
        for name in dirs + sorted(files):
            path = os.path.join(dirpath, name)
            if os.path.islink(path) or not (os.path.isfile(path) or os.path.isdir(path)):
                _note(f"save_checkpoint: leaving out {path}: not a regular file or folder")
                if name in dirs:
                    dirs.remove(name)
                continue
            tar.add(path, arcname=posixpath.join(arc, name), recursive=False)


def save_checkpoint(obj, iteration=None):
    """Save obj as this trial's checkpoint and return the checkpoint file's
    path. obj: a folder (str or os.PathLike: its whole tree), a file (a path:
    load_checkpoint gives the file back under its name), bytes, or any
    picklable object (a dict of torch state_dicts works). iteration: the
    training_iteration it belongs to (default: the last one reported).

    Call it after report() of the iteration the state belongs to (or pass
    checkpoint= to report). In a trial it then prints one line naming the
    file ({"_checkpoint": {...}}), which tells the worker to upload exactly
    it, labelled with that iteration."""
    from ._trial import _emit_locked, in_trial  # circular at import time only
    with _stopping.deferred():  # a SIGTERM meanwhile exits once it is saved and named
        path, it = _save(obj, iteration)
        if in_trial():  # only a worker reads the line
            ref = file_ref(path)
            ref["training_iteration"] = it
            _emit_locked(json.dumps({CKPT_KEY: ref}))
        return path


def _save(obj, iteration):
    """Writes the checkpoint file; (its path, the iteration it records)."""
    if iteration is None:
        iteration = last_reported["training_iteration"]
    manifest = {"format": FORMAT, "training_iteration": iteration,
                "time_total_s": last_reported["time_total_s"], "created": time.time()}
    src = None
    if isinstance(obj, (str, os.PathLike)):
        src = os.fspath(obj)
        if os.path.isdir(src):
            manifest["kind"] = "dir"
        elif os.path.isfile(src):
            manifest["kind"], manifest["name"] = "file", os.path.basename(src)
        else:
            raise CtuneError(f"save_checkpoint: {src} is neither a file nor a folder (to save "
                             f"a string, put it in a dict)", code="bad_checkpoint", path=src)
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        manifest["kind"] = "bytes"
        payload = bytes(obj)
    else:
        manifest["kind"] = "pickle"
        try:
            payload = pickle.dumps(obj, protocol=4)
        except Exception as e:
            raise CtuneError(f"save_checkpoint: cannot pickle a {type(obj).__name__}: {e}",
                             code="bad_checkpoint") from e
    d = checkpoint_dir()
    os.makedirs(d, exist_ok=True)
    final = os.path.join(d, CHECKPOINT_FILE)
    fd, tmp = tempfile.mkstemp(prefix=".checkpoint.", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            with tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar:
                _add_bytes(tar, MANIFEST, json.dumps(manifest).encode())
                if manifest["kind"] == "dir":
                    _add_tree(tar, src)
                elif manifest["kind"] == "file":
                    tar.add(src, arcname="data/" + manifest["name"], recursive=False)
                else:
                    _add_bytes(tar, "data.bin", payload)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, final)  # the rename is what the worker uploads on
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return final, iteration


def read_manifest(path):
    """The manifest of a checkpoint file save_checkpoint wrote, else None."""
    try:
        with tarfile.open(path, mode="r:") as tar:
            first = tar.next()
            if first is None or first.name != MANIFEST or not first.isfile():
                return None
            m = json.loads(tar.extractfile(first).read().decode())
            return m if isinstance(m, dict) and m.get("format") == FORMAT else None
    except (OSError, tarfile.TarError, ValueError, UnicodeDecodeError):
        return None


def _safe_members(tar, path):
    """The data/ members, each checked: a checkpoint is data, never links,
    devices, absolute paths or '..' (it may come from another machine)."""
    out = []
    for m in tar.getmembers():
        if m.name == MANIFEST:
            continue
        parts = m.name.split("/")
        if (m.name.startswith("/") or ".." in parts or parts[0] not in ("data", "data.bin")
                or not (m.isfile() or m.isdir())):
            raise CtuneError(f"checkpoint member {m.name!r} is not allowed (only files and "
                             f"folders under data/)", code="bad_checkpoint", path=path)
        out.append(m)
    return out


def _plain_file_name(name, members):
    """name is one path component, not '.' or '..', and data/<name> is a
    regular file of the archive."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name \
            or "\\" in name or "\x00" in name:
        return False
    return any(m.name == "data/" + name and m.isfile() for m in members)


def _extract(tar, members, into):
    for m in members:
        rel = m.name[len("data"):].lstrip("/")
        dest = os.path.join(into, *rel.split("/")) if rel else into
        if m.isdir():
            os.makedirs(dest, exist_ok=True)
            continue
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with tar.extractfile(m) as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out)
        os.chmod(dest, 0o600 | (m.mode & 0o100))


def load_checkpoint(into=None, file=None):
    """What save_checkpoint saved, or None when there is nothing to resume:
    a folder → the path of a folder holding its tree (into, else
    <checkpoint dir>/restored, emptied first); a file → the path of that
    file inside such a folder; bytes → bytes; an object → the object
    (unpickled: load only checkpoints you trust, as with torch.load).
    A checkpoint.bin that save_checkpoint did not write comes back as bytes.

    file: read this checkpoint file instead of the trial's (e.g. one that
    Client.download_checkpoint fetched)."""
    if file is None:
        from ._trial import is_resumed  # circular at import time only
        if not is_resumed():
            return None
        file = checkpoint_path()
        if not os.path.isfile(file):
            return None
    manifest = read_manifest(file)
    if manifest is None:
        with open(file, "rb") as f:
            return f.read()
    kind = manifest.get("kind")
    with tarfile.open(file, mode="r:") as tar:
        members = _safe_members(tar, file)
        if kind in ("bytes", "pickle"):
            blob = [m for m in members if m.name == "data.bin"]
            if not blob:
                raise CtuneError("checkpoint has no data.bin", code="bad_checkpoint", path=file)
            data = tar.extractfile(blob[0]).read()
            return data if kind == "bytes" else pickle.loads(data)
        if kind not in ("dir", "file"):
            raise CtuneError(f"checkpoint kind {kind!r} is unknown (written by a newer ctune?)",
                             code="bad_checkpoint", path=file)
        name = manifest.get("name")
        if kind == "file" and not _plain_file_name(name, members):
            # The path returned must be the file extracted into `into`, never
            # one the manifest points at elsewhere (a checkpoint may come
            # from another machine).
            raise CtuneError(f"checkpoint manifest name {name!r} is not the name of the file "
                             f"it holds (one plain file name under data/)",
                             code="bad_checkpoint", path=file)
        if into is None:
            into = os.path.join(os.path.dirname(os.path.abspath(file)), "restored")
            if os.path.isdir(into) and not os.path.islink(into):
                shutil.rmtree(into)
        os.makedirs(into, exist_ok=True)
        _extract(tar, members, into)
    if kind == "file":
        return os.path.join(into, name)
    return into
