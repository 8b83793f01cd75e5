"""Function trainables: ctune.Tuner(train_fn, ...) runs train_fn(config) in
the worker's trial process (`python -m ctune._fnrun`).

Without a server (the trial process alone, as the worker starts it): a
function of an importable module is imported there; a function of
`__main__` is shipped as its source with the globals it loads (a helper
function, a class, a module, a constant); an exception exits 1 with the
traceback, naming the user's own source line; a lambda, a closure and a
global that cannot be shipped are refused at once with what to do.

With `ctune run` (one experiment, interrupted by Ctrl-C and resumed): a
trial whose function raises ends ERROR with the traceback; a trial over its
memory_mb ends ERROR naming memory_mb and a trial runs pinned to its one
CPU (the resources and limits of any command trainable);
the trial that was running resumes from its checkpoint and finishes."""
from __future__ import annotations  # train_pickles' annotation names nothing

import contextlib
import json
import linecache
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PY = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")
sys.path.insert(0, PY)
sys.path.insert(0, os.path.join(PY, "tests"))

import ctune  # noqa: E402
import ctune_procs  # noqa: E402
from ctune._function import FunctionNotShippable, describe, function_trainable  # noqa: E402

SCALE = 10  # a global constant the shipped function loads
MODULE = '''
import ctune

def train(config):
    ctune.report(loss=config["x"] * 2)
'''


def double(x):  # a helper of __main__, shipped with the function
    return 2 * x


class Model:  # a class of __main__, shipped by its source
    def __init__(self, x):
        self.x = x

    def loss(self, it):
        return double(self.x) * SCALE / it


def train_main(config):
    state = ctune.load_checkpoint() or {"it": 0}
    if config["case"] == "raise":
        raise ValueError("bad case " + config["case"])
    if config["case"] == "hog":
        hog = b"\x01" * (config["hog_mb"] << 20)  # over memory_mb, touched: RLIMIT_AS or OOM
        ctune.report(loss=len(hog))
    for it in range(state["it"] + 1, 4):
        ctune.report(loss=Model(config["x"]).loss(it), resumed_from=state["it"],
                     cpus=len(os.sched_getaffinity(0)), checkpoint={"it": it})
        if config["marker"]:
            open(config["marker"], "a").close()  # a checkpoint is out: interrupt now
        time.sleep(config["pause"])


STEPS = 4  # a default value's global


def train_pickles(config: Config, steps=STEPS):  # an annotation naming nothing shipped
    model = pickle.loads(pickle.dumps(Model(config["x"])))  # a checkpoint of a __main__ class
    ctune.report(loss=model.loss(1), steps=steps)


def run_trial(trainable, config):
    """The trial process as the worker starts it (minus the worker)."""
    env = dict(os.environ, **trainable["env"], CTUNE_CONFIG=json.dumps(config))
    env.pop("CTUNE_TRIAL_ID", None)
    return subprocess.run(trainable["argv"], env=env, cwd=trainable["cwd"], capture_output=True,
                          text=True, timeout=60)


@contextlib.contextmanager
def no_cloudpickle():
    """As if cloudpickle were not installed (None in sys.modules: ImportError)."""
    saved = sys.modules.get("cloudpickle")
    sys.modules["cloudpickle"] = None
    try:
        yield
    finally:
        if saved is None:
            del sys.modules["cloudpickle"]
        else:
            sys.modules["cloudpickle"] = saved


class Shipping(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ctune-fn-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def test_a_module_function_is_imported(self):
        with open(os.path.join(self.tmp, "fnlib_mod.py"), "w") as f:
            f.write(MODULE)
        sys.path.insert(0, self.tmp)
        self.addCleanup(sys.path.remove, self.tmp)
        import fnlib_mod
        spec = describe(fnlib_mod.train)
        self.assertEqual(spec["import"], ["fnlib_mod", "train"])
        self.assertIn(self.tmp, spec["path"])  # sys.path is carried
        p = run_trial(function_trainable(fnlib_mod.train), {"x": 4})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["loss"], 8)

    def test_a_main_function_is_shipped_with_what_it_uses(self):
        spec = describe(train_main)
        self.assertNotIn("import", spec)
        shipped = spec["source"]
        self.assertEqual([d["name"] for d in shipped["defs"]], ["double", "Model", "train_main"])
        self.assertEqual(shipped["modules"], {"ctune": "ctune", "os": "os", "time": "time"})
        self.assertEqual(list(shipped["values"]), ["SCALE"])
        t = function_trainable(train_main)
        self.assertNotIn("{", json.dumps(t["argv"]) + t["env"]["CTUNE_FUNCTION"])  # no placeholder
        p = run_trial(t, {"case": "ok", "x": 3, "marker": "", "pause": 0})
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = [json.loads(ln) for ln in p.stdout.splitlines()]
        self.assertEqual([r["loss"] for r in lines], [60, 30, 20])

    def test_a_notebook_cells_class_is_found_through_linecache(self):
        # As IPython runs a cell: its own file name, the text in linecache
        # only; inspect cannot read such a class, its methods' code can.
        cell = ("class CellNet:\n    def width(self):\n        return 7\n\n"
                "def cell_train(config):\n    ctune.report(loss=CellNet().width())\n")
        name = os.path.join(self.tmp, "ipykernel_1", "cell.py")  # no such file
        linecache.cache[name] = (len(cell), None, cell.splitlines(True), name)
        self.addCleanup(linecache.cache.pop, name, None)
        exec(compile(cell, name, "exec"), globals())  # noqa: S102
        self.addCleanup(globals().pop, "CellNet")
        self.addCleanup(globals().pop, "cell_train")
        spec = describe(cell_train)  # noqa: F821 (defined by the cell)
        self.assertEqual([d["name"] for d in spec["source"]["defs"]], ["CellNet", "cell_train"])
        p = run_trial(function_trainable(cell_train), {})  # noqa: F821
        self.assertEqual((p.returncode, json.loads(p.stdout)["loss"]), (0, 7), p.stderr)

    def test_objects_of_shipped_classes_pickle_and_defaults_come_along(self):
        p = run_trial(function_trainable(train_pickles), {"x": 2})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual((json.loads(p.stdout)["loss"], json.loads(p.stdout)["steps"]), (40, 4))

    def test_an_exception_exits_1_with_the_traceback(self):
        p = run_trial(function_trainable(train_main), {"case": "raise", "x": 1, "marker": "",
                                                       "pause": 0})
        self.assertEqual(p.returncode, 1)
        self.assertIn("ValueError: bad case raise", p.stderr)
        self.assertIn(f'File "{os.path.abspath(__file__)}"', p.stderr)
        self.assertIn('raise ValueError("bad case " + config["case"])', p.stderr)  # the user's line

    def test_what_cannot_be_shipped_is_refused_at_once(self):
        with self.assertRaises(FunctionNotShippable) as cm:
            ctune.Tuner(lambda config: None, param_space={})
        self.assertIn("a lambda cannot be a trainable", str(cm.exception))
        self.assertIn("write `def train_fn(config): ...`", str(cm.exception))

        def make():
            n = 3

            def inner(config):
                ctune.report(loss=n)
            return inner
        with no_cloudpickle(), self.assertRaises(FunctionNotShippable) as cm:
            ctune.run(make(), {})
        self.assertIn("it is a closure", str(cm.exception))
        self.assertIn("in a module file", str(cm.exception))
        try:
            import cloudpickle  # noqa: F401
        except ImportError:
            pass
        else:  # with cloudpickle what the source cannot carry goes by value
            p = run_trial(function_trainable(make()), {})
            self.assertEqual((p.returncode, json.loads(p.stdout)["loss"]), (0, 3), p.stderr)

        global LOCK
        LOCK = threading.Lock()  # neither a module, nor importable, nor picklable

        def uses_lock(config):
            with LOCK:
                ctune.report(loss=1)
        uses_lock.__qualname__ = "uses_lock"  # as if defined at the top level
        with no_cloudpickle(), self.assertRaises(FunctionNotShippable) as cm:
            describe(uses_lock)
        self.assertIn("the global 'LOCK' (lock)", str(cm.exception))


class FunctionRun(unittest.TestCase):
    def setUp(self):
        ctune_procs.need_bins("ctune", "ctune-server", "ctune-worker")
        self.old = os.getcwd()
        self.tmp = tempfile.mkdtemp(prefix="ctune-fnrun-")
        os.chdir(self.tmp)
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.addCleanup(os.chdir, self.old)

    def test_errors_limits_ctrl_c_and_resume(self):
        marker = os.path.join(self.tmp, "checkpointed")
        kw = dict(param_space={"case": ctune.grid_search(["raise", "hog", "ok"]), "x": 1,
                               "hog_mb": 400, "marker": marker, "pause": 0.1},
                  name="fn", metric="loss", mode="min", cpus=2,
                  resources_per_trial={"cpu": 1, "memory_mb": 200})
        t = ctune_procs.interrupt_when(marker)
        with self.assertRaises(KeyboardInterrupt):
            ctune.run(train_main, **kw)
        t.join(5)
        os.unlink(marker)
        with ctune.run(train_main, resume=True, **kw) as grid:
            self.assertEqual(grid.experiment["status"], "TERMINATED")
            by_case = {r.config["case"]: r for r in grid}
            self.assertIn("ValueError: bad case raise", by_case["raise"].error)
            self.assertIn("in train_main", by_case["raise"].error)  # the traceback
            self.assertIn("memory_mb", by_case["hog"].error)
            ok = by_case["ok"]
            self.assertIsNone(ok.error)
            self.assertEqual(ok.metrics["training_iteration"], 3)
            self.assertGreaterEqual(ok.metrics["resumed_from"], 1)  # went on from a checkpoint
            self.assertEqual(ok.metrics["cpus"], 1)  # pinned to its resources_per_trial
            self.assertEqual(ctune.load_checkpoint(file=ok.checkpoint), {"it": 3})
            with open("ctune-results/fn.experiment.json") as f:
                argv = json.load(f)["trainable"]["argv"]
            self.assertEqual(argv[1:], ["-m", "ctune._fnrun"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
