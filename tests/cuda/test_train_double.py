#!/usr/bin/env python3
"""ctune-train --device cuda end to end on the CUDA test double.

The binary under test is ctune-train built from trainer/main.c and the
trainer's own loop, linked against tests/cuda/mock_cuda.c in place of CUDA,
cuBLAS and NCCL (CTUNE_MOCK_GPUS sets how many GPUs it shows). That checks
the trainer's wiring of the CUDA backend without a GPU: gpu_mem_mb in every
result, exit 6 out_of_memory with the backend's message under a small
--gpu-mem-limit-mb, --oom-retry halving the batch and saying so in the
result, --gpus 2, and exit 7 with no device.

usage: test_train_double.py PATH/TO/ctune-train-cudadouble"""
import json
import os
import subprocess
import sys
import tempfile

EXE = os.path.abspath(sys.argv[1])
DATA = os.environ.get("CTUNE_DATA_DIR", "/usr/share/datasets/fashion-mnist")
MLP = ["--device", "cuda", "--model", "mlp", "--l1", "256", "--l2", "128",
       "--dataset", "fashion-mnist", "--data-dir", DATA, "--lr", "0.01",
       "--momentum", "0.9", "--threads", "1"]


# Every run maps the data set from one --data-cache, as runs under a worker
# do: otherwise each decompresses the whole of its gzip files whatever
# --train-limit says (two thirds of a run's time on the double). The
# bytes are the same; tests/trainer covers the cache itself.
CACHE = tempfile.TemporaryDirectory(prefix="ctune-cuda-double-cache-")


def run(args, gpus=1):
    env = dict(os.environ, CTUNE_MOCK_GPUS=str(gpus))
    with tempfile.TemporaryDirectory(prefix="ctune-cuda-double-") as tmp:
        return subprocess.run([EXE] + args + ["--data-cache", CACHE.name],
                              cwd=tmp, env=env, capture_output=True,
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


def main():
    if not os.path.isdir(DATA):
        print("SKIP: %s missing" % DATA)
        return 77
    p = run(MLP + ["--train-limit", "600", "--epochs", "2", "--batch-size", "64"])
    res = results(p)
    check(p.returncode == 0 and len(res) == 2, "two epochs on the double", p)
    check(all(r.get("gpu_mem_mb", 0) > 0 for r in res),
          "every result has gpu_mem_mb: %s" % [r.get("gpu_mem_mb") for r in res], p)
    check("device: cuda" in p.stderr, "the log says cuda", p)
    check(res[-1]["loss"] < res[0]["loss"] + 0.5, "the loss is sane", p)

    p2 = run(MLP + ["--train-limit", "600", "--epochs", "1", "--batch-size", "64",
                    "--gpus", "2"], gpus=2)
    r2 = results(p2)
    check(p2.returncode == 0 and len(r2) == 1, "--gpus 2 trains", p2)
    check(abs(r2[0]["train_loss"] - res[0]["train_loss"]) < 1e-3 * res[0]["train_loss"],
          "2 GPUs give the 1-GPU train_loss (%.6f vs %.6f)"
          % (r2[0]["train_loss"], res[0]["train_loss"]), p2)

    p = run(MLP + ["--train-limit", "300", "--epochs", "1", "--batch-size", "64",
                   "--gpu-mem-limit-mb", "1"])
    err = error(p)
    check(p.returncode == 6 and err and err["code"] == "out_of_memory",
          "a 1 MiB cap exits 6 out_of_memory: %s" % err, p)
    msg = err.get("message", "")
    check(msg.startswith("out of GPU memory at batch_size 64 (needs ~")
          and msg.endswith("limit 1 MiB): try a smaller batch_size"),
          "the error line carries the backend's sentence", p)

    # mlp 256/128: training at 1024 plans ~15.9 MiB, at 512 ~11.3 MiB (see
    # docs/cuda.md), so a 13 MiB cap fits only after one halving.
    args = MLP + ["--train-limit", "2400", "--epochs", "1", "--batch-size", "1024",
                  "--gpu-mem-limit-mb", "13"]
    p = run(args)
    check(p.returncode == 6 and "at batch_size 1024" in p.stderr,
          "batch 1024 does not fit 13 MiB", p)
    p = run(args + ["--oom-retry"])
    res = results(p)
    check(p.returncode == 0 and len(res) == 1, "--oom-retry goes on", p)
    check(res[0].get("batch_size") == 512 and res[0].get("oom_retry") == 1,
          "the result says the batch was halved: %s" % res[0], p)
    check(res[0]["gpu_mem_mb"] <= 13, "peak %.1f MiB within the cap" % res[0]["gpu_mem_mb"], p)

    # checkpoints are interchangeable: epoch 1 on cuda, epoch 2 on the cpu,
    # against two epochs on the cpu alone
    with tempfile.TemporaryDirectory(prefix="ctune-cuda-ckpt-") as ck:
        base = MLP[2:] + ["--train-limit", "600", "--batch-size", "64", "--seed", "7"]
        p = run(["--device", "cuda"] + base + ["--epochs", "1", "--checkpoint-dir", ck])
        check(p.returncode == 0 and os.path.exists(os.path.join(ck, "checkpoint.bin")),
              "a cuda run writes checkpoint.bin", p)
        p = run(["--device", "cpu"] + base + ["--epochs", "2", "--checkpoint-dir", ck,
                                               "--resume"])
        mixed = results(p)
        check(p.returncode == 0 and mixed and mixed[-1]["training_iteration"] == 2,
              "the cpu resumes the cuda checkpoint", p)
        p = run(["--device", "cpu"] + base + ["--epochs", "2"])
        cpu = results(p)
        check(p.returncode == 0 and len(cpu) == 2, "two epochs on the cpu", p)
        rel = abs(mixed[-1]["loss"] - cpu[-1]["loss"]) / cpu[-1]["loss"]
        check(rel < 1e-3, "cuda-then-cpu ends where cpu alone does (loss %.6f vs "
              "%.6f, rel %.1e)" % (mixed[-1]["loss"], cpu[-1]["loss"], rel), p)
    with tempfile.TemporaryDirectory(prefix="ctune-cuda-ckpt-") as ck:
        p = run(["--device", "cpu"] + base + ["--epochs", "1", "--checkpoint-dir", ck])
        check(p.returncode == 0, "a cpu run writes its checkpoint", p)
        p = run(["--device", "cuda"] + base + ["--epochs", "2", "--checkpoint-dir", ck,
                                                "--resume"])
        back = results(p)
        check(p.returncode == 0 and back and back[-1]["training_iteration"] == 2,
              "cuda resumes the cpu checkpoint", p)
        rel = abs(back[-1]["loss"] - cpu[-1]["loss"]) / cpu[-1]["loss"]
        check(rel < 1e-3, "cpu-then-cuda ends there too (rel %.1e)" % rel, p)

    p = run(MLP + ["--train-limit", "300", "--epochs", "1"], gpus=0)
    err = error(p)
    check(p.returncode == 7 and err and err["code"] == "no_device",
          "no device exits 7: %s" % err, p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
