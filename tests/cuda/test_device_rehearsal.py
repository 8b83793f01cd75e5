#!/usr/bin/env python3
"""The rehearsal of the GPU call: bench/gpu/prepare then bench/gpu/device-step,
exactly as a lent GPU host runs them, here against the real CUDA runtime on a
machine without a GPU, so the one device call cannot rot between leases.

It must:
- pack what it carries within the 60 MiB a device call may send;
- reach the end and print the step table (and write it to report.md);
- pass the machine step (the carried libraries resolve);
- fail every GPU step cleanly: FAIL with the CUDA runtime's own sentence
  (cudaError...: ...), the worker step saying its worker offers no GPU,
  and the torch/NVIDIA-tool steps `unavailable` with their reason;
- exit 1, never 0, on a machine without a GPU.

Skips (77) where a GPU is visible: there the real call is the test.

usage: test_device_rehearsal.py BUILD"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
RUNTIME = re.compile(r"cudaError\w+: \S")
GPU_STEPS = ("tests", "losses", "sweep", "concurrency", "fast-path")


def main():
    build = os.path.abspath(sys.argv[1])
    smi = shutil.which("nvidia-smi")
    if smi and subprocess.run([smi, "-L"], capture_output=True).returncode == 0:
        print("SKIP: a GPU is visible here; the device call itself is the test")
        return 77
    tmp = tempfile.mkdtemp(prefix="ctune-rehearsal-")
    try:
        return rehearse(build, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def rehearse(build, tmp):
    # ctest runs after the build: prepare need not check it again (4 s)
    dev, out = os.path.join(tmp, "dev"), os.path.join(tmp, "out")
    t0 = time.monotonic()
    p = subprocess.run([os.path.join(ROOT, "bench", "gpu", "prepare"), "--build", build,
                        "--dev", dev, "--no-build"], capture_output=True, text=True, timeout=300)
    print(p.stdout + p.stderr)
    assert p.returncode == 0, "prepare exited %d" % p.returncode
    m = re.search(r"= ([\d.]+) MiB sent \(limit 60 MiB\)", p.stdout)
    assert m and float(m.group(1)) <= 60, "no size line, or over 60 MiB: %r" % p.stdout
    t1 = time.monotonic()
    env = dict(os.environ, OUT=out)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu", "device-step"),
                        "--dev", dev, "--budget", "120"], capture_output=True, text=True,
                       timeout=300, env=env)
    print(p.stdout[-6000:] + p.stderr[-3000:])
    print("prepare %.1f s, device-step %.1f s" % (t1 - t0, time.monotonic() - t1))
    assert p.returncode == 1, "device-step exited %d without a GPU" % p.returncode
    rows = {}
    for line in p.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1] in ("PASS", "FAIL", "UNAVAILABLE", "TIMEOUT"):
            rows[cells[0]] = (cells[1], cells[3])
    assert "| step | verdict | seconds | detail |" in p.stdout, "no step table printed"
    with open(os.path.join(out, "report.md")) as f:
        report = f.read()
    assert "| step | verdict | seconds | detail |" in report, "report.md has no step table"
    assert rows.get("machine", ("?",))[0] == "PASS", "machine: %r" % (rows.get("machine"),)
    for step in GPU_STEPS:
        verdict, detail = rows.get(step, ("missing", ""))
        assert verdict == "FAIL" and RUNTIME.search(detail), \
            "%s should fail with the CUDA runtime's sentence: %s %r" % (step, verdict, detail)
        assert step != "tests" or "SKIP" not in detail, \
            "a test skipped under CTUNE_REQUIRE_GPU=1: %r" % detail
    verdict, detail = rows.get("worker", ("missing", ""))
    assert verdict == "FAIL" and "offers no GPU" in detail, "worker: %s %r" % (verdict, detail)
    for step in ("ceilings", "ncu", "sanitizer"):
        verdict, detail = rows.get(step, ("missing", ""))
        assert verdict in ("UNAVAILABLE", "FAIL") and detail, "%s: %s %r" % (step, verdict,
                                                                           detail)
        assert verdict == "UNAVAILABLE" or RUNTIME.search(detail), \
            "%s failed without the runtime's sentence: %r" % (step, detail)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
