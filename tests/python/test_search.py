"""ctune's search spaces, schedulers and searchers as Python objects: each
makes the JSON the server accepts (the same `ctune sample` configs as the
experiment written in JSON), Ray's names are the same objects, and a bad
argument raises at once with the C validator's path and message (Python
holds no validator: without a `ctune` program nothing is refused).

Needs the `ctune` program: CTUNE_BIN_DIR (ctest sets it)."""
import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

import ctune  # noqa: E402

BIN = os.environ.get("CTUNE_BIN_DIR", "")
CTUNE = os.path.join(BIN, "ctune")
TRAINABLE = {"type": "command", "argv": ["python3", "train.py"]}


def sample_json(config):
    """`ctune sample --json` of config, written as a JSON file (as a user would)."""
    p = subprocess.run([CTUNE, "sample", "/dev/stdin", "--json"], input=json.dumps(config),
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


# Every domain, in Python and in JSON.
PY_SPACE = lambda: {  # noqa: E731
    "c": ctune.choice([16, 32, "x", {"type": "adam"}]),
    "u": ctune.uniform(-1, 1),
    "qu": ctune.quniform(0, 10, 0.5),
    "lu": ctune.loguniform(1e-4, 1e-1),
    "qlu": ctune.qloguniform(1, 1000, 5),
    "ri": ctune.randint(0, 10),
    "lri": ctune.lograndint(1, 1024),
    "qri": ctune.qrandint(0, 100, 10),
    "rn": ctune.randn(0.5, 2),
    "p2": ctune.pow2(4, 256),
    "g": ctune.grid_search(["sgd", "adam"]),
    "nested": {"wd": ctune.uniform(0, 0.01), "const": 3},
    "momentum": 0.9,
}
JSON_SPACE = {
    "c": {"type": "choice", "values": [16, 32, "x", {"type": "adam"}]},
    "u": {"type": "uniform", "lower": -1, "upper": 1},
    "qu": {"type": "quniform", "lower": 0, "upper": 10, "q": 0.5},
    "lu": {"type": "loguniform", "lower": 1e-4, "upper": 1e-1},
    "qlu": {"type": "qloguniform", "lower": 1, "upper": 1000, "q": 5},
    "ri": {"type": "randint", "lower": 0, "upper": 10},
    "lri": {"type": "lograndint", "lower": 1, "upper": 1024},
    "qri": {"type": "qrandint", "lower": 0, "upper": 100, "q": 10},
    "rn": {"type": "randn", "mean": 0.5, "sd": 2},
    "p2": {"type": "pow2", "lower": 4, "upper": 256},
    "g": {"grid_search": ["sgd", "adam"]},
    "nested": {"wd": {"type": "uniform", "lower": 0, "upper": 0.01}, "const": 3},
    "momentum": 0.9,
}

# (Python scheduler, its JSON, Python searcher, its JSON or None)
CASES = [
    (lambda: ctune.ASHA(max_t=8, grace_period=1, reduction_factor=2, brackets=2),
     {"type": "asha", "max_t": 8, "grace_period": 1, "reduction_factor": 2, "brackets": 2},
     lambda: ctune.TPE(n_startup_trials=3, multivariate=False, gamma=0.2),
     {"type": "tpe", "n_startup_trials": 3, "multivariate": False, "gamma": 0.2}),
    (lambda: ctune.ASHA(time_attr="epoch", max_t=20, promotion=True),
     {"type": "asha", "time_attr": "epoch", "max_t": 20, "promotion": True},
     lambda: ctune.Random(), {"type": "random"}),
    (lambda: ctune.HyperBand(max_t=27, reduction_factor=3),
     {"type": "hyperband", "max_t": 27, "reduction_factor": 3},
     lambda: ctune.Grid(), None),
    (lambda: ctune.PBT(time_attr="training_iteration", perturbation_interval=2,
                       burn_in_period=1, quantile_fraction=0.5, resample_probability=0.1,
                       perturbation_factors=(1.5, 0.5),
                       hyperparam_mutations={"lu": ctune.loguniform(1e-4, 1e-1),
                                             "momentum": [0.8, 0.9, 0.99],
                                             "nested": {"wd": ctune.uniform(0, 0.01)}}),
     {"type": "pbt", "time_attr": "training_iteration", "perturbation_interval": 2,
      "burn_in_period": 1, "quantile_fraction": 0.5, "resample_probability": 0.1,
      "perturbation_factors": [1.5, 0.5],
      "hyperparam_mutations": {"lu": {"type": "loguniform", "lower": 1e-4, "upper": 1e-1},
                               "momentum": [0.8, 0.9, 0.99],
                               "nested": {"wd": {"type": "uniform", "lower": 0, "upper": 0.01}}}},
     lambda: ctune.Random(), {"type": "random"}),
    (lambda: ctune.MedianStopping(grace_period=2, min_samples_required=2, min_time_slice=1,
                                  hard_stop=False),
     {"type": "median_stopping", "grace_period": 2, "min_samples_required": 2,
      "min_time_slice": 1, "hard_stop": False},
     lambda: ctune.TPE(), {"type": "tpe"}),
    (lambda: ctune.FIFO(max_t=5), {"type": "fifo", "max_t": 5},
     lambda: ctune.TPE(n_startup_trials=4, weights="flat"),
     {"type": "tpe", "n_startup_trials": 4, "weights": "flat"}),
]


@unittest.skipUnless(os.access(CTUNE, os.X_OK), "set CTUNE_BIN_DIR to the folder of ctune")
class RoundTrip(unittest.TestCase):

    def test_python_and_json_sample_the_same_trials(self):
        for sched, sched_json, alg, alg_json in CASES:
            py = ctune.experiment(TRAINABLE, PY_SPACE(), ctune.TuneConfig(
                metric="loss", mode="min", num_samples=3, seed=7, scheduler=sched(),
                search_alg=alg()), name="rt")
            js = {"name": "rt", "metric": "loss", "mode": "min", "num_samples": 3, "seed": 7,
                  "param_space": JSON_SPACE, "scheduler": sched_json, "trainable": TRAINABLE}
            if alg_json is not None:
                js["search_alg"] = alg_json
            with self.subTest(scheduler=sched_json["type"], search_alg=alg_json):
                self.assertEqual(py, js)
                rc_py, out_py, err_py = sample_json(py)
                rc_js, out_js, err_js = sample_json(js)
                self.assertEqual((rc_py, rc_js), (0, 0), err_py + err_js)
                got, want = json.loads(out_py), json.loads(out_js)
                self.assertEqual(want["num_trials"], 6)  # 2 grid values x 3 samples
                self.assertEqual(got["trials"], want["trials"])

    def test_a_conditional_space_is_examples_conditional_json(self):
        # A choice whose options hold their own domains: the example's space,
        # built in Python, samples the example's trials.
        with open(os.path.join(REPO, "examples", "conditional.json")) as f:
            js = json.load(f)
        space = {"lr": ctune.loguniform(1e-4, 0.1),
                 "optimizer": ctune.choice([
                     {"name": "sgd", "momentum": ctune.uniform(0.0, 0.99),
                      "nesterov": ctune.choice([True, False])},
                     {"name": "adam", "beta1": ctune.uniform(0.8, 0.999),
                      "beta2": ctune.loguniform(0.9, 0.9999)}])}
        py = ctune.experiment(js["trainable"], space, name=js["name"], metric="loss",
                              mode="min", num_samples=12, max_concurrent_trials=2, seed=1,
                              search_alg=ctune.TPE(n_startup_trials=6),
                              resources_per_trial={"cpu": 1})
        self.assertEqual(py, js)
        rc_py, out_py, err_py = sample_json(py)
        rc_js, out_js, err_js = sample_json(js)
        self.assertEqual((rc_py, rc_js), (0, 0), err_py + err_js)
        trials = json.loads(out_py)["trials"]
        self.assertEqual(trials, json.loads(out_js)["trials"])
        self.assertEqual({t["optimizer"]["name"] for t in trials}, {"sgd", "adam"})
        with self.assertRaises(ctune.CtuneError) as cm:  # a bad domain inside an option
            ctune.choice([{"name": "sgd", "momentum": {"type": "uniform", "lower": 1,
                                                      "upper": 0}}])
        self.assertIn("values[0].momentum", cm.exception.path)

    def test_ray_arguments_and_names(self):
        # Ray's call, metric and mode in the scheduler: they become the experiment's.
        sched = ctune.ASHAScheduler(time_attr="training_iteration", metric="loss", mode="min",
                                    max_t=8, grace_period=1, reduction_factor=2)
        cfg = ctune.experiment(TRAINABLE, {"lr": ctune.loguniform(1e-3, 1e-1)},
                               ctune.TuneConfig(num_samples=4, scheduler=sched))
        self.assertEqual((cfg["metric"], cfg["mode"], cfg["num_samples"]), ("loss", "min", 4))
        self.assertNotIn("metric", cfg["scheduler"])
        self.assertIs(ctune.ASHAScheduler, ctune.ASHA)
        self.assertIs(ctune.AsyncHyperBandScheduler, ctune.ASHA)
        self.assertIs(ctune.HyperBandScheduler, ctune.HyperBand)
        self.assertIs(ctune.PopulationBasedTraining, ctune.PBT)
        self.assertIs(ctune.MedianStoppingRule, ctune.MedianStopping)
        self.assertIs(ctune.FIFOScheduler, ctune.FIFO)
        # Said twice, differently: refused (as Ray refuses it).
        with self.assertRaises(ValueError) as cm:
            ctune.experiment(TRAINABLE, {}, ctune.TuneConfig(metric="acc", mode="max",
                                                             scheduler=sched))
        self.assertIn("metric is given twice", str(cm.exception))
        # A script path becomes a command trainable run by this interpreter.
        cfg = ctune.experiment("examples/pytorch/train_fmnist.py", {}, check=False)
        self.assertEqual(cfg["trainable"]["argv"][0], sys.executable)
        self.assertTrue(os.path.isabs(cfg["trainable"]["argv"][1]))

    def test_repr_is_the_json(self):
        for obj in [*PY_SPACE().values()][:11] + [c[0]() for c in CASES] + [ctune.TPE(gamma=.3)]:
            self.assertEqual(json.loads(repr(obj)), obj.to_json(), repr(obj))
        self.assertEqual(repr(ctune.ASHA(metric="loss", mode="min", max_t=4)),
                         '{"metric": "loss", "mode": "min", "scheduler": {"type": "asha", '
                         '"max_t": 4}}')

    def test_bad_arguments_raise_the_validators_message_at_once(self):
        bad = [
            (lambda: ctune.loguniform(0, 0.1), "loguniform.lower",
             {"x": {"type": "loguniform", "lower": 0, "upper": 0.1}}, "param_space.x.lower"),
            (lambda: ctune.randint(3, 3), "randint.lower",
             {"x": {"type": "randint", "lower": 3, "upper": 3}}, "param_space.x.lower"),
            (lambda: ctune.quniform(0, 1, -1), "quniform.q",
             {"x": {"type": "quniform", "lower": 0, "upper": 1, "q": -1}}, "param_space.x.q"),
            (lambda: ctune.choice([]), "choice.values",
             {"x": {"type": "choice", "values": []}}, "param_space.x.values"),
        ]
        for make, path, space, json_path in bad:
            with self.assertRaises(ctune.CtuneError) as cm:
                make()
            e = cm.exception
            self.assertEqual((e.status, e.code, e.path), (400, "invalid_config", path))
            # The message is the C validator's, word for word.
            rc, _, err = sample_json({"param_space": space, "trainable": TRAINABLE})
            self.assertNotEqual(rc, 0)
            self.assertIn(f"rejected: {json_path}: {e.message} (400 invalid_config)", err)
        for make, path in [(lambda: ctune.ASHA(grace_period=0), "scheduler.grace_period"),
                           (lambda: ctune.ASHA(max_t=4, grace_period=8), "scheduler.grace_period"),
                           (lambda: ctune.HyperBand(reduction_factor=1),
                            "scheduler.reduction_factor"),
                           (lambda: ctune.PBT(hyperparam_mutations={"lr": []}),
                            "scheduler.hyperparam_mutations.lr"),
                           (lambda: ctune.MedianStopping(min_samples_required=-1),
                            "scheduler.min_samples_required"),
                           (lambda: ctune.TPE(gamma=2), "search_alg.gamma"),
                           (lambda: ctune.ASHA(mode="best"), "mode")]:
            with self.assertRaises(ctune.CtuneError) as cm:
                make()
            self.assertEqual(cm.exception.path, path, str(cm.exception))
        # The whole experiment is checked too (an unknown placeholder).
        with self.assertRaises(ctune.CtuneError) as cm:
            ctune.experiment({"type": "command", "argv": ["python3", "t.py", "{lrr}"]},
                             {"lr": ctune.uniform(0, 1)})
        self.assertEqual(cm.exception.path, "trainable.argv[2]")
        self.assertIn("unknown placeholder {lrr}", cm.exception.message)


class NoSecondValidator(unittest.TestCase):

    def test_without_ctune_nothing_is_refused_in_python(self):
        env = {**os.environ, "CTUNE_BIN_DIR": "", "PATH": "/nonexistent"}
        code = ("import ctune; print(ctune.loguniform(0, 0.1), ctune.ASHA(grace_period=0), "
                "ctune.TPE(gamma=2))")
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=60,
                           cwd=os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn('"lower": 0', p.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
