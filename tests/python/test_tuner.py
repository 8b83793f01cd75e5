"""ctune.Tuner(...).fit() / ctune.run(...) with a script trainable: the
experiment JSON written beside the database, `ctune run` on it (binaries
from CTUNE_BIN_DIR), the ResultGrid read back; every trial failing still
gives a grid; Ctrl-C stops the run (KeyboardInterrupt, the experiment
stays unfinished) and resume=True completes it; with CTUNE_SERVER set the
experiment goes to that server (its token variable used) and is followed
to its end. Function trainables:
test_function.py."""
import json
import os
import sys
import tempfile
import shutil
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PY = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")
sys.path.insert(0, PY)
sys.path.insert(0, os.path.join(PY, "tests"))

import ctune  # noqa: E402
import ctune_procs  # noqa: E402

TRAIN = r'''
import os, time
import ctune
cfg = ctune.get_config({"x": 1, "fail": False, "marker": "", "pause": 0})
state = ctune.load_checkpoint() or {"it": 0}
ctune.on_stop()
if cfg["fail"]:
    raise RuntimeError("broken on purpose")
for it in range(state["it"] + 1, 4):
    if cfg["marker"]:
        open(cfg["marker"], "a").close()  # the run is going: the test may interrupt it
    time.sleep(cfg["pause"])
    ctune.report(loss=cfg["x"] / it, checkpoint={"it": it})
'''


class TunerE2E(unittest.TestCase):
    def setUp(self):
        ctune_procs.need_bins("ctune", "ctune-server", "ctune-worker")
        self.old = os.getcwd()
        self.tmp = tempfile.mkdtemp(prefix="ctune-tuner-")
        os.chdir(self.tmp)
        with open("train.py", "w") as f:
            f.write(TRAIN)
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.addCleanup(os.chdir, self.old)

    def test_fit_returns_the_result_grid(self):
        tuner = ctune.Tuner("train.py", param_space={"x": ctune.grid_search([2, 1])},
                            tune_config=ctune.TuneConfig(
                                metric="loss", mode="min",
                                scheduler=ctune.ASHAScheduler(max_t=3, grace_period=1)),
                            run_config=ctune.RunConfig(name="tn"), cpus=2)
        with tuner.fit() as grid:
            self.assertEqual(sorted(r.config["x"] for r in grid), [1, 2])
            self.assertEqual(grid.num_terminated, 2)
            best = grid.get_best_result()
            self.assertEqual((best.config["x"], best.metrics["training_iteration"]), (1, 3))
            self.assertEqual(ctune.load_checkpoint(file=best.checkpoint), {"it": 3})
        with open("ctune-results/tn.experiment.json") as f:
            cfg = json.load(f)
        self.assertEqual(cfg["scheduler"], {"type": "asha", "max_t": 3, "grace_period": 1})
        self.assertEqual(cfg["trainable"]["argv"][1], os.path.join(self.tmp, "train.py"))
        self.assertTrue(os.path.isfile("ctune-results/tn.db"))

    def test_every_trial_failing_still_gives_a_grid(self):
        with ctune.run("train.py", {"fail": True, "x": ctune.grid_search([1, 2])},
                       metric="loss", mode="min", cpus=2) as grid:  # named after the script
            self.assertEqual((grid.num_errors, len(grid)), (2, 2))
            self.assertIn("RuntimeError: broken on purpose", grid.errors[0])  # the traceback
            self.assertEqual(grid.experiment["name"], "train")

    def test_ctrl_c_then_resume(self):
        marker = os.path.join(self.tmp, "started")
        space = {"x": 1, "marker": marker, "pause": 0.3}
        t = ctune_procs.interrupt_when(marker)
        with self.assertRaises(KeyboardInterrupt):
            ctune.run("train.py", space, name="cc", metric="loss", mode="min", cpus=1)
        t.join(5)
        with ctune.open("ctune-results/cc.db") as grid:
            self.assertEqual(grid.experiment["status"], "RUNNING")
            first = grid.experiment_id
        with ctune.run("train.py", space, name="cc", metric="loss", mode="min", cpus=1,
                       resume=True) as grid:
            self.assertEqual(grid.experiment["status"], "TERMINATED")
            self.assertEqual((grid.experiment_id, len(grid)), (first, 1))  # not resubmitted
            self.assertEqual(grid[0].metrics["training_iteration"], 3)


    def test_ctune_server_set_submits_there(self):
        c = ctune_procs.Cluster().start_server()
        self.addCleanup(c.close)
        c.start_worker("w1", cpus=2)
        env = {"CTUNE_SERVER": c.url, "CTUNE_TOKEN": "wrong"}
        self.addCleanup(lambda: [os.environ.pop(k, None) for k in env])
        os.environ.update(env)
        space = {"x": ctune.grid_search([2, 1])}
        with self.assertRaises(ctune.CtuneError) as cm:  # the token variable is used
            ctune.run("train.py", space, name="rm", metric="loss", mode="min")
        self.assertEqual(cm.exception.status, 401)
        os.environ["CTUNE_TOKEN"] = c.tokens["admin"]
        with self.assertRaises(ValueError):  # the server's workers run it, not a local one
            ctune.run("train.py", space, name="rm", metric="loss", mode="min", cpus=2)
        with ctune.Tuner("train.py", param_space=space,
                         tune_config=ctune.TuneConfig(metric="loss", mode="min"),
                         run_config=ctune.RunConfig(name="rm")).fit() as grid:
            self.assertEqual(grid.experiment["status"], "TERMINATED")  # followed to the end
            self.assertEqual(grid.num_terminated, 2)
            self.assertEqual(grid.get_best_result().config["x"], 1)
            self.assertEqual(grid.client.url, c.url)
        self.assertFalse(os.path.exists("ctune-results/rm.db"))  # no embedded server
        self.assertEqual([e["name"] for e in ctune.Client().experiments()], ["rm"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
