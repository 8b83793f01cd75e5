#!/usr/bin/env python3
"""ctune-worker --mps (CUDA MPS), with a fake nvidia-cuda-mps-control.

1. Without the program on PATH, --mps fails at start with exit 2 and a
   sentence that names it.
2. With the fake on PATH, the worker starts the control daemon once
   (`-d`) with CUDA_MPS_PIPE_DIRECTORY/CUDA_MPS_LOG_DIRECTORY under its work
   dir, and a builtin trial with "gpu": 0.5 (two fake-NVML GPUs of 16 GiB)
   gets the same two directories and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
   "0=<its share>M", equal to CTUNE_GPU_MEM_LIMIT_MB.
3. A worker started again on the same work dir joins the daemon already
   answering there (a query on stdin, no second `-d`).

usage: test_worker_mps.py BUILD/bin BUILD/fake-nvml"""
import json
import os
import stat
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "worker", "e2e"))
from harness import SKIP, main, wait_for  # noqa: E402

DATA = os.environ.get("CTUNE_DATA_DIR", "/usr/share/datasets/fashion-mnist")

FAKE_CONTROL = r'''#!/usr/bin/env python3
import json, os, sys
pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "")
text = "" if "-d" in sys.argv[1:] else sys.stdin.read()
with open(%(log)r, "a") as f:
    f.write(json.dumps({"argv": sys.argv[1:], "stdin": text, "pipe": pipe,
                        "log": os.environ.get("CUDA_MPS_LOG_DIRECTORY")}) + "\n")
if "-d" in sys.argv[1:]:
    open(os.path.join(pipe, "control"), "w").close()  # the daemon's socket
    sys.exit(0)
sys.exit(0 if os.path.exists(os.path.join(pipe, "control")) else 1)
'''


def trial_config(name):
    return {"name": name, "metric": "loss", "mode": "min", "num_samples": 1,
            "param_space": {"lr": 0.05, "batch_size": 32, "l1": 16, "l2": 8},
            "scheduler": {"type": "fifo", "time_attr": "training_iteration",
                          "max_t": 1},
            "resources_per_trial": {"cpu": 1, "gpu": 0.5},
            "trainable": {"type": "builtin", "model": "mlp",
                          "dataset": "fashion-mnist", "data_dir": DATA,
                          "train_limit": 200}}


def script(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IRUSR)


def body(env):
    bin_dir, fake_dir = os.path.abspath(env.bin), os.path.abspath(env.args[0])
    double = os.path.join(bin_dir, "ctune-train-cudadouble")
    worker = os.path.join(bin_dir, "ctune-worker")
    if not os.access(double, os.X_OK) or not os.path.isdir(DATA):
        print("SKIP: needs ctune-train-cudadouble and %s" % DATA)
        sys.exit(SKIP)

    # 1. no program: a clear error at start
    e = dict(os.environ)
    e["PATH"] = "/usr/bin:/bin"
    if any(os.access(os.path.join(d, "nvidia-cuda-mps-control"), os.X_OK)
           for d in ("/usr/bin", "/bin")):
        print("SKIP: a real nvidia-cuda-mps-control is installed here")
        sys.exit(SKIP)
    p = subprocess.run([worker, "--server", "http://127.0.0.1:9", "--mps",
                        "--gpus", "1", "--work-dir",
                        os.path.join(env.tmp, "w-nomps")],
                       env=e, capture_output=True, text=True, timeout=20)
    print("without the program:", p.returncode, p.stderr.strip())
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "--mps: nvidia-cuda-mps-control is not on PATH" in p.stderr, p.stderr

    # 2. the fake on PATH: the worker starts it, a GPU trial gets the env
    tools = os.path.join(env.tmp, "tools")
    os.mkdir(tools)
    calls = os.path.join(env.tmp, "mps-calls.jsonl")
    script(os.path.join(tools, "nvidia-cuda-mps-control"),
           FAKE_CONTROL % {"log": calls})
    record = os.path.join(env.tmp, "trainer-env.jsonl")
    wrapper = os.path.join(env.tmp, "ctune-train")
    script(wrapper,
           "#!/usr/bin/env python3\n"
           "import json, os, sys\n"
           "with open(%r, 'a') as f:\n"
           "    f.write(json.dumps({k: v for k, v in os.environ.items()\n"
           "        if k.startswith(('CUDA_', 'CTUNE_GPU'))}) + '\\n')\n"
           "os.execv(%r, [%r] + sys.argv[1:])\n" % (record, double, double))
    os.chmod(env.tmp, 0o755)
    env.start_server()
    e = dict(os.environ)
    e["PATH"] = tools + ":" + e.get("PATH", "/usr/bin:/bin")
    e["LD_LIBRARY_PATH"] = fake_dir + (":" + e["LD_LIBRARY_PATH"]
                                       if e.get("LD_LIBRARY_PATH") else "")
    w = env.start_worker("mps", "--cpus", "1", "--mps", "--train-bin", wrapper,
                         env=e)
    pipe = os.path.join(env.work_dir("mps"), "mps", "pipe")
    logd = os.path.join(env.work_dir("mps"), "mps", "log")
    wait_for(lambda: os.path.exists(calls), 10, "the MPS control daemon")
    exp = env.submit(trial_config("mps"))
    env.wait_experiment(exp, 60)
    t = env.trials(exp)[0]
    assert t["status"] == "TERMINATED", (t, w.log()[-2000:])
    with open(calls) as f:
        mps = [json.loads(l) for l in f]
    print("control calls:", mps)
    assert [c["argv"] for c in mps] == [["-d"]], mps
    assert mps[0]["pipe"] == pipe and mps[0]["log"] == logd, mps
    with open(record) as f:
        tenv = json.loads(f.readline())
    print("trial env:", tenv)
    assert tenv.get("CUDA_MPS_PIPE_DIRECTORY") == pipe, tenv
    assert tenv.get("CUDA_MPS_LOG_DIRECTORY") == logd, tenv
    limit = int(tenv["CTUNE_GPU_MEM_LIMIT_MB"])
    assert limit > 0, tenv
    assert tenv.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") == "0=%dM" % limit, tenv
    env.finish_workers()

    # 3. started again on the same work dir: joins the daemon there
    w2 = env.start_worker("mps", "--cpus", "1", "--mps", "--train-bin", wrapper,
                          env=e)
    wait_for(lambda: sum(1 for _ in open(calls)) >= 2, 10, "the join query")
    # up and running (its stop handler too) before the harness stops it
    wait_for(lambda: "registered with" in w2.log() or "resuming as worker" in w2.log(),
             15, "the worker's registration")
    with open(calls) as f:
        mps = [json.loads(l) for l in f]
    assert [c["argv"] for c in mps] == [["-d"], []], mps
    assert mps[1]["stdin"].strip() == "get_default_active_thread_percentage", mps


main("worker-mps", body)
