"""Unit tests of the trainable helpers: report(), config, resume, checkpoints,
SIGTERM. Pure Python (label python): no ctune binary runs. Each case that
needs a process of its own (stdout, signals, the start time) runs a small
script in a child; the rest call the package in-process with a clean
environment. Run: PYTHONPATH=python python3 -m unittest discover python/tests"""
import io
import json
import math
import os
import pickle
import select
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
sys.path.insert(0, PKG)

import ctune  # noqa: E402
from ctune import _trial  # noqa: E402

CTUNE_VARS = [k for k in os.environ if k.startswith("CTUNE_")]

try:
    import numpy
except ImportError:
    numpy = None
try:
    import torch
except ImportError:
    torch = None


def clean_env(**kw):
    # No PYTHONUNBUFFERED: report() must flush by itself.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CTUNE_") and k != "PYTHONUNBUFFERED"}
    env.update({k: str(v) for k, v in kw.items()})
    return env


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ctune-pytest-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.out = io.StringIO()
        self.env = mock.patch.dict(os.environ, clear=True, values=clean_env())
        self.env.start()
        self.addCleanup(self.env.stop)
        _trial._reset(self.out)
        self.addCleanup(_trial._reset, None)

    def lines(self):
        return [json.loads(l) for l in self.out.getvalue().splitlines()]

    def child(self, code, env, timeout=30, **kw):
        env = dict(env)
        env["PYTHONPATH"] = PKG
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=timeout, **kw)


class TestReport(Base):
    def test_numbers_iterations_and_adds_time_fields(self):
        a = ctune.report(loss=0.5)
        time.sleep(0.05)
        b = ctune.report({"loss": 0.4}, mean_accuracy=0.9)
        self.assertEqual(self.lines(), [a, b])
        self.assertEqual((a["training_iteration"], b["training_iteration"]), (1, 2))
        self.assertEqual(b["mean_accuracy"], 0.9)
        self.assertGreaterEqual(b["time_this_iter_s"], 0.05)
        self.assertAlmostEqual(b["time_total_s"] - a["time_total_s"], b["time_this_iter_s"],
                               places=6)
        self.assertIsInstance(b["timestamp"], int)
        self.assertLessEqual(abs(b["timestamp"] - time.time()), 2)

    def test_keeps_what_the_script_reports_itself(self):
        ctune.report(training_iteration=10, time_total_s=99.0, time_this_iter_s=1.5, x=1)
        r = ctune.report(x=2)
        first = self.lines()[0]
        self.assertEqual((first["time_total_s"], first["time_this_iter_s"]), (99.0, 1.5))
        self.assertEqual(r["training_iteration"], 11)

    def test_nan_and_infinity_become_null(self):
        ctune.report(loss=float("nan"), up=float("inf"), down=-math.inf, ok=1.25)
        raw = self.out.getvalue()
        self.assertNotIn("NaN", raw)
        self.assertNotIn("Infinity", raw)
        r = self.lines()[0]
        self.assertEqual((r["loss"], r["up"], r["down"], r["ok"]), (None, None, None, 1.25))

    def test_nested_dicts_flatten_and_bools_stay(self):
        r = ctune.report(val={"loss": 1, "acc": {"top1": 0.5}}, done=True)
        self.assertEqual((r["val/loss"], r["val/acc/top1"], r["done"]), (1, 0.5, True))

    def test_refuses_strings_naming_the_key(self):
        with self.assertRaisesRegex(TypeError, "'name'.*only numbers"):
            ctune.report(name="resnet")
        with self.assertRaises(TypeError):
            ctune.report([1, 2])
        self.assertEqual(self.out.getvalue(), "")

    @unittest.skipIf(numpy is None, "numpy is not installed")
    def test_numpy_scalars_and_0d_arrays(self):
        r = ctune.report(a=numpy.float32(0.5), b=numpy.int64(7), c=numpy.array(2.5),
                         d=numpy.bool_(False), e=numpy.float64("nan"), f=numpy.array([3]))
        self.assertEqual(r["a"], 0.5)
        self.assertEqual((r["b"], r["c"], r["d"], r["e"], r["f"]), (7, 2.5, False, None, 3))
        self.assertIs(type(r["b"]), int)
        with self.assertRaisesRegex(TypeError, "more than one value"):
            ctune.report(v=numpy.array([1.0, 2.0]))

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_torch_scalars(self):
        w = torch.tensor(2.0, requires_grad=True)
        r = ctune.report(loss=w * 3, acc=torch.tensor([0.25]), n=torch.tensor(4),
                         bad=torch.tensor(float("inf")))
        self.assertEqual((r["loss"], r["acc"], r["n"], r["bad"]), (6.0, 0.25, 4, None))
        with self.assertRaisesRegex(TypeError, "more than one value"):
            ctune.report(v=torch.ones(3))

    def test_continues_from_the_workers_start_point(self):
        os.environ.update(CTUNE_START_ITERATION="4", CTUNE_START_TIME_TOTAL_S="100.5",
                          CTUNE_RESUME="1", CTUNE_CHECKPOINT_DIR=self.tmp)
        r = ctune.report(loss=1)
        self.assertEqual(r["training_iteration"], 5)
        self.assertGreaterEqual(r["time_total_s"], 100.5)
        self.assertLess(r["time_total_s"], 100.5 + 60)

    def test_continues_from_the_checkpoint_manifest_without_start_vars(self):
        os.environ.update(CTUNE_CHECKPOINT_DIR=self.tmp, CTUNE_RESUME="0")
        ctune.report(loss=1, time_total_s=40.0)
        ctune.report(loss=1, time_total_s=50.0)
        ctune.save_checkpoint({"w": 1})
        _trial._reset(self.out)
        os.environ["CTUNE_RESUME"] = "1"  # an older worker: no CTUNE_START_*
        r = ctune.report(loss=2)
        self.assertEqual(r["training_iteration"], 3)
        self.assertGreaterEqual(r["time_total_s"], 50.0)

    def test_fresh_attempt_starts_at_one(self):
        os.environ.update(CTUNE_CHECKPOINT_DIR=self.tmp, CTUNE_RESUME="0")
        ctune.save_checkpoint({"w": 1}, iteration=7)
        self.assertFalse(ctune.is_resumed())
        self.assertIsNone(ctune.load_checkpoint())
        self.assertEqual(ctune.report(x=1)["training_iteration"], 1)

    def test_warns_once_about_a_missing_metric(self):
        env = clean_env(CTUNE_METRIC="loss", CTUNE_TRIAL_ID="3")
        r = self.child("import ctune\nctune.report(accuracy=1)\nctune.report(accuracy=2)\n", env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr.count("has no metric 'loss'"), 1, r.stderr)
        self.assertIn("accuracy, time_this_iter_s", r.stderr)

    def test_warns_about_each_of_several_metrics(self):
        env = clean_env(CTUNE_METRIC="loss", CTUNE_METRICS="loss,lat", CTUNE_TRIAL_ID="3")
        r = self.child("import ctune\nctune.report(loss=1)\nctune.report(loss=2, lat=1)\n", env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr.count(
            "has no metric 'lat' (one of the experiment's metrics loss, lat)"), 1, r.stderr)
        r = self.child("import ctune\nctune.report(loss=1, lat=2)\n", env)
        self.assertNotIn("has no metric", r.stderr)

    def test_warns_about_a_constrained_metric(self):
        env = clean_env(CTUNE_METRIC="loss", CTUNE_CONSTRAINT_METRICS="mem", CTUNE_TRIAL_ID="3")
        r = self.child("import ctune\nctune.report(loss=1)\n", env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("has no metric 'mem' (one of the experiment's metrics loss, mem)", r.stderr)
        r = self.child("import ctune\nctune.report(loss=1, mem=2)\n", env)
        self.assertNotIn("has no metric", r.stderr)

    def test_each_result_is_flushed_at_once(self):
        # stdout is a pipe here, block-buffered: the line must arrive while
        # the script still runs, not at its exit.
        code = ("import ctune, sys, time\nctune.report(loss=1)\n"
                "sys.stdin.readline()\nctune.report(loss=2)\n")
        p = subprocess.Popen([sys.executable, "-c", code], env=dict(clean_env(), PYTHONPATH=PKG),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            # Without a flush the line would come only at exit: it never
            # does here, as the child waits for us.
            ready, _, _ = select.select([p.stdout], [], [], 15)
            self.assertTrue(ready, "report() did not flush its line")
            line = p.stdout.readline()
            self.assertEqual(json.loads(line)["loss"], 1)
            p.stdin.write("\n")
            p.stdin.flush()
            self.assertEqual(json.loads(p.stdout.readline())["training_iteration"], 2)
        finally:
            p.stdin.close()
            p.wait(10)
            p.stdout.close()

    def test_first_time_this_iter_counts_from_process_start(self):
        r = self.child("import time\ntime.sleep(0.4)\nimport ctune\nctune.report(x=1)\n",
                       clean_env())
        res = json.loads(r.stdout.splitlines()[-1])
        self.assertGreaterEqual(res["time_this_iter_s"], 0.35)
        self.assertEqual(res["time_this_iter_s"], res["time_total_s"])


class TestConfigAndContext(Base):
    def test_config_from_the_environment_wins_over_defaults(self):
        os.environ["CTUNE_CONFIG"] = json.dumps({"lr": 0.1, "layers": [1, 2]})
        cfg = ctune.get_config({"lr": 1.0, "epochs": 3})
        self.assertEqual(cfg, {"lr": 0.1, "layers": [1, 2], "epochs": 3})
        cfg["lr"] = 5
        self.assertEqual(ctune.get_config()["lr"], 0.1)

    def test_outside_a_trial_the_defaults(self):
        self.assertEqual(ctune.get_config({"lr": 1.0}), {"lr": 1.0})
        self.assertEqual(ctune.get_config(), {})
        self.assertFalse(ctune.in_trial())
        self.assertFalse(ctune.is_resumed())
        ctx = ctune.get_context()
        self.assertEqual((ctx.trial_id, ctx.start_iteration, ctx.time_attr),
                         (None, 0, "training_iteration"))

    def test_bad_config_is_a_ctune_error(self):
        os.environ["CTUNE_CONFIG"] = "{nope"
        with self.assertRaises(ctune.CtuneError) as cm:
            ctune.get_config()
        self.assertEqual(cm.exception.code, "bad_config")
        os.environ["CTUNE_CONFIG"] = "[1]"
        with self.assertRaises(ctune.CtuneError):
            ctune.get_config()

    def test_context_reads_the_trial_environment(self):
        os.environ.update(CTUNE_TRIAL_ID="7", CTUNE_TRIAL_NAME="exp_00006",
                          CTUNE_EXPERIMENT_ID="2", CTUNE_METRIC="loss", CTUNE_MODE="min",
                          CTUNE_TIME_ATTR="epoch", CTUNE_RESUME="1", CTUNE_START_ITERATION="3",
                          CTUNE_START_TIME_TOTAL_S="12.5", CTUNE_CHECKPOINT_DIR=self.tmp)
        ctx = ctune.get_context()
        self.assertTrue(ctx.in_trial and ctx.resumed)
        self.assertEqual((ctx.trial_id, ctx.trial_name, ctx.experiment_id, ctx.metric, ctx.mode,
                          ctx.time_attr, ctx.start_iteration, ctx.start_time_total_s,
                          ctx.checkpoint_dir),
                         (7, "exp_00006", 2, "loss", "min", "epoch", 3, 12.5, self.tmp))

    def test_bad_start_iteration_is_a_ctune_error(self):
        os.environ["CTUNE_START_ITERATION"] = "x"
        with self.assertRaises(ctune.CtuneError):
            ctune.report(x=1)


class TestMembers(Base):
    """A trial of several member processes (torchrun's variables) and a
    fractional GPU's memory share."""

    def test_context_has_the_members_and_the_gpus(self):
        os.environ.update(WORLD_SIZE="4", RANK="3", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2",
                          NODE_RANK="1", MASTER_ADDR="10.0.0.5", MASTER_PORT="29511",
                          CUDA_VISIBLE_DEVICES="2,3", CTUNE_GPU_MEM_LIMIT_MB="4096")
        ctx = ctune.get_context()
        self.assertEqual((ctx.world_size, ctx.rank, ctx.local_rank, ctx.local_world_size,
                          ctx.node_rank, ctx.master_addr, ctx.master_port, ctx.gpu_ids,
                          ctx.gpu_mem_limit_mb),
                         (4, 3, 1, 2, 1, "10.0.0.5", 29511, [2, 3], 4096))
        self.assertEqual((ctx.get_world_size(), ctx.get_world_rank(), ctx.get_local_rank(),
                          ctx.get_local_world_size(), ctx.get_node_rank()), (4, 3, 1, 2, 1))

    def test_one_process_and_uuids(self):
        os.environ["CUDA_VISIBLE_DEVICES"] = "GPU-8f2a,MIG-1c"
        ctx = ctune.get_context()
        self.assertEqual((ctx.world_size, ctx.rank, ctx.master_addr, ctx.master_port,
                          ctx.gpu_ids, ctx.gpu_mem_limit_mb),
                         (1, 0, None, None, ["GPU-8f2a", "MIG-1c"], None))
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        self.assertEqual(ctune.get_context().gpu_ids, [])

    def test_a_bad_rank_is_a_ctune_error(self):
        os.environ["RANK"] = "one"
        with self.assertRaisesRegex(ctune.CtuneError, "RANK='one' is not a number"):
            ctune.get_context()

    def test_only_rank_0_reports(self):
        os.environ.update(CTUNE_TRIAL_ID="5", CTUNE_CHECKPOINT_DIR=self.tmp, WORLD_SIZE="2",
                          RANK="1")
        err = io.StringIO()
        with mock.patch("sys.stderr", err):
            r = ctune.report(loss=0.5, checkpoint={"w": 1})
            self.assertIsNone(ctune.save_checkpoint({"w": 2}))
        self.assertEqual(self.out.getvalue(), "")  # nothing the worker would take
        self.assertEqual(r["loss"], 0.5)
        self.assertIn('ctune: rank 1 result: {"loss": 0.5', err.getvalue())
        self.assertEqual(os.listdir(self.tmp), [])  # no checkpoint saved
        os.environ["RANK"] = "0"
        ctune.report(loss=0.25, checkpoint={"w": 3})
        first = self.lines()[0]
        self.assertEqual((first["loss"], first["training_iteration"]), (0.25, 2))
        self.assertIn("_checkpoint", first)

    def test_memory_fraction_of_the_share(self):
        self.assertIsNone(ctune.gpu_memory_fraction(16 << 30))  # a whole GPU: no share
        os.environ["CTUNE_GPU_MEM_LIMIT_MB"] = "4096"
        self.assertEqual(ctune.gpu_memory_fraction(16 << 30), 0.25)
        self.assertEqual(ctune.gpu_memory_fraction(2 << 30), 1.0)
        with self.assertRaises(ctune.CtuneError):
            ctune.gpu_memory_fraction(0)

    def test_torch_memory_fraction_applies_it(self):
        calls = []
        cuda = mock.Mock()
        cuda.is_available.return_value = True
        cuda.current_device.return_value = 1
        cuda.get_device_properties.return_value = mock.Mock(total_memory=8 << 30)
        cuda.set_per_process_memory_fraction.side_effect = lambda f, d: calls.append((f, d))
        fake = mock.Mock(cuda=cuda)
        with mock.patch.dict(sys.modules, {"torch": fake}):
            self.assertIsNone(ctune.torch_memory_fraction())  # no share: nothing done
            os.environ["CTUNE_GPU_MEM_LIMIT_MB"] = "2048"
            self.assertEqual(ctune.torch_memory_fraction(), 0.25)
            cuda.is_available.return_value = False
            self.assertIsNone(ctune.torch_memory_fraction())
        self.assertEqual(calls, [(0.25, 1)])
        cuda.get_device_properties.assert_called_with(1)


class TestCheckpoint(Base):
    def setUp(self):
        super().setUp()
        self.ck = os.path.join(self.tmp, "trial")
        os.environ.update(CTUNE_CHECKPOINT_DIR=self.ck, CTUNE_RESUME="1")

    def test_directory_round_trip(self):
        src = os.path.join(self.tmp, "state")
        os.makedirs(os.path.join(src, "sub"))
        with open(os.path.join(src, "model.pt"), "wb") as f:
            f.write(b"\x00weights" * 1000)
        with open(os.path.join(src, "sub", "opt.json"), "w") as f:
            f.write("{}")
        os.symlink("/etc/passwd", os.path.join(src, "link"))
        path = ctune.save_checkpoint(src)
        self.assertEqual(path, os.path.join(self.ck, "checkpoint.bin"))
        self.assertEqual(os.listdir(self.ck), ["checkpoint.bin"])  # no temp file left
        got = ctune.load_checkpoint()
        with open(os.path.join(got, "model.pt"), "rb") as f:
            self.assertEqual(f.read(), b"\x00weights" * 1000)
        with open(os.path.join(got, "sub", "opt.json")) as f:
            self.assertEqual(f.read(), "{}")
        self.assertFalse(os.path.lexists(os.path.join(got, "link")))
        into = os.path.join(self.tmp, "into")
        self.assertEqual(ctune.load_checkpoint(into), into)
        self.assertTrue(os.path.isfile(os.path.join(into, "sub", "opt.json")))

    def test_file_bytes_and_object_round_trip(self):
        f = os.path.join(self.tmp, "w.bin")
        with open(f, "wb") as fh:
            fh.write(b"abc")
        ctune.save_checkpoint(f)
        got = ctune.load_checkpoint()
        self.assertEqual(os.path.basename(got), "w.bin")
        with open(got, "rb") as fh:
            self.assertEqual(fh.read(), b"abc")
        ctune.save_checkpoint(b"raw\x00bytes")
        self.assertEqual(ctune.load_checkpoint(), b"raw\x00bytes")
        ctune.save_checkpoint({"epoch": 3, "w": [1.5, 2.5]})
        self.assertEqual(ctune.load_checkpoint(), {"epoch": 3, "w": [1.5, 2.5]})

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_torch_save_into_a_directory(self):
        model = torch.nn.Linear(3, 2)
        with tempfile.TemporaryDirectory() as d:
            torch.save({"model": model.state_dict(), "epoch": 4}, os.path.join(d, "ckpt.pt"))
            ctune.save_checkpoint(d)
        state = torch.load(os.path.join(ctune.load_checkpoint(), "ckpt.pt"))
        self.assertEqual(state["epoch"], 4)
        self.assertTrue(torch.equal(state["model"]["weight"], model.weight.detach()))

    def test_replaced_by_rename_so_the_worker_sees_one_event(self):
        ctune.save_checkpoint({"a": 1})
        ino = os.stat(os.path.join(self.ck, "checkpoint.bin")).st_ino
        ctune.save_checkpoint({"a": 2})
        st = os.stat(os.path.join(self.ck, "checkpoint.bin"))
        self.assertNotEqual(st.st_ino, ino)  # a new file renamed over, not rewritten
        self.assertEqual(st.st_mode & 0o777, 0o600)

    def test_report_with_checkpoint_saves_after_the_line(self):
        ctune.report(loss=1)
        r = ctune.report(loss=0.5, checkpoint={"w": 2})
        from ctune import _checkpoint
        m = _checkpoint.read_manifest(os.path.join(self.ck, "checkpoint.bin"))
        self.assertEqual(m["training_iteration"], r["training_iteration"])
        self.assertEqual(m["time_total_s"], r["time_total_s"])

    def record_writes(self):
        """Output that notes, as each line is written, which checkpoint.bin
        (and manifest) is in place: what the worker would find then."""
        ck = os.path.join(self.ck, "checkpoint.bin")
        seen = []

        class Out(io.StringIO):
            def write(self, text):
                try:
                    st = os.stat(ck)
                    from ctune import _checkpoint
                    now = (st.st_ino, st.st_size, _checkpoint.read_manifest(ck))
                except FileNotFoundError:
                    now = None
                seen.append((json.loads(text), now))
                return super().write(text)
        _trial._reset(Out())
        return seen

    def test_report_in_a_trial_saves_first_and_names_the_file_in_its_line(self):
        os.environ["CTUNE_TRIAL_ID"] = "3"
        seen = self.record_writes()
        ctune.report(loss=1)
        for i in range(3):
            r = ctune.report(loss=0.5, checkpoint={"w": i})
            self.assertNotIn("_checkpoint", r)  # the caller sees its result only
        self.assertNotIn("_checkpoint", seen[0][0])  # no checkpoint, no key
        for line, now in seen[1:]:
            # When the line is written, the file it names is the one in
            # place, and its manifest says this line's iteration.
            self.assertIsNotNone(now, line)
            self.assertEqual(line["_checkpoint"], {"ino": now[0], "size": now[1]}, line)
            self.assertEqual(now[2]["training_iteration"], line["training_iteration"])
            self.assertEqual(now[2]["time_total_s"], line["time_total_s"])
        self.assertEqual([l["training_iteration"] for l, _ in seen], [1, 2, 3, 4])

    def test_save_checkpoint_in_a_trial_prints_a_line_naming_it(self):
        os.environ["CTUNE_TRIAL_ID"] = "3"
        seen = self.record_writes()
        ctune.report(loss=1)
        ctune.save_checkpoint({"w": 1})
        ctune.save_checkpoint({"w": 0}, iteration=0)
        (_, _), (l1, now1), (l2, now2) = seen
        self.assertEqual(l1, {"_checkpoint": {"ino": now1[0], "size": now1[1],
                                              "training_iteration": 1}})
        self.assertEqual(l2["_checkpoint"]["training_iteration"], 0)
        self.assertEqual(now2[2]["training_iteration"], 0)

    def test_outside_a_trial_no_checkpoint_key_is_printed(self):
        ctune.report(loss=1, checkpoint={"w": 1}, _checkpoint=5)  # reserved: dropped
        ctune.save_checkpoint({"w": 2})
        self.assertEqual(len(self.lines()), 1)
        self.assertNotIn("_checkpoint", self.lines()[0])

    def test_missing_path_and_unpicklable_are_errors(self):
        with self.assertRaises(ctune.CtuneError) as cm:
            ctune.save_checkpoint(os.path.join(self.tmp, "nope"))
        self.assertEqual(cm.exception.code, "bad_checkpoint")
        with self.assertRaises(ctune.CtuneError):
            ctune.save_checkpoint(lambda: 1)
        self.assertFalse(os.path.exists(os.path.join(self.ck, "checkpoint.bin")))

    def test_nothing_to_resume(self):
        self.assertIsNone(ctune.load_checkpoint())  # resumed but no file yet
        os.environ["CTUNE_RESUME"] = "0"
        self.assertIsNone(ctune.load_checkpoint())

    def test_foreign_checkpoint_comes_back_as_bytes(self):
        os.makedirs(self.ck)
        with open(os.path.join(self.ck, "checkpoint.bin"), "wb") as f:
            f.write(b"12\n")  # what examples/command/train.sh writes
        self.assertEqual(ctune.load_checkpoint(), b"12\n")

    def test_hostile_archive_is_refused(self):
        os.makedirs(self.ck)
        path = os.path.join(self.ck, "checkpoint.bin")
        with tarfile.open(path, "w") as tar:
            def add(name, data=b"", **kw):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                for k, v in kw.items():
                    setattr(info, k, v)
                tar.addfile(info, io.BytesIO(data))
            add("ctune-checkpoint.json", json.dumps({"format": 1, "kind": "dir"}).encode())
            add("data/../../escaped", b"x")
        with self.assertRaises(ctune.CtuneError):
            ctune.load_checkpoint()
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "escaped")))
        with tarfile.open(path, "w") as tar:
            info = tarfile.TarInfo("ctune-checkpoint.json")
            data = json.dumps({"format": 1, "kind": "dir"}).encode()
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            link = tarfile.TarInfo("data/evil")
            link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(link)
        with self.assertRaises(ctune.CtuneError):
            ctune.load_checkpoint()

    def test_file_checkpoint_returns_a_path_inside_its_folder(self):
        os.makedirs(self.ck)
        path = os.path.join(self.ck, "checkpoint.bin")
        into = os.path.join(self.tmp, "into")
        for name in ("/etc/passwd", "../outside", "..", "", "sub/x", None, "missing"):
            with tarfile.open(path, "w") as tar:
                for n, data in (("ctune-checkpoint.json",
                                 json.dumps({"format": 1, "kind": "file", "name": name}).encode()),
                                ("data/ok.pt", b"w")):
                    info = tarfile.TarInfo(n)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
            with self.assertRaises(ctune.CtuneError, msg=repr(name)) as cm:
                ctune.load_checkpoint(into)
            self.assertEqual(cm.exception.code, "bad_checkpoint")
        src = os.path.join(self.tmp, "ok.pt")
        with open(src, "wb") as f:
            f.write(b"w")
        ctune.save_checkpoint(src)
        got = ctune.load_checkpoint(into)
        self.assertEqual(got, os.path.join(into, "ok.pt"))
        with open(got, "rb") as f:
            self.assertEqual(f.read(), b"w")

    def test_outside_a_trial_a_temporary_folder(self):
        del os.environ["CTUNE_CHECKPOINT_DIR"], os.environ["CTUNE_RESUME"]
        r = self.child("import ctune\nprint(ctune.checkpoint_dir())\n"
                       "ctune.save_checkpoint({'a': 1})\nprint(ctune.is_resumed())\n", clean_env())
        d, resumed = r.stdout.split()
        self.addCleanup(shutil.rmtree, d, True)
        self.assertTrue(d.startswith(tempfile.gettempdir()))
        self.assertEqual(resumed, "False")
        self.assertIn("not in a trial", r.stderr)
        # By hand, a chosen folder with a checkpoint in it resumes.
        env = clean_env(CTUNE_CHECKPOINT_DIR=d)
        r = self.child("import ctune\nprint(ctune.is_resumed(), ctune.load_checkpoint())\n", env)
        self.assertEqual(r.stdout.strip(), "True {'a': 1}")


class TestOnStop(Base):
    SCRIPT = r"""
import os, sys, time, ctune
saved = []
@ctune.on_stop
def save():
    ctune.save_checkpoint({"stopped_at": 3})
    print("saved", flush=True)
try:
    print("ready", flush=True)
    time.sleep(30)
finally:
    print("finally", flush=True)
"""

    def test_sigterm_saves_and_exits_zero(self):
        env = clean_env(CTUNE_CHECKPOINT_DIR=self.tmp, CTUNE_RESUME="0")
        p = subprocess.Popen([sys.executable, "-c", self.SCRIPT], env=dict(env, PYTHONPATH=PKG),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            self.assertEqual(p.stdout.readline().strip(), "ready")
            p.send_signal(signal.SIGTERM)
            out, err = p.communicate(timeout=10)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(out.split(), ["finally", "saved"])  # fn runs on the way out
        os.environ.update(CTUNE_CHECKPOINT_DIR=self.tmp, CTUNE_RESUME="1")
        self.assertEqual(ctune.load_checkpoint(), {"stopped_at": 3})

    def test_sigterm_during_a_save_waits_for_the_checkpoint(self):
        # The worker's stop often lands right after the result that precedes
        # a save: the save must finish (renamed into place), then exit 0.
        code = r"""
import os, signal, sys, ctune
class Slow:
    def __reduce__(self):  # runs inside save_checkpoint, while pickling
        os.kill(os.getpid(), signal.SIGTERM)
        return (dict, ({"epoch": 8},))
ctune.on_stop()
ctune.report(loss=1)
ctune.report(loss=0.5, checkpoint=Slow())
print("not reached", flush=True)
"""
        env = clean_env(CTUNE_CHECKPOINT_DIR=self.tmp, CTUNE_RESUME="0")
        r = self.child(code, env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("not reached", r.stdout)
        self.assertEqual(len(r.stdout.splitlines()), 2)
        os.environ.update(CTUNE_CHECKPOINT_DIR=self.tmp, CTUNE_RESUME="1")
        self.assertEqual(ctune.load_checkpoint(), {"epoch": 8})
        self.assertEqual(ctune.get_context().start_iteration, 2)

    def test_a_failing_save_is_not_a_clean_stop(self):
        code = ("import os, signal, ctune\n@ctune.on_stop\ndef save():\n    raise OSError('disk full')\n"
                "os.kill(os.getpid(), signal.SIGTERM)\n")
        r = self.child(code, clean_env())
        self.assertEqual(r.returncode, 1)
        self.assertIn("disk full", r.stderr)

    def test_flag_only(self):
        code = ("import os, signal, ctune\nctune.on_stop(exit=False)\n"
                "os.kill(os.getpid(), signal.SIGTERM)\nprint(ctune.stop_requested())\n")
        r = self.child(code, clean_env())
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "True"), r.stderr)

    def test_without_on_stop_sigterm_is_untouched(self):
        code = "import os, signal, time, ctune\nos.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(5)\n"
        r = self.child(code, clean_env())
        self.assertEqual(r.returncode, -signal.SIGTERM)


class TestCheckpointRequest(Base):
    """A preemption notice's checkpoint request (docs/worker.md#preemption):
    SIGUSR1, or CHECKPOINT_NOW in the checkpoint dir, makes the next report
    save on_checkpoint_request's state with its line, once."""
    SCRIPT = r"""
import sys, ctune
state = {"i": 0}
ctune.on_checkpoint_request(lambda: dict(state))
for line in sys.stdin:
    state["i"] += 1
    ctune.report(loss=1.0 / state["i"])
"""

    def test_sigusr1_and_the_file_each_save_at_the_next_report(self):
        ck = os.path.join(self.tmp, "ck")
        os.mkdir(ck)
        p = subprocess.Popen([sys.executable, "-c", self.SCRIPT],
                             env=dict(clean_env(CTUNE_TRIAL_ID=1, CTUNE_CHECKPOINT_DIR=ck),
                                      PYTHONPATH=PKG),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.addCleanup(p.stdout.close)
        self.addCleanup(p.wait)
        self.addCleanup(p.kill)

        def step():
            p.stdin.write("x\n")
            p.stdin.flush()
            return json.loads(p.stdout.readline())
        self.assertNotIn("_checkpoint", step())
        os.kill(p.pid, signal.SIGUSR1)
        r = step()
        self.assertIn("_checkpoint", r)
        self.assertEqual(r["training_iteration"], 2)
        self.assertNotIn("_checkpoint", step())  # answered: once
        request = os.path.join(ck, "CHECKPOINT_NOW")
        open(request, "w").close()
        r = step()
        self.assertIn("_checkpoint", r)
        self.assertEqual(r["training_iteration"], 4)
        self.assertFalse(os.path.exists(request))  # the save answers it
        self.assertNotIn("_checkpoint", step())
        from ctune import _checkpoint
        m = _checkpoint.read_manifest(os.path.join(ck, "checkpoint.bin"))
        self.assertEqual(m["training_iteration"], 4)
        p.stdin.close()
        self.assertEqual(p.wait(10), 0)

    def test_checkpoint_requested_without_a_saver(self):
        os.environ["CTUNE_CHECKPOINT_DIR"] = self.tmp
        self.assertFalse(ctune.checkpoint_requested())
        open(os.path.join(self.tmp, "CHECKPOINT_NOW"), "w").close()
        self.assertTrue(ctune.checkpoint_requested())
        ctune.report(loss=1, checkpoint={"w": 1})
        self.assertFalse(ctune.checkpoint_requested())
        with self.assertRaises(TypeError):
            ctune.on_checkpoint_request(3)


class TestApplyConfig(Base):
    """apply_config: a restored optimizer state carries the lr it was saved
    with (a PBT donor's after an exploit); the config's must win."""

    class FakeOptimizer:
        def __init__(self, **hp):
            self.param_groups = [dict(params=[], **hp), dict(params=[], **hp)]

    def test_config_values_replace_restored_ones_with_a_warning(self):
        opt = self.FakeOptimizer(lr=0.00531876, momentum=0.9, nesterov=False)
        err = io.StringIO()
        with mock.patch("sys.stderr", err):
            got = ctune.apply_config(opt, {"lr": 0.00638251, "momentum": 0.9, "nesterov": True,
                                           "epochs": 3})
        self.assertEqual(got, {"lr": (0.00531876, 0.00638251)})
        self.assertEqual([g["lr"] for g in opt.param_groups], [0.00638251, 0.00638251])
        self.assertEqual([g["nesterov"] for g in opt.param_groups], [False, False])  # not a number
        self.assertEqual(err.getvalue().count("\n"), 1, err.getvalue())
        self.assertIn("had lr=0.00531876 but the trial's config says lr=0.00638251",
                      err.getvalue())

    def test_nothing_to_say_when_they_agree(self):
        opt = self.FakeOptimizer(lr=0.01)
        os.environ["CTUNE_CONFIG"] = json.dumps({"lr": 0.01})
        err = io.StringIO()
        with mock.patch("sys.stderr", err):
            self.assertEqual(ctune.apply_config(opt), {})
        self.assertEqual(err.getvalue(), "")

    def test_named_keys_must_exist(self):
        opt = self.FakeOptimizer(lr=0.01)
        with self.assertRaises(ctune.CtuneError) as cm:
            ctune.apply_config(opt, {"momentum": 0.9}, keys=["lr"])
        self.assertEqual(cm.exception.code, "bad_config")
        self.assertIn("no 'lr'", cm.exception.message)
        with self.assertRaises(ctune.CtuneError) as cm:
            ctune.apply_config(opt, {"momentum": 0.9}, keys="momentum")
        self.assertIn("no hyperparameter 'momentum'", cm.exception.message)
        with self.assertRaises(TypeError):
            ctune.apply_config(object(), {"lr": 1})

    @unittest.skipIf(torch is None, "no torch")
    def test_torch_optimizer_restored_then_applied(self):
        net = torch.nn.Linear(2, 1)
        donor = torch.optim.Adam(net.parameters(), lr=0.005, betas=(0.9, 0.99))
        opt = torch.optim.Adam(net.parameters(), lr=0.006, betas=(0.8, 0.99))
        opt.load_state_dict(donor.state_dict())
        self.assertEqual(opt.param_groups[0]["lr"], 0.005)  # what a restore does
        with mock.patch("sys.stderr", io.StringIO()):
            got = ctune.apply_config(opt, {"lr": 0.006, "betas": [0.8, 0.99]})
        self.assertEqual(set(got), {"lr", "betas"})
        self.assertEqual(opt.param_groups[0]["lr"], 0.006)
        self.assertEqual(opt.param_groups[0]["betas"], (0.8, 0.99))


class TestErrors(unittest.TestCase):
    def test_ctune_error_carries_the_servers_fields(self):
        e = ctune.CtuneError("no such trial", status=404, code="not_found", path="/x")
        self.assertEqual((e.status, e.code, e.message, e.path), (404, "not_found", "no such trial",
                                                                 "/x"))
        self.assertEqual(str(e), "404 not_found: no such trial (at /x)")
        self.assertIsInstance(e, Exception)


if __name__ == "__main__":
    unittest.main()
