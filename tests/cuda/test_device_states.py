#!/usr/bin/env python3
"""Device states through the real plugin probe (kernels/cuda_plugin.c) with a
fake runtime (fake_cuda_state.c, CTUNE_FAKE_CUDA picks its answer), in
ctune-train-cudafault, which loads libctune-cuda-fault.so by dlopen():

- no device, a driver too old for the runtime, system not ready (fabric
  manager), devices unavailable (exclusive-process mode, busy): exit 7
  no_device, and the error line carries the runtime's own name and sentence;
- out of memory while opening the context: exit 6 at once, and --oom-retry
  does not halve the batch (a smaller batch would not make a context fit);
- a healthy device: the probe passes and the backend's create is reached
  (its failure, -EIO, is not no_device: exit 1);
- --device auto with a broken device falls back to the CPU only for auto,
  and says why in the log.

usage: test_device_states.py BUILD/bin"""
import json
import os
import subprocess
import sys
import tempfile

BIN = sys.argv[1]
EXE = os.path.join(BIN, "ctune-train-cudafault")
DATA = os.environ.get("CTUNE_DATA_DIR", "/usr/share/datasets/fashion-mnist")
SMALL = ["--model", "mlp", "--l1", "16", "--l2", "8", "--epochs", "1",
         "--train-limit", "200", "--data-dir", DATA, "--batch-size", "64"]


def run(state, args):
    env = dict(os.environ, CTUNE_FAKE_CUDA=state)
    with tempfile.TemporaryDirectory(prefix="ctune-devstate-") as tmp:
        return subprocess.run([EXE] + args, cwd=tmp, env=env,
                              capture_output=True, text=True, timeout=60)


def error(p):
    for line in p.stderr.splitlines():
        if line.startswith("{"):
            return json.loads(line).get("error")
    return None


def check(cond, what, p):
    if not cond:
        print("FAIL: %s\n  rc=%s\n  stdout=%s\n  stderr=%s"
              % (what, p.returncode, p.stdout, p.stderr))
        sys.exit(1)
    print("ok: " + what)


STATES = [
    ("no_device", "cudaErrorNoDevice: no CUDA-capable device is detected"),
    ("insufficient_driver", "cudaErrorInsufficientDriver: CUDA driver version "
                            "is insufficient for CUDA runtime version"),
    ("system_not_ready", "cudaErrorSystemNotReady: system not yet initialized"),
    ("devices_unavailable", "cudaErrorDevicesUnavailable: CUDA-capable "
                            "device(s) is/are busy or unavailable"),
]

for state, sentence in STATES:
    p = run(state, ["--device", "cuda"] + SMALL)
    e = error(p)
    check(p.returncode == 7 and e and e["code"] == "no_device"
          and sentence in e["message"] and p.stdout == "",
          "%s: exit 7 no_device with the runtime's sentence: %s"
          % (state, e and e["message"]), p)

p = run("context_oom", ["--device", "cuda", "--oom-retry"] + SMALL)
e = error(p)
check(p.returncode == 6 and e and e["code"] == "out_of_memory"
      and "cudaErrorMemoryAllocation: out of memory" in e["message"]
      and "context" in e["message"],
      "out of memory opening the context: exit 6 with the sentence: %s"
      % (e and e["message"]), p)
check("halve" not in p.stderr and "halved" not in p.stderr,
      "--oom-retry did not halve the batch for a context", p)

p = run("ok", ["--device", "cuda"] + SMALL)
e = error(p)
# the stub's create fails with -EIO: a device that answers, so not no_device
check(p.returncode == 1 and e and e["code"] == "internal" and "create reached" in e["message"],
      "a healthy device passes the probe and reaches the backend (its -EIO exits 1)", p)

if os.path.isdir(DATA):
    p = run("devices_unavailable", ["--device", "auto"] + SMALL)
    check(p.returncode == 0 and "device: cpu (auto:" in p.stderr
          and "cudaErrorDevicesUnavailable" in p.stderr,
          "--device auto with a busy device says why and trains on the cpu", p)
else:
    print("note: %s missing, --device auto part not run" % DATA)
