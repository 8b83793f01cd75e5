"""A PEP 517/660 build backend for the ctune package, standard library only.

Why not setuptools: pip builds in an isolated environment and would fetch
setuptools from PyPI first, so `pip install ./python` would need a network.
This backend has no requirements: it zips ctune/*.py into a wheel itself."""
import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "ctune"
SUMMARY = "Python helpers for ctune trainables and a client for the ctune REST API"


def _version():
    with open(os.path.join(HERE, NAME, "__init__.py"), encoding="utf-8") as f:
        m = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if not m:
        raise RuntimeError("ctune/__init__.py has no __version__ line")
    return m.group(1)


def _metadata():
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {_version()}\n"
            f"Summary: {SUMMARY}\nLicense: MIT\nRequires-Python: >=3.8\n")


def _sources():
    """(archive name, bytes) of every module of the package, sorted."""
    out = []
    for root, dirs, files in os.walk(os.path.join(HERE, NAME)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for fn in sorted(files):
            if fn.endswith(".py") or fn == "py.typed":
                path = os.path.join(root, fn)
                with open(path, "rb") as f:
                    out.append((os.path.relpath(path, HERE).replace(os.sep, "/"), f.read()))
    return out


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _write_wheel(wheel_directory, files):
    ver = _version()
    dist = f"{NAME}-{ver}.dist-info"
    files = list(files) + [
        (f"{dist}/METADATA", _metadata().encode()),
        (f"{dist}/WHEEL", b"Wheel-Version: 1.0\nGenerator: ctune_build\n"
                          b"Root-Is-Purelib: true\nTag: py3-none-any\n"),
        (f"{dist}/top_level.txt", f"{NAME}\n".encode()),
        # pip makes bin/ctune from it: the C command line, found by _bin.find.
        (f"{dist}/entry_points.txt", b"[console_scripts]\nctune = ctune._cli:main\n"),
    ]
    record = "\n".join(_record_line(n, d) for n, d in files) + f"\n{dist}/RECORD,,\n"
    files.append((f"{dist}/RECORD", record.encode()))
    name = f"{NAME}-{ver}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in files:
            info = zipfile.ZipInfo(n, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, d)
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    dist = f"{NAME}-{_version()}.dist-info"
    os.makedirs(os.path.join(metadata_directory, dist), exist_ok=True)
    with open(os.path.join(metadata_directory, dist, "METADATA"), "w") as f:
        f.write(_metadata())
    return dist


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _sources())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # A .pth line puts this source tree on sys.path: edits show at once.
    return _write_wheel(wheel_directory, [(f"__editable__.{NAME}.pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{_version()}"
    name = f"{base}.tar.gz"
    members = [("pyproject.toml", None), ("_build/ctune_build.py", None)]
    members += [(n, d) for n, d in _sources()]
    members.append(("PKG-INFO", _metadata().encode()))
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for n, d in members:
            if d is None:
                with open(os.path.join(HERE, n), "rb") as f:
                    d = f.read()
            info = tarfile.TarInfo(f"{base}/{n}")
            info.size, info.mode, info.mtime = len(d), 0o644, int(time.time())
            t.addfile(info, io.BytesIO(d))
    return name
