"""ctune.ResultGrid / Result over a real ctune-server and ctune-worker
(binaries from CTUNE_BIN_DIR): iteration, config, metrics, every result,
the best by scope, errors, counts, a dataframe (pandas or a list), the
checkpoint downloaded on demand as a local folder, and the Pareto front of
an experiment with two objectives."""
import os
import sys
import types
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
PY = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")
sys.path.insert(0, PY)
sys.path.insert(0, os.path.join(PY, "tests"))

import ctune  # noqa: E402
import ctune._results  # noqa: E402
import ctune_procs  # noqa: E402

# loss = x / it, score = -x * it, wiggle 5 5 5 for x 1 and 0 0 10 for x 2;
# x 3 fails after its first result.
TRAINABLE = r'''
import os, tempfile
import ctune
cfg = ctune.get_config({"x": 1})
for it in range(1, 4):
    if cfg["x"] == 3 and it == 2:
        raise RuntimeError("x=3 is broken")
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "model.txt"), "w") as f:
        f.write(f"{cfg['x']} {it}")
    wiggle = 10 if (cfg["x"], it) == (2, 3) else 5 if cfg["x"] == 1 else 0
    ctune.report(loss=cfg["x"] / it, score=-cfg["x"] * it, wiggle=wiggle, checkpoint=d)
'''


class ResultGridE2E(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c, trainable = ctune_procs.script_cluster(TRAINABLE, "ctune")
        cls.client = ctune.Client(cls.c.url, token=cls.c.tokens["admin"])
        space = {"x": ctune.grid_search([1, 2, 3])}
        cls.one = cls.client.submit(ctune.experiment(
            trainable, space, ctune.TuneConfig(metric="loss", mode="min"), name="rg"))
        cls.two = cls.client.submit(ctune.experiment(
            trainable, space, name="rg-mo", metric=["loss", "score"], mode=["min", "max"]))
        ctune_procs.run_to_end(cls.c, cls.client, (cls.one, cls.two))

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def test_trials_metrics_errors(self):
        grid = ctune.ResultGrid("rg", client=self.client)
        self.assertEqual(len(grid), 3)
        self.assertEqual([r.config["x"] for r in grid], [1, 2, 3])
        self.assertEqual((grid.num_terminated, grid.num_errors), (2, 1), grid)
        broken = grid[2]
        self.assertEqual(broken.status, "ERROR")
        self.assertIsNone(grid[0].error)
        self.assertEqual(grid.errors, [broken.error])
        self.assertTrue(broken.error)
        self.assertAlmostEqual(grid[1].metrics["loss"], 2 / 3)
        self.assertEqual(grid[1].metrics["training_iteration"], 3)
        with mock.patch.object(ctune._results, "_pandas", lambda: None):
            rows = grid[1].metrics_dataframe
            self.assertEqual([r["loss"] for r in rows], [2.0, 1.0, 2 / 3])
            table = grid.get_dataframe()
            self.assertEqual([(r["trial_name"], r["config/x"], r["status"]) for r in table],
                             [("rg_00000", 1, "TERMINATED"), ("rg_00001", 2, "TERMINATED"),
                              ("rg_00002", 3, "ERROR")])
            self.assertAlmostEqual(table[0]["loss"], 1 / 3)
            # Each trial's best result by loss, max: its first (loss x / it).
            by = grid.get_dataframe(filter_metric="loss", filter_mode="max")
            self.assertEqual([r["training_iteration"] for r in by], [1, 1, 1])
        # With pandas: a DataFrame of the same rows.
        fake = types.SimpleNamespace(DataFrame=types.SimpleNamespace(
            from_records=lambda rows: ("frame", rows)))
        with mock.patch.object(ctune._results, "_pandas", lambda: fake):
            kind, rows = grid.get_dataframe()
            self.assertEqual((kind, len(rows)), ("frame", 3))

    def test_best_and_checkpoint(self):
        with ctune.ResultGrid(self.one, client=self.client) as grid:
            best = grid.get_best_result()
            self.assertEqual(best.config["x"], 1)
            # By score, max, best of all results: x 1's -1. By loss, max,
            # averaged: x 3's one result, 3.
            self.assertEqual(grid.get_best_result("score", "max", "all").config["x"], 1)
            self.assertEqual(grid.get_best_result("loss", "max", "avg").config["x"], 3)
            # The scope decides: x 2's last wiggle is 10, x 1's average 5.
            self.assertEqual(grid.get_best_result("wiggle", "max").config["x"], 2)
            self.assertEqual(grid.get_best_result("wiggle", "max", "avg").config["x"], 1)
            path = best.checkpoint
            self.assertTrue(os.path.isdir(path), path)
            with open(os.path.join(path, "model.txt")) as f:
                self.assertEqual(f.read(), "1 3")
            self.assertEqual(best.checkpoint, path)  # downloaded once
            folder = grid._tmp
        self.assertFalse(os.path.exists(folder))  # closed: removed

    def test_pareto_front(self):
        grid = ctune.ResultGrid("rg-mo", client=self.client)
        # loss min, score max: x 1 (loss 1/3, score -3) dominates x 2; x 3 failed.
        self.assertEqual([r.config["x"] for r in grid.pareto_front()], [1])
        with self.assertRaises(ctune.CtuneError) as cm:
            grid.get_best_result()
        self.assertEqual(cm.exception.path, "metric")
        self.assertEqual(grid.get_best_result("score").config["x"], 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
