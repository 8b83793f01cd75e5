"""ctune.Client and the trainable helpers against a REAL ctune-server and
ctune-worker (binaries from CTUNE_BIN_DIR; label e2e): tokens, errors as
CtuneError with the server's status/code/message/path, submit, experiments,
trials, results numbered by ctune.report, best with scopes (and with an
outcome constraint: feasible only, as pareto), logs, checkpoint
download, cancel, names for ids, and a resume on another worker that goes on
counting training_iteration and time_total_s."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ctune  # noqa: E402
import ctune_procs  # noqa: E402

TRAINABLE = r'''
import os, sys, time
import ctune
cfg = ctune.get_config({"iters": 3, "pause": 0.05})
state = ctune.load_checkpoint() or {"it": 0}
print("start: config", cfg, "state", state, "resumed", ctune.is_resumed(), flush=True)
ctune.on_stop()  # SIGTERM: exit 0; each iteration's checkpoint is saved already
while state["it"] < cfg["iters"]:
    time.sleep(cfg["pause"])
    it = state["it"] + 1
    loss = cfg["lr"] / it
    ctune.report(loss=loss, score=-loss, nan_metric=float("nan"), checkpoint={"it": it})
    state = {"it": it}
print("done at", state["it"], flush=True)
'''


def base_config(name, script, **over):
    cfg = {"name": name, "metric": "loss", "mode": "min", "num_samples": 1,
           "param_space": {"lr": {"grid_search": [0.1, 0.2, 0.4]}, "iters": 3, "pause": 0.05},
           "scheduler": {"type": "fifo"}, "resources_per_trial": {"cpu": 1},
           "trainable": ctune_procs.command_trainable(script)}
    cfg.update(over)
    return cfg


class ClientE2E(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = ctune_procs.Cluster().start_server()
        cls.script = os.path.join(cls.c.tmp, "trainable.py")
        with open(cls.script, "w") as f:
            f.write(TRAINABLE)
        cls.client = ctune.Client(cls.c.url, token=cls.c.tokens["admin"])

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def setUp(self):
        self.env = mock.patch.dict(os.environ, clear=False)
        self.env.start()
        self.addCleanup(self.env.stop)
        for k in ("CTUNE_SERVER", "CTUNE_TOKEN", "CTUNE_CA_FILE"):
            os.environ.pop(k, None)

    def run_experiment(self, name, worker_name, **over):
        eid = self.client.submit(base_config(name, self.script, **over))
        w = self.c.start_worker(worker_name)
        try:
            exp = self.client.wait(eid, timeout=60, poll_s=0.2)
        finally:
            self.c.stop(w)
        return eid, exp

    def test_auth_and_error_shape(self):
        anon = ctune.Client(self.c.url)
        with self.assertRaises(ctune.CtuneError) as cm:
            anon.experiments()
        e = cm.exception
        self.assertEqual((e.status, e.code), (401, "unauthorized"))
        self.assertIn("CTUNE_TOKEN", e.message)
        with self.assertRaises(ctune.CtuneError) as cm:
            ctune.Client(self.c.url, token="x" * 32).experiments()
        self.assertEqual(cm.exception.status, 401)
        viewer = ctune.Client(self.c.url, token=self.c.tokens["viewer"])
        self.assertIsInstance(viewer.experiments(), list)
        with self.assertRaises(ctune.CtuneError) as cm:
            viewer.submit(base_config("v", self.script))
        self.assertEqual((cm.exception.status, cm.exception.code), (403, "forbidden"))
        with self.assertRaises(ctune.CtuneError) as cm:
            self.client.experiment(999999)
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))
        self.assertEqual(cm.exception.path, "/api/v1/experiments/999999")
        bad = base_config("bad", self.script)
        bad["param_space"]["lr"] = {"type": "loguniform", "lower": 1, "upper": 0.1}
        with self.assertRaises(ctune.CtuneError) as cm:
            self.client.submit(bad)
        self.assertEqual(cm.exception.status, 400)
        self.assertTrue(cm.exception.code)
        self.assertTrue(cm.exception.path.startswith("param_space"), cm.exception.path)
        with self.assertRaises(ctune.CtuneError) as cm:
            ctune.Client("http://127.0.0.1:9", token="t" * 20).experiments()
        self.assertEqual((cm.exception.status, cm.exception.code), (None, "unreachable"))

    def test_tokens_from_the_environment_and_the_local_file(self):
        os.environ["CTUNE_SERVER"] = self.c.url
        os.environ["CTUNE_TOKEN"] = self.c.tokens["admin"]
        self.assertEqual(ctune.Client().url, self.c.url)
        self.assertIsInstance(ctune.Client().experiments(), list)
        del os.environ["CTUNE_TOKEN"]
        self.assertIsInstance(ctune.Client(token_file=self.c.db + ".tokens").experiments(), list)
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "ctune.db.tokens"), "w") as f:
                f.write(f"# server tokens\nworker={self.c.tokens['worker']}\n"
                        f"admin={self.c.tokens['admin']}\n")
            old = os.getcwd()
            os.chdir(d)
            try:
                self.assertIsInstance(ctune.Client().experiments(), list)
            finally:
                os.chdir(old)
        # ctune.db here a symlink: the token file is beside the real database.
        with tempfile.TemporaryDirectory() as d:
            os.symlink(self.c.db, os.path.join(d, "ctune.db"))
            old = os.getcwd()
            os.chdir(d)
            try:
                self.assertIsInstance(ctune.Client().experiments(), list)
            finally:
                os.chdir(old)
        with self.assertRaises(ctune.CtuneError) as cm:
            ctune.Client("ftp://x")
        self.assertEqual(cm.exception.code, "bad_url")

    def test_sample_validates_without_storing(self):
        before = len(self.client.experiments())
        trials = self.client.sample(base_config("sample", self.script))
        self.assertEqual(len(trials), 3)
        self.assertEqual(len(self.client.experiments()), before)
        path = os.path.join(self.c.tmp, "sample.json")
        with open(path, "w") as f:
            f.write("{\n  \"name\": ,\n}")
        with self.assertRaises(ctune.CtuneError) as cm:
            self.client.submit(path)
        self.assertEqual(cm.exception.code, "bad_config")
        self.assertIn("sample.json:2:", cm.exception.message)

    def test_pareto_front(self):
        # loss = lr/it and score = -loss, both minimised: a trade-off where
        # every trial is on the front; best() needs one of them named.
        eid, exp = self.run_experiment("py-pareto", "w-pareto", metric=["loss", "score"],
                                       mode=["min", "min"])
        self.assertEqual(exp["status"], "TERMINATED", exp)
        front = self.client.pareto(eid)
        self.assertEqual(front["metrics"], ["loss", "score"])
        got = {t["config"]["lr"]: t["values"] for t in front["trials"]}
        self.assertEqual(sorted(got), [0.1, 0.2, 0.4], front)
        self.assertAlmostEqual(got[0.4]["score"], -0.4 / 3)
        self.assertEqual(self.client.pareto("py-pareto", scope="all")["scope"], "all")
        with self.assertRaises(ctune.CtuneError) as cm:
            self.client.best(eid)
        self.assertEqual((cm.exception.status, cm.exception.path), (400, "metric"))
        self.assertIn("/pareto", cm.exception.message)
        by_score = self.client.best(eid, metric="score")  # its own mode, min
        self.assertEqual(by_score["trial"]["config"]["lr"], 0.4)
        with self.assertRaises(ctune.CtuneError):
            self.client.pareto(eid, scope="median")

    def test_pareto_and_best_with_a_constraint(self):
        # score = -lr/3 at the end must stay >= -0.1: lr 0.4 (-0.133) is
        # infeasible, so it is off the front and never the best by score.
        eid, exp = self.run_experiment("py-con", "w-con", metric=["loss", "score"],
                                       mode=["min", "min"],
                                       constraints=[{"metric": "score", "op": ">=", "value": -0.1}])
        self.assertEqual(exp["status"], "TERMINATED", exp)
        front = self.client.pareto(eid)
        self.assertEqual(sorted(t["config"]["lr"] for t in front["trials"]), [0.1, 0.2], front)
        self.assertTrue(all(t["feasible"] for t in front["trials"]), front)
        self.assertEqual(front["infeasible"], 1, front)
        best = self.client.best(eid, metric="score")
        self.assertEqual(best["trial"]["config"]["lr"], 0.2, best)
        self.assertIs(best["feasible"], True)
        by_lr = {t["config"]["lr"]: t for t in self.client.trials(eid)}
        self.assertIs(by_lr[0.4]["feasible"], False)
        self.assertAlmostEqual(by_lr[0.4]["violation"], 0.4 / 3 - 0.1)

    def test_experiment_end_to_end(self):
        eid, exp = self.run_experiment("py-e2e", "w-e2e")
        self.assertEqual(exp["status"], "TERMINATED", exp)
        self.assertEqual(exp["counts"]["TERMINATED"], 3, exp)
        self.assertEqual(self.client.experiment("py-e2e")["id"], eid)
        self.assertIn(eid, [e["id"] for e in self.client.experiments()])
        trials = self.client.trials(eid)
        self.assertEqual([t["status"] for t in trials], ["TERMINATED"] * 3)
        for t in trials:
            res = self.client.results(t["name"])  # a name works where an id does
            self.assertEqual([r["training_iteration"] for r in res], [1, 2, 3], res)
            totals = [r["time_total_s"] for r in res]
            self.assertEqual(totals, sorted(totals))
            self.assertTrue(all(r["time_this_iter_s"] >= 0.04 for r in res), res)
            self.assertTrue(all(r["nan_metric"] is None for r in res), res)
            self.assertAlmostEqual(res[-1]["loss"], t["config"]["lr"] / 3)
        best = self.client.best(eid)
        self.assertEqual(best["trial"]["config"]["lr"], 0.1)
        self.assertAlmostEqual(best["value"], 0.1 / 3)
        avg = self.client.best("py-e2e", scope="avg")
        self.assertEqual(avg["scope"], "avg")
        self.assertAlmostEqual(avg["value"], 0.1 * (1 + 1 / 2 + 1 / 3) / 3)
        by_score = self.client.best(eid, metric="score", mode="max")
        self.assertEqual(by_score["trial_id"], best["trial_id"])
        with self.assertRaises(ctune.CtuneError) as cm:
            self.client.best(eid, metric="score")  # the experiment's mode would be wrong
        self.assertEqual(cm.exception.code, "mode_required")
        with self.assertRaises(ctune.CtuneError):
            self.client.best(eid, scope="median")
        log = self.client.logs(trials[0]["id"])
        self.assertIn("start: config", log)
        self.assertIn("done at 3", log)
        got = self.client.download_checkpoint(trials[0]["name"], self.c.tmp)
        self.assertEqual(got["iteration"], 3)
        self.assertEqual(ctune.load_checkpoint(file=got["path"]), {"it": 3})
        rows = self.client.experiment_results(eid)
        self.assertEqual(len(rows), 9)
        self.assertEqual(sorted({r["trial_id"] for r in rows}), [t["id"] for t in trials])
        self.check_dataframe(eid, trials)

    def check_dataframe(self, eid, trials):
        with mock.patch.dict(sys.modules, {"pandas": None}):
            with self.assertRaisesRegex(ImportError, "needs pandas.*pip install pandas"):
                self.client.to_dataframe(eid)
        fake = types.ModuleType("pandas")

        class DataFrame:
            @classmethod
            def from_records(cls, rows):
                df = cls()
                df.rows = rows
                return df
        fake.DataFrame = DataFrame
        with mock.patch.dict(sys.modules, {"pandas": fake}):
            df = self.client.to_dataframe(eid)
            self.assertEqual([r["name"] for r in df.rows], [t["name"] for t in trials])
            self.assertEqual(df.rows[0]["config/lr"], 0.1)
            self.assertEqual(df.rows[0]["training_iteration"], 3)
            # why a trial failed, beside its error (null: these never did)
            self.assertEqual([r["attribution"] for r in df.rows],
                             [t["attribution"] for t in trials])
            df = self.client.to_dataframe(eid, kind="results")
            self.assertEqual(len(df.rows), 9)
            self.assertEqual(df.rows[0]["trial_name"], trials[0]["name"])

    def test_cancel(self):
        cfg = base_config("py-cancel", self.script)
        cfg["param_space"]["iters"] = 1000
        cfg["param_space"]["pause"] = 0.2
        eid = self.client.submit(cfg)
        w = self.c.start_worker("w-cancel")
        try:
            deadline = time.time() + 30
            while time.time() < deadline and not any(
                    t["iteration"] for t in self.client.trials(eid)):
                time.sleep(0.2)
            exp = self.client.cancel("py-cancel")
            self.assertEqual(exp["status"], "CANCELLED")
            self.assertEqual(self.client.wait(eid, timeout=5)["status"], "CANCELLED")
        finally:
            self.c.stop(w)
        with self.assertRaises(ctune.CtuneError) as cm:
            self.client.trial("py-cancel_99999")
        self.assertEqual(cm.exception.status, 404)

    def test_resume_on_another_worker_continues_counting(self):
        cfg = base_config("py-resume", self.script)
        cfg["param_space"] = {"lr": 0.5, "iters": 8, "pause": 0.3}
        eid = self.client.submit(cfg)
        w1 = self.c.start_worker("w-resume-1")
        try:
            deadline = time.time() + 30
            while time.time() < deadline:
                ts = self.client.trials(eid)  # trials are made at lease time
                t = ts[0] if ts else {}
                if (t.get("iteration") or 0) >= 2:
                    break
                time.sleep(0.1)
            self.assertGreaterEqual(t["iteration"] or 0, 2, self.c.log("w-resume-1.log"))
        finally:
            # A draining worker SIGTERMs the trial: on_stop saves, exit 0,
            # the worker uploads the checkpoint and releases the trial.
            self.assertEqual(self.c.stop(w1), 0)
        w2 = self.c.start_worker("w-resume-2")
        try:
            exp = self.client.wait(eid, timeout=60, poll_s=0.2)
        finally:
            self.c.stop(w2)
        self.assertEqual(exp["status"], "TERMINATED", self.c.log("w-resume-2.log"))
        tid = self.client.trials(eid)[0]["id"]
        res = self.client.results(tid)
        self.assertEqual([r["training_iteration"] for r in res], list(range(1, 9)), res)
        totals = [r["time_total_s"] for r in res]
        self.assertEqual(totals, sorted(totals), totals)
        self.assertGreater(totals[-1], 8 * 0.3 * 0.9)
        log = self.client.logs(tid)
        self.assertIn("resumed True", log)


def openssl(d, *args):
    r = subprocess.run(["openssl", *args], cwd=d, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (args, r.stderr)


@unittest.skipUnless(shutil.which("openssl"), "openssl is not installed")
class ClientTLS(unittest.TestCase):
    """An https:// server: ca_file (or CTUNE_CA_FILE) verifies it; without
    the CA the client refuses it (code "tls"), never skipping the check."""

    @classmethod
    def setUpClass(cls):
        cls.c = ctune_procs.Cluster("ctune-py-tls-")
        d = cls.c.tmp
        openssl(d, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                "/CN=ctune py test CA", "-keyout", "ca.key", "-out", "ca.pem", "-addext",
                "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
        openssl(d, "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout",
                "server.key", "-out", "server.csr")
        with open(os.path.join(d, "ext.cnf"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                    "extendedKeyUsage=serverAuth\n")
        openssl(d, "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-out", "server.pem", "-extfile", "ext.cnf")
        os.chmod(os.path.join(d, "server.key"), 0o600)
        cls.c.start_server(["--tls-cert", os.path.join(d, "server.pem"),
                            "--tls-key", os.path.join(d, "server.key")])

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def test_ca_file_verifies_the_server(self):
        self.assertTrue(self.c.url.startswith("https://"), self.c.url)
        ca = os.path.join(self.c.tmp, "ca.pem")
        tok = self.c.tokens["admin"]
        self.assertIsInstance(ctune.Client(self.c.url, token=tok, ca_file=ca).experiments(), list)
        with mock.patch.dict(os.environ, {"CTUNE_CA_FILE": ca}):
            self.assertIsInstance(ctune.Client(self.c.url, token=tok).experiments(), list)
        with mock.patch.dict(os.environ, {"CTUNE_CA_FILE": ""}):
            with self.assertRaises(ctune.CtuneError) as cm:
                ctune.Client(self.c.url, token=tok).experiments()
        self.assertEqual(cm.exception.code, "tls")
        self.assertIn("ca_file", cm.exception.message)


if __name__ == "__main__":
    ctune_procs.need_bins("ctune-server", "ctune-worker")
    unittest.main()
