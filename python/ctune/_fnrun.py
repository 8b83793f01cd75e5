"""The trial process of a function trainable (`python -m ctune._fnrun`):
rebuild the function from CTUNE_FUNCTION (see _function.py), call it with
the trial's config, and report a dict it returns as its last result. An
exception propagates: Python prints the traceback on stderr (the trial's
log, whose tail becomes the trial's error) and exits 1, so the trial ends
ERROR. SIGTERM (a stop, a drain) exits 0 as ctune.on_stop() does."""
import __future__
import base64
import importlib
import json
import linecache
import os
import pickle
import sys
import types


def _load():
    raw = os.environ.get("CTUNE_FUNCTION")
    if not raw:
        sys.exit("ctune._fnrun: CTUNE_FUNCTION is not set (ctune.Tuner sets it in the trainable)")
    spec = json.loads(base64.b64decode(raw))
    for p in reversed(spec.get("path", [])):
        if p not in sys.path:
            sys.path.insert(0, p)
    if "import" in spec:
        module, qualname = spec["import"]
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        return obj
    if "cloudpickle" in spec:
        return pickle.loads(base64.b64decode(spec["cloudpickle"]))
    shipped = spec["source"]
    # The shipped code's module is __main__, as where it came from: objects
    # of its classes pickle as __main__.Name (a checkpoint) and load back
    # here on resume, and in the notebook or script that ran the Tuner.
    main_module = types.ModuleType("__main__")
    sys.modules["__main__"] = main_module
    glb = vars(main_module)
    for name, module in shipped["modules"].items():
        glb[name] = importlib.import_module(module)
    for name, (module, qualname) in shipped["imports"].items():
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        glb[name] = obj
    for name, data in shipped["values"].items():
        glb[name] = pickle.loads(base64.b64decode(data))
    for d in shipped["defs"]:
        # The original file name and line numbers, and the source in
        # linecache: the traceback points into the user's own code.
        text = "\n" * (d["line"] - 1) + d["source"]
        filename = d["file"]
        if not os.path.isfile(filename):
            linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        # Annotations stay unevaluated: they may name what was not shipped.
        code = compile(text, filename, "exec", flags=__future__.annotations.compiler_flag,
                       dont_inherit=True)
        exec(code, glb)  # noqa: S102 (the user's own function)
    return glb[spec["name"]]


def main():
    import ctune
    fn = _load()
    ctune.on_stop()
    result = fn(ctune.get_config())
    if isinstance(result, dict) and result:
        ctune.report(result)


if __name__ == "__main__":
    main()
