"""Function trainables: ctune.Tuner(train_fn, ...) with train_fn(config)
calling ctune.report. The function runs in the worker's trial process, as a
command trainable this module makes (`python -m ctune._fnrun`), so
resources, limits, checkpoints and resume are those of any command.

How the function gets there, in this order:
- a function of an importable module: imported there by module and
  qualname, with this process's sys.path;
- a function of `__main__` (a script, a notebook cell): its source, plus
  each global name its code loads: modules (imported by name), functions
  and classes of importable modules (imported), functions of `__main__`
  (their source, in turn) and values that pickle by value;
- else, when cloudpickle is installed, cloudpickle's bytes.
What none of these can ship (a lambda, a closure, a global holding an
object of a class defined in `__main__`) is refused here, at once, with
what to do instead.

The description travels base64-encoded in the trainable's `env`
(CTUNE_FUNCTION): no `{` reaches the placeholder grammar of argv/env, and
the experiment in the database holds everything a resumed trial needs."""
import ast
import base64
import dis
import importlib
import inspect
import json
import linecache
import os
import pickle
import pickletools
import sys
import textwrap
import types

ENV = "CTUNE_FUNCTION"
# One environment string may hold 128 KiB (Linux MAX_ARG_STRLEN).
MAX_ENCODED = 120 * 1024
_PLAIN = (type(None), bool, int, float, complex, str, bytes)


class FunctionNotShippable(TypeError):
    """A function ctune cannot run in a trial process, with what to do."""


def _fix_hint(fn):
    return (f"define {fn.__name__} with `def` in a module file next to your script or "
            f"notebook (e.g. train_lib.py) and import it from there, or install cloudpickle")


def _refuse(fn, why):
    raise FunctionNotShippable(f"cannot run {getattr(fn, '__qualname__', fn)!r} in a trial "
                               f"process: {why}; {_fix_hint(fn)}")


def _resolve(module, qualname):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _importable(obj):
    """(module, qualname) when obj is reachable by importing its module
    (not __main__) and walking its qualname, else None."""
    mod = getattr(obj, "__module__", None)
    qual = getattr(obj, "__qualname__", None)
    if not mod or not qual or mod == "__main__" or "<" in qual:
        return None
    try:
        return (mod, qual) if _resolve(mod, qual) is obj else None
    except Exception:  # noqa: BLE001 (any failure to import means "not this way")
        return None


def _global_names(code):
    """The global names code (and the code nested in it) loads."""
    names = set()
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL"):
            names.add(ins.argval)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _def_line_names(src):
    """The names a def statement loads when it runs (decorators, default
    values), which its code object does not hold; annotations are left
    unevaluated in the trial."""
    node = ast.parse(src).body[0]
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return set()
    args = node.args
    names = set()
    for expr in list(node.decorator_list) + args.defaults + [d for d in args.kw_defaults if d]:
        names |= {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
    return names


def _pickles_by_value(value):
    """pickle bytes of value when it needs nothing of __main__ to load,
    else None."""
    try:
        data = pickle.dumps(value, protocol=4)
    except Exception:  # noqa: BLE001
        return None
    if isinstance(value, _PLAIN):
        return data
    for op, arg, _ in pickletools.genops(data):
        if isinstance(arg, str) and arg.split(" ")[0] == "__main__":
            return None  # GLOBAL "__main__ Name", or STACK_GLOBAL's module string
    return data


def _source_of(fn):
    if fn.__closure__:
        _refuse(fn, "it is a closure (it uses variables of the function that defined it: "
                    f"{', '.join(fn.__code__.co_freevars)})")
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        _refuse(fn, f"its source cannot be read ({e})")
    src = textwrap.dedent("".join(lines))
    return src, first, fn.__code__.co_filename


def _class_names(src):
    """The names a class statement's source loads (bases, decorators, method
    bodies): a class keeps no code object of its body to read them from."""
    names = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            names.add(node.id)
    return names


def _class_source(cls, fn):
    """(source, first line, file) of a class of __main__. inspect finds a
    script's; a notebook cell's class has no file it can name (before
    Python 3.13), so its methods' code says which cell (linecache holds the
    cells) and where: the class statement around that line."""
    try:
        lines, first = inspect.getsourcelines(cls)
        return textwrap.dedent("".join(lines)), first, inspect.getsourcefile(cls) or "<class>"
    except (OSError, TypeError) as e:
        why = e
    for attr in vars(cls).values():
        attr = getattr(attr, "__func__", None) or getattr(attr, "fget", None) or attr
        code = getattr(attr, "__code__", None)
        if code is None:
            continue
        lines = linecache.getlines(code.co_filename)
        try:
            tree = ast.parse("".join(lines))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.ClassDef) and node.name == cls.__name__
                    and node.lineno <= code.co_firstlineno <= node.end_lineno):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                src = textwrap.dedent("".join(lines[start - 1:node.end_lineno]))
                return src, start, code.co_filename
    _refuse(fn, f"it uses the class {cls.__name__}, whose source cannot be read ({why})")


def _ship_source(obj, out, seen, fn):
    """Adds obj (a function or class of __main__), after the globals it
    loads, to out: a class statement needs its bases defined first."""
    seen.add(obj.__name__)
    if isinstance(obj, type):
        src, first, filename = _class_source(obj, fn)
        names = _class_names(src)
        glb = vars(sys.modules.get(obj.__module__)) if obj.__module__ in sys.modules else {}
    else:
        src, first, filename = _source_of(obj)
        names = _global_names(obj.__code__) | _def_line_names(src)
        glb = obj.__globals__
    if not src.lstrip().startswith(("def ", "async def ", "class ", "@")):
        _refuse(fn, f"the source of {obj.__name__} is not a `def` or `class` statement")
    for name in sorted(names):
        if name in seen or name in out["values"] or name not in glb:
            continue  # a builtin, a local, or a name set at run time
        value = glb[name]
        if isinstance(value, types.ModuleType):
            out["modules"][name] = value.__name__
            continue
        ref = _importable(value) if callable(value) else None
        if ref:
            out["imports"][name] = list(ref)
            continue
        if (isinstance(value, (types.FunctionType, type)) and value.__module__ == "__main__"
                and getattr(value, "__name__", "") == name):
            _ship_source(value, out, seen, fn)
            continue
        data = None if isinstance(value, type) else _pickles_by_value(value)
        if data is None:
            _refuse(fn, f"it uses the global {name!r} ({type(value).__name__}), which is "
                        f"neither a module, nor importable, nor a value that pickles")
        out["values"][name] = base64.b64encode(data).decode("ascii")
    out["defs"].append({"name": obj.__name__, "source": src, "line": first, "file": filename})


def _search_path():
    out = []
    for p in sys.path:
        if isinstance(p, str):
            p = os.path.abspath(p or os.curdir)
            if os.path.isdir(p) and p not in out:
                out.append(p)
    return out


def describe(fn):
    """The JSON-able description of fn that _fnrun rebuilds it from."""
    if not callable(fn):
        raise TypeError(f"trainable: a function, a script path or a trainable dict, not "
                        f"{type(fn).__name__}")
    if getattr(fn, "__name__", "") == "<lambda>":
        raise FunctionNotShippable(
            "a lambda cannot be a trainable (its source is part of a larger expression, and "
            "a trial process cannot import it): write `def train_fn(config): ...` and pass "
            "train_fn")
    if not isinstance(fn, types.FunctionType):
        ref = _importable(fn)
        if ref is None:
            raise FunctionNotShippable(f"trainable: {fn!r} is not a plain function; "
                                       f"{_fix_hint(fn)}")
    spec = {"path": _search_path(), "name": fn.__name__}
    ref = _importable(fn)
    if ref:
        spec["import"] = list(ref)
        return spec
    shipped = {"defs": [], "modules": {}, "imports": {}, "values": {}}
    try:
        _ship_source(fn, shipped, set(), fn)
        spec["source"] = shipped
    except FunctionNotShippable as refused:
        try:
            import cloudpickle
        except ImportError:
            raise refused from None
        spec["cloudpickle"] = base64.b64encode(cloudpickle.dumps(fn)).decode("ascii")
    return spec


def function_trainable(fn, python=None):
    """The command trainable running fn(config) in the trial process (this
    interpreter, or python; in this process's working folder)."""
    spec = describe(fn)
    encoded = base64.b64encode(json.dumps(spec).encode()).decode("ascii")
    if len(encoded) > MAX_ENCODED:
        raise FunctionNotShippable(
            f"{fn.__name__} and the globals it uses take {len(encoded) // 1024} KiB, more than "
            f"a trial's environment can carry ({MAX_ENCODED // 1024} KiB): keep large data in "
            f"files, or define {fn.__name__} in a module file and import it")
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return {"type": "command", "argv": [python or sys.executable, "-m", "ctune._fnrun"],
            "cwd": os.getcwd(), "env": {"PYTHONPATH": pkg, ENV: encoded}}
