#!/usr/bin/env python3
"""ctune-train with the CUDA backend built in, as a process.

`cli` mode (label e2e, runs everywhere): --version names the cuda backend;
with every GPU hidden (CUDA_VISIBLE_DEVICES=""), --device cuda exits 7 at once
with a no_device JSON error, and --device auto trains on the CPU; `gpu` mode
itself fails on exit 7 under CTUNE_REQUIRE_GPU=1.
`gpu` mode (label gpu): one real epoch on the GPU reports gpu_mem_mb; a 1 MiB
cap exits 6 (out_of_memory). Prints "SKIP: no CUDA device" and exits 77
without a device, unless CTUNE_REQUIRE_GPU=1 or nvidia-smi lists a GPU: then
exit 7 (no device, or a plugin that does not load) fails with the reason.

usage: test_train_cli.py BIN_DIR [cli|gpu]"""
import json
import os
import subprocess
import sys
import tempfile
import time

BIN = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CTUNE_BIN_DIR", "build/bin")
MODE = sys.argv[2] if len(sys.argv) > 2 else "cli"
TRAIN = os.path.abspath(os.path.join(BIN, "ctune-train"))
DATA = os.environ.get("CTUNE_DATA_DIR", "/usr/share/datasets/fashion-mnist")
SMALL = ["--model", "mlp", "--l1", "16", "--l2", "8", "--dataset", "fashion-mnist",
         "--data-dir", DATA, "--train-limit", "256", "--epochs", "1",
         "--batch-size", "64", "--threads", "1"]


def run(args, env_extra=None, timeout=120):
    env = dict(os.environ)
    env.update(env_extra or {})
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ctune-cuda-cli-") as tmp:
        p = subprocess.run([TRAIN] + args, cwd=tmp, env=env, capture_output=True,
                           text=True, timeout=timeout)
    return p, time.monotonic() - t0


def error_line(stderr):
    for line in stderr.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if "error" in obj:
                return obj["error"]
    return None


def results(stdout):
    return [json.loads(l) for l in stdout.splitlines() if l.strip()]


def check(cond, what, p=None):
    if not cond:
        detail = "" if p is None else "\nexit %s\nstdout:\n%s\nstderr:\n%s" % (
            p.returncode, p.stdout, p.stderr)
        print("FAIL: " + what + detail)
        sys.exit(1)
    print("ok: " + what)


def cli():
    p, _ = run(["--version"])
    check(p.returncode == 0 and "cuda" in p.stdout,
          "--version lists the cuda backend: " + p.stdout.strip(), p)

    hidden = {"CUDA_VISIBLE_DEVICES": ""}
    p, secs = run(["--device", "cuda"] + SMALL, hidden)
    err = error_line(p.stderr)
    check(p.returncode == 7, "--device cuda without a device exits 7", p)
    check(err is not None and err.get("code") == "no_device"
          and err.get("exit_code") == 7 and "CUDA device" in err.get("message", ""),
          "the error line says no_device: %s" % err, p)
    check(p.stdout.strip() == "", "no result lines on stdout", p)
    check(secs < 10, "fails at once (%.2f s)" % secs, p)

    # gpu mode's skip rule: with a GPU required, exit 7 fails, never skips
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", CTUNE_REQUIRE_GPU="1")
    g = subprocess.run([sys.executable, os.path.abspath(__file__), BIN, "gpu"], env=env,
                       capture_output=True, text=True, timeout=60)
    check(g.returncode == 1 and "FAIL: a GPU is required here (CTUNE_REQUIRE_GPU=1)"
          in g.stdout and "no usable CUDA device" in g.stdout,
          "gpu mode under CTUNE_REQUIRE_GPU=1 fails on exit 7: " + g.stdout.strip(), g)

    if not os.path.isdir(DATA):
        print("note: %s missing, --device auto part not run" % DATA)
        return
    p, _ = run(["--device", "auto"] + SMALL, hidden)
    check(p.returncode == 0, "--device auto without a device trains", p)
    check("device: cpu" in p.stderr, "auto says it picked the cpu", p)
    check(len(results(p.stdout)) == 1, "one epoch result", p)


def gpu_required():
    """As tests/cuda/gpu_skip.c: CTUNE_REQUIRE_GPU=1, or nvidia-smi lists a
    GPU, turns "no device" into a failure."""
    if os.environ.get("CTUNE_REQUIRE_GPU") == "1":
        return "CTUNE_REQUIRE_GPU=1"
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return "nvidia-smi -L lists a GPU" if any(
        l.startswith("GPU ") for l in out.splitlines()) else None


def gpu():
    p, _ = run(["--device", "cuda"] + SMALL)
    if p.returncode == 7:
        # exit 7 also covers a plugin that does not load (a missing
        # libcudart or libnccl): with a GPU required it is a failure
        err = error_line(p.stderr) or {}
        why = err.get("message", p.stderr.strip()[-500:])
        required = gpu_required()
        if required:
            print("FAIL: a GPU is required here (%s) but ctune-train exited 7: %s"
                  % (required, why))
            sys.exit(1)
        print("SKIP: no CUDA device (%s)" % why)
        sys.exit(77)
    check(p.returncode == 0, "--device cuda trains one epoch", p)
    res = results(p.stdout)
    check(len(res) == 1 and res[0].get("gpu_mem_mb", 0) > 0,
          "the result carries gpu_mem_mb: %s" % (res[-1] if res else None), p)
    p, _ = run(["--device", "cuda", "--gpu-mem-limit-mb", "1"] + SMALL)
    err = error_line(p.stderr)
    check(p.returncode == 6 and err is not None and err.get("code") == "out_of_memory",
          "a 1 MiB cap exits 6 out_of_memory: %s" % err, p)


if __name__ == "__main__":
    if not os.access(TRAIN, os.X_OK):
        print("FAIL: %s not built" % TRAIN)
        sys.exit(1)
    cli() if MODE == "cli" else gpu()
