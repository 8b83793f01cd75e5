#!/usr/bin/env python3
"""A builtin GPU trial really trains on the GPU.

A ctune-worker that sees two GPUs through a fake NVML (tests/worker/
fake_nvml.c) runs a builtin trial with "gpu": 0.5. Its trainer is
ctune-train-cudadouble (ctune-train with the CUDA double as its dlopen()ed
backend), behind a wrapper that records argv and CUDA_VISIBLE_DEVICES. The
trial must be started with --device cuda on the device the worker assigned,
and its results must carry gpu_mem_mb (only the CUDA backend reports it).
A second trial with trainable "device": "cpu" is started with --device cpu
and reports no gpu_mem_mb.

usage: test_worker_gpu_trial.py BUILD/bin BUILD/fake-nvml"""
import json
import os
import stat
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "worker", "e2e"))
from harness import SKIP, main, wait_for  # noqa: E402

DATA = os.environ.get("CTUNE_DATA_DIR", "/usr/share/datasets/fashion-mnist")


def trial_config(name, trainable_extra):
    tr = {"type": "builtin", "model": "mlp", "dataset": "fashion-mnist",
          "data_dir": DATA, "train_limit": 400}
    tr.update(trainable_extra)
    return {"name": name, "metric": "loss", "mode": "min", "num_samples": 1,
            "param_space": {"lr": 0.05, "batch_size": 32, "l1": 16, "l2": 8},
            "scheduler": {"type": "fifo", "time_attr": "training_iteration",
                          "max_t": 2},
            "resources_per_trial": {"cpu": 1, "gpu": 0.5},
            "trainable": tr}


def body(env):
    bin_dir, fake_dir = os.path.abspath(env.bin), os.path.abspath(env.args[0])
    double = os.path.join(bin_dir, "ctune-train-cudadouble")
    if not os.access(double, os.X_OK) or not os.path.isdir(DATA):
        print("SKIP: needs ctune-train-cudadouble and %s" % DATA)
        sys.exit(SKIP)
    record = os.path.join(env.tmp, "trainer-calls.jsonl")
    wrapper = os.path.join(env.tmp, "ctune-train")
    with open(wrapper, "w") as f:
        f.write("#!/usr/bin/env python3\n"
                "import json, os, sys\n"
                "with open(%r, 'a') as f:\n"
                "    f.write(json.dumps({'argv': sys.argv[1:], 'cuda': "
                "os.environ.get('CUDA_VISIBLE_DEVICES'), 'order': "
                "os.environ.get('CUDA_DEVICE_ORDER')}) + '\\n')\n"
                "os.execv(%r, [%r] + sys.argv[1:])\n" % (record, double, double))
    os.chmod(wrapper, os.stat(wrapper).st_mode | stat.S_IXUSR | stat.S_IRUSR)
    os.chmod(env.tmp, 0o755)
    env.start_server()
    e = dict(os.environ)
    e["LD_LIBRARY_PATH"] = fake_dir + (":" + e["LD_LIBRARY_PATH"]
                                       if e.get("LD_LIBRARY_PATH") else "")
    w = env.start_worker("gpu", "--cpus", "1", "--train-bin", wrapper, env=e)
    # up and running (its SIGTERM handler set) before anything can stop it
    wait_for(lambda: "registered with" in w.log() or "resuming as worker" in w.log(),
             15, "the worker's registration")

    exp = env.submit(trial_config("gpu-builtin", {}))
    env.wait_experiment(exp, 60)
    t = env.trials(exp)[0]
    # The worker's last log upload follows the trial's end on its own
    # schedule (docs/protocol.md#logs): read until it has landed.
    def trial_log():
        return env.api("GET", "/api/v1/trials/%d/logs" % t["id"])["log"]
    wait_for(lambda: "device: cuda (requested)" in trial_log(), 10, "the trial's last log upload")
    log = trial_log()
    assert t["status"] == "TERMINATED", (t, log)
    with open(record) as f:
        calls = [json.loads(l) for l in f]
    print("trainer calls:", calls)
    argv = calls[0]["argv"]
    assert argv[argv.index("--device") + 1] == "cuda", argv
    assert calls[0]["cuda"] == "0", calls[0]  # the device the worker assigned
    assert calls[0]["order"] == "PCI_BUS_ID", calls[0]  # numbered as NVML does
    results = env.results(t["id"])
    res = [r.get("result", r) for r in results]
    assert res and all(r.get("gpu_mem_mb", 0) > 0 for r in res), res
    assert "device: cuda (requested)" in log, log

    exp = env.submit(trial_config("gpu-share-on-cpu", {"device": "cpu"}))
    env.wait_experiment(exp, 60)
    t = env.trials(exp)[0]
    with open(record) as f:
        calls = [json.loads(l) for l in f]
    argv = calls[-1]["argv"]
    assert argv[argv.index("--device") + 1] == "cpu", argv
    assert argv.count("--device") == 1, argv
    res = [r.get("result", r) for r in env.results(t["id"])]
    assert t["status"] == "TERMINATED" and res, (t, res)
    assert all("gpu_mem_mb" not in r for r in res), res


main("gpu-trial", body)
