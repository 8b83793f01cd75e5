"""ctune.open(db): a finished database read back through a private
read-only ctune-server (binaries from CTUNE_BIN_DIR) that the ResultGrid
stops when closed and that leaves the writer's login URL as it was; a
database another server holds is read through it, or, without its login
URL, by a read-only server beside it; a missing file is refused without
starting anything."""
import os
import socket
import sys
import unittest
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
PY = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")
sys.path.insert(0, PY)
sys.path.insert(0, os.path.join(PY, "tests"))

import ctune  # noqa: E402
import ctune_procs  # noqa: E402

TRAINABLE = r'''
import ctune
cfg = ctune.get_config()
for it in range(1, 3):
    ctune.report(loss=cfg["x"] / it, checkpoint={"x": cfg["x"], "it": it})
'''


def port_open(url):
    u = urllib.parse.urlsplit(url)
    try:
        socket.create_connection((u.hostname, u.port), timeout=2).close()
        return True
    except OSError:
        return False


class OpenE2E(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c, tr = ctune_procs.script_cluster(TRAINABLE, "ctune")
        client = ctune.Client(cls.c.url, token=cls.c.tokens["admin"])
        cls.first = client.submit(ctune.experiment(
            tr, {"x": ctune.grid_search([3, 1, 2])}, name="first", metric="loss", mode="min"))
        cls.second = client.submit(ctune.experiment(
            tr, {"x": ctune.grid_search([5, 4])}, name="second", metric="loss", mode="max"))
        ctune_procs.run_to_end(cls.c, client, (cls.first, cls.second))
        cls.before = {e: [(t["name"], t["last_result"]["loss"]) for t in client.trials(e)]
                      for e in (cls.first, cls.second)}

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def test_a_database_another_server_holds_is_read_through_it(self):
        with ctune.open(self.c.db) as grid:  # through the login URL it wrote
            self.assertEqual(grid.client.url, self.c.url)
            self.assertEqual(grid.experiment_id, self.second)
            self.assertEqual([(r.trial_name, r.metrics["loss"]) for r in grid],
                             self.before[self.second])
        self.assertIsNone(self.c.server.poll())  # closing left that server running
        login = os.path.realpath(self.c.db) + ".login-url"
        os.rename(login, login + ".away")
        try:  # no login URL: a read-only server beside the writer
            with ctune.open(self.c.db) as grid:
                self.assertNotEqual(grid.client.url, self.c.url)
                self.assertEqual([(r.trial_name, r.metrics["loss"]) for r in grid],
                                 self.before[self.second])
            self.assertFalse(os.path.exists(login))  # it wrote none
        finally:
            os.rename(login + ".away", login)
        self.assertIsNone(self.c.server.poll())
        with self.assertRaises(ctune.CtuneError) as cm:
            ctune.open(os.path.join(self.c.tmp, "nope.db"))
        self.assertEqual(cm.exception.code, "not_found")
        self.assertFalse(os.path.exists(os.path.join(self.c.tmp, "nope.db")))

    def test_z_read_back_after_the_server_is_gone(self):
        self.c.stop(self.c.server)  # named _z_: runs last, the server is gone
        login = os.path.realpath(self.c.db) + ".login-url"
        with open(login, "rb") as f:
            login_text = f.read()
        with ctune.open(self.c.db) as grid:  # the newest experiment
            url = grid.client.url
            self.assertTrue(port_open(url))
            self.assertEqual(grid.experiment_id, self.second)
            self.assertEqual([(r.trial_name, r.metrics["loss"]) for r in grid],
                             self.before[self.second])
            self.assertEqual(grid.get_best_result().config["x"], 5)
            proc = grid.server.proc
        self.assertIsNotNone(proc.poll())  # closed: the private server stopped
        self.assertFalse(port_open(url))
        grid = ctune.open(self.c.db, "first")
        try:
            best = grid.get_best_result()
            self.assertEqual((best.config["x"], best.metrics["loss"]), (1, 0.5))
            self.assertEqual(ctune.load_checkpoint(file=best.checkpoint), {"x": 1, "it": 2})
            self.assertEqual(grid.num_terminated, 3)
        finally:
            grid.close()
        self.assertIsNotNone(grid.server.proc.poll())
        with open(login, "rb") as f:  # read-only: the writer's login URL kept
            self.assertEqual(f.read(), login_text)


if __name__ == "__main__":
    unittest.main(verbosity=2)
