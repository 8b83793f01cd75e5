#!/usr/bin/env python3
"""ctune-train's own handling of the CUDA backend, on the CUDA test double.

The trainer's side of four backend failures and defaults (the binary is
ctune-train-cudadouble: trainer/main.c and the trainer's loop linked against
tests/cuda/mock_cuda.c; CTUNE_MOCK_GPUS sets how many GPUs it shows):
- resume: out of memory while the checkpoint's optimiser state is loaded
  into the backend (set_state) exits 6 out_of_memory with the backend's
  sentence, not 1 internal;
- --oom-retry also covers the backend's create refusing the batch: the
  batch is halved until create fits, the result says "batch_size" and
  "oom_retry", one log line says so; down to batch 1 and still no fit exits 6;
- a create failure on a device that answers (cuBLAS cannot start) exits 1
  internal with the failed call's name and status, not 7 no_device;
- --gpus defaults to every visible device.

usage: test_train_double_trainer.py PATH/TO/ctune-train-cudadouble"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

EXE = os.path.abspath(sys.argv[1])
DATA = os.environ.get("CTUNE_DATA_DIR", "/usr/share/datasets/fashion-mnist")
# mlp 256/128, SGD, one GPU (docs/cuda.md's plan): batch 64 needs ~6.8 MiB
# for evaluation plus ~1.9 MiB of gradients, optimiser state and backward;
# batch 1024's evaluation arena alone is ~12.6 MiB, batch 512 needs ~11.3 MiB
# in all.
MLP = ["--device", "cuda", "--model", "mlp", "--l1", "256", "--l2", "128",
       "--dataset", "fashion-mnist", "--data-dir", DATA, "--lr", "0.01",
       "--momentum", "0.9", "--threads", "1"]


def run(args, gpus=1, cwd=None, env_extra=None):
    env = dict(os.environ, CTUNE_MOCK_GPUS=str(gpus))
    env.update(env_extra or {})
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if "--dataset" in args and cwd:
        # one data cache for all runs, as under a worker: otherwise each run
        # decompresses the whole data set whatever --train-limit says (two
        # thirds of a run's time on the double); the bytes are the same
        args = args + ["--data-cache", os.path.join(cwd, "data-cache")]
    return subprocess.run([EXE] + args, cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=100)


def results(p):
    return [json.loads(l) for l in p.stdout.splitlines() if l.strip()]


def error(p):
    for line in p.stderr.splitlines():
        if line.startswith("{"):
            return json.loads(line).get("error")
    return None


def check(cond, what, p=None):
    if not cond:
        extra = "" if p is None else "\nexit %d\nstdout:\n%s\nstderr:\n%s" % (
            p.returncode, p.stdout, p.stderr[-3000:])
        print("FAIL: " + what + extra)
        sys.exit(1)
    print("ok: " + what)


def resume_out_of_memory(tmp):
    ck = os.path.join(tmp, "ck")
    base = MLP + ["--train-limit", "600", "--batch-size", "64", "--seed", "3",
                  "--checkpoint-dir", ck]
    p = run(base + ["--epochs", "1"], cwd=tmp)
    check(p.returncode == 0 and os.path.exists(os.path.join(ck, "checkpoint.bin")),
          "epoch 1 writes a checkpoint", p)
    # 7 MiB holds the evaluation arena (create succeeds) but not the
    # optimiser state the checkpoint brings back
    p = run(base + ["--epochs", "2", "--resume", "--gpu-mem-limit-mb", "7"], cwd=tmp)
    err = error(p)
    check(p.returncode == 6 and err and err["code"] == "out_of_memory"
          and err["exit_code"] == 6,
          "out of memory loading the checkpoint exits 6 out_of_memory: %s" % err, p)
    msg = err["message"]
    check("cannot load the checkpoint" in msg
          and "out of GPU memory at batch_size 64 (needs ~" in msg
          and "limit 7 MiB" in msg,
          "the message carries the backend's sentence: " + msg, p)
    check(results(p) == [], "no result line", p)
    # the checkpoint is untouched: without the cap the run resumes from it
    p = run(base + ["--epochs", "2", "--resume"], cwd=tmp)
    res = results(p)
    check(p.returncode == 0 and [r["training_iteration"] for r in res] == [2],
          "the same checkpoint then resumes without the cap", p)


def create_oom_retry(tmp):
    args = MLP + ["--train-limit", "2400", "--epochs", "1", "--batch-size", "1024",
                  "--gpu-mem-limit-mb", "12"]
    p = run(args, cwd=tmp)
    err = error(p)
    check(p.returncode == 6 and err and err["code"] == "out_of_memory"
          and "out of GPU memory at batch_size 1024" in err["message"],
          "without --oom-retry, create's refusal at 1024 exits 6: %s" % err, p)

    p = run(args + ["--oom-retry"], cwd=tmp)
    res = results(p)
    check(p.returncode == 0 and len(res) == 1, "with --oom-retry it trains", p)
    check(res[0].get("batch_size") == 512 and res[0].get("oom_retry") == 1,
          "the result says batch_size 512, oom_retry 1: %s" % res[0], p)
    check(res[0]["gpu_mem_mb"] <= 12, "peak %.1f MiB within the cap"
          % res[0]["gpu_mem_mb"], p)
    said = [l for l in p.stderr.splitlines() if "--oom-retry" in l]
    check(len(said) == 1
          and "creating the cuda backend at batch_size 1024 ran out of memory, "
          "halved it to 512" in said[0]
          and "out of GPU memory at batch_size 1024 (needs ~" in said[0],
          "one log line says create's batch was halved: %s" % said, p)

    # a cap below even batch 1's evaluation arena: halved down to 1, then 6
    p = run(MLP + ["--train-limit", "300", "--epochs", "1", "--batch-size", "64",
                   "--gpu-mem-limit-mb", "4", "--oom-retry"], cwd=tmp)
    err = error(p)
    check(p.returncode == 6 and err and err["code"] == "out_of_memory",
          "nothing fits 4 MiB: exits 6 after the retries: %s" % err, p)
    check("out of GPU memory at batch_size 1 (needs ~" in err["message"]
          and "halved batch_size from 64 down to 1" in err["message"],
          "the message names the last batch tried and the retries", p)


def create_failure_is_not_no_device(tmp):
    # a device that answers but whose cuBLAS cannot start: ours to look at
    # (exit 1 with the failed call and its status), not "no GPU" (exit 7)
    p = run(MLP + ["--train-limit", "300", "--epochs", "1", "--batch-size", "64"],
            cwd=tmp, env_extra={"CTUNE_MOCK_FAIL": "cublasCreate"})
    err = error(p)
    check(p.returncode == 1 and err and err["code"] == "internal"
          and err["exit_code"] == 1,
          "a cuBLAS start failure exits 1 internal: %s" % err, p)
    check("cublasCreate" in err["message"]
          and "CUBLAS_STATUS_NOT_INITIALIZED" in err["message"],
          "the message names the call and its status: " + err["message"], p)


def gpus_default_all_visible(tmp):
    small = MLP + ["--train-limit", "300", "--epochs", "1", "--batch-size", "64"]
    p = run(small, gpus=2, cwd=tmp)
    check(p.returncode == 0 and len(results(p)) == 1, "no --gpus trains", p)
    check("cuda: 2 device(s)" in p.stderr and "all 2 visible GPU(s)" in p.stderr,
          "no --gpus uses both visible devices", p)
    p = run(small + ["--gpus", "1"], gpus=2, cwd=tmp)
    check(p.returncode == 0 and "cuda: 1 device(s)" in p.stderr
          and "device: cuda (requested), 1 GPU(s)" in p.stderr,
          "--gpus 1 uses one of the two", p)
    p = run(["--help"], cwd=tmp)
    check(p.returncode == 0 and "0 (the default) = all that CUDA_VISIBLE_DEVICES"
          in p.stdout, "--help gives the default", p)


def main():
    if not os.path.isdir(DATA):
        print("SKIP: %s missing" % DATA)
        return 77
    tmp = tempfile.mkdtemp(prefix="ctune-train-double-")
    try:
        resume_out_of_memory(tmp)
        create_oom_retry(tmp)
        create_failure_is_not_no_device(tmp)
        gpus_default_all_visible(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
