"""A Ray Tune script and its ctune port (examples/pytorch/tune_fmnist_ray.py
and tune_fmnist.py): the training functions are the same text, so is the
Tuner block; what differs besides the docstring is the imports (at most 5
lines); docs/python.md shows both scripts as they are. Ray's names
(ctune.train, ctune.tune, Checkpoint) work in a trial: a folder checkpoint
reported with Checkpoint.from_directory comes back from
train.get_checkpoint() on resume. No ctune C program runs."""
import ast
import difflib
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))

import ctune  # noqa: E402
from ctune import train, tune  # noqa: E402
from ctune.train import Checkpoint  # noqa: E402

EXAMPLES = os.path.join(REPO, "examples", "pytorch")
RAY = os.path.join(EXAMPLES, "tune_fmnist_ray.py")
CTUNE = os.path.join(EXAMPLES, "tune_fmnist.py")


def read(path):
    with open(path) as f:
        return f.read()


def segment(text, pick):
    """The source text of the first top-level node pick(node) accepts."""
    for node in ast.parse(text).body:
        if pick(node):
            return ast.get_source_segment(text, node)
    raise AssertionError("no such statement")


def is_train_fn(node):
    return isinstance(node, ast.FunctionDef) and node.name == "train_fmnist"


def is_main(node):
    return isinstance(node, ast.If) and "__main__" in ast.dump(node.test)


def changed(a, b):
    return [ln for ln in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
            if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]


class Port(unittest.TestCase):
    def test_the_training_function_and_the_tuner_block_are_kept(self):
        ray, ct = read(RAY), read(CTUNE)
        fn_diff = changed(segment(ray, is_train_fn), segment(ct, is_train_fn))
        self.assertLessEqual(len(fn_diff), 5, fn_diff)
        self.assertEqual(segment(ray, is_main), segment(ct, is_main))  # the Tuner block
        doc = ast.get_docstring(ast.parse(ray)), ast.get_docstring(ast.parse(ct))
        rest = changed(ray.replace(doc[0], ""), ct.replace(doc[1], ""))
        self.assertLessEqual(len(rest), 2 * 5, rest)
        self.assertTrue(all("import" in ln for ln in rest), rest)

    def test_the_docs_show_both_scripts_as_they_are(self):
        doc = read(os.path.join(REPO, "docs", "python.md"))
        for path in (RAY, CTUNE):
            text = read(path)
            body = text[text.index("import argparse"):]  # after the docstring
            self.assertTrue(body in doc, f"docs/python.md does not hold {path} as it is")
        self.assertIn("[docs/python.md](docs/python.md#port-a-ray-tune-script)",
                      read(os.path.join(REPO, "README.md")))


class RayNames(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ctune-port-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.env = {"CTUNE_CHECKPOINT_DIR": os.path.join(self.tmp, "trial"),
                    "CTUNE_RESUME": "0"}
        os.makedirs(self.env["CTUNE_CHECKPOINT_DIR"])
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        self.addCleanup(lambda: [os.environ.pop(k) if v is None else os.environ.update({k: v})
                                 for k, v in saved.items()])
        ctune._trial._reset(open(os.devnull, "w"))
        self.addCleanup(ctune._trial._reset)

    def test_a_checkpoint_folder_comes_back_on_resume(self):
        self.assertIsNone(train.get_checkpoint())  # a fresh start
        d = os.path.join(self.tmp, "ck")
        os.makedirs(d)
        with open(os.path.join(d, "checkpoint.pt"), "w") as f:
            f.write("epoch 1")
        ck = Checkpoint.from_directory(d)
        self.assertEqual((ck.path, repr(ck)), (d, f"Checkpoint(path={d!r})"))
        train.report({"loss": 0.5}, checkpoint=ck)
        os.environ["CTUNE_RESUME"] = "1"
        got = train.get_checkpoint()
        self.assertIsInstance(got, Checkpoint)
        with got.as_directory() as restored:
            with open(os.path.join(restored, "checkpoint.pt")) as f:
                self.assertEqual(f.read(), "epoch 1")
        copy = got.to_directory(os.path.join(self.tmp, "copy"))
        self.assertTrue(os.path.isfile(os.path.join(copy, "checkpoint.pt")))
        with self.assertRaises(ValueError):
            Checkpoint.from_directory(os.path.join(d, "checkpoint.pt"))

    def test_tune_has_rays_names(self):
        self.assertIs(tune.Tuner, ctune.Tuner)
        self.assertIs(tune.TuneConfig, ctune.TuneConfig)
        self.assertEqual(tune.loguniform(1e-3, 1e-1).to_json(),
                         {"type": "loguniform", "lower": 0.001, "upper": 0.1})
        self.assertIs(ctune.ASHAScheduler, ctune.ASHA)


if __name__ == "__main__":
    unittest.main(verbosity=2)
