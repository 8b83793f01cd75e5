#!/usr/bin/env python3
"""The CUDA backend is loaded, not linked.

- ldd of ctune-train lists no CUDA library (cudart, cublas, cublasLt, nccl,
  libcuda); libctune-cuda.so, which has them, sits in BUILD/lib;
- a CPU run does not load the plugin (LD_DEBUG=files shows no
  libctune-cuda.so), and trains from a copy of ctune-train in a directory
  with no plugin and no CUDA library anywhere on its paths;
- that copy asked for --device cuda exits 7 no_device naming the missing
  plugin; a plugin that cannot load (a CUDA library missing) gives dlerror's
  sentence.

usage: test_plugin_loaded.py BUILD/bin"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

BIN = os.path.abspath(sys.argv[1])
TRAIN = os.path.join(BIN, "ctune-train")
PLUGIN = os.path.join(os.path.dirname(BIN), "lib", "libctune-cuda.so")
DATA = os.environ.get("CTUNE_DATA_DIR", "/usr/share/datasets/fashion-mnist")
SMALL = ["--model", "mlp", "--l1", "16", "--l2", "8", "--epochs", "1",
         "--train-limit", "300", "--data-dir", DATA]
CUDA_LIBS = re.compile(r"lib(cudart|cublas|cublasLt|nccl|cuda)\.so")


def check(cond, what, extra=""):
    if not cond:
        print("FAIL: %s\n%s" % (what, extra))
        sys.exit(1)
    print("ok: " + what)


def error(p):
    for line in p.stderr.splitlines():
        if line.startswith("{"):
            return json.loads(line).get("error")
    return None


ldd = subprocess.run(["ldd", TRAIN], capture_output=True, text=True).stdout
check(not CUDA_LIBS.search(ldd), "ldd ctune-train lists no CUDA library", ldd)
check(os.path.exists(PLUGIN), "the plugin is built at " + PLUGIN)
pl = subprocess.run(["ldd", PLUGIN], capture_output=True, text=True).stdout
check("libcudart" in pl and "libcublas" in pl,
      "the plugin is what links cudart and cublas", pl)

if not os.path.isdir(DATA):
    print("SKIP: %s missing" % DATA)
    sys.exit(77)

env = dict(os.environ, LD_DEBUG="files")
p = subprocess.run([TRAIN, "--device", "cpu"] + SMALL, env=env,
                   capture_output=True, text=True, timeout=60)
check(p.returncode == 0, "a cpu run trains", p.stderr[-2000:])
check("libctune-cuda" not in p.stderr and not CUDA_LIBS.search(p.stderr),
      "a cpu run loads neither the plugin nor any CUDA library")

with tempfile.TemporaryDirectory(prefix="ctune-noplugin-") as tmp:
    os.mkdir(os.path.join(tmp, "bin"))
    os.mkdir(os.path.join(tmp, "lib"))
    exe = os.path.join(tmp, "bin", "ctune-train")
    shutil.copy2(TRAIN, exe)
    # no CUDA library can be found from here: an empty library path and no
    # plugin next to the executable
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(tmp, "lib"))
    p = subprocess.run([exe] + SMALL, env=env, capture_output=True, text=True,
                       timeout=60)
    check(p.returncode == 0 and '"training_iteration": 1' in p.stdout,
          "a copy without any plugin trains on the cpu", p.stderr[-2000:])
    p = subprocess.run([exe, "--device", "cuda"] + SMALL, env=env,
                       capture_output=True, text=True, timeout=60)
    e = error(p)
    check(p.returncode == 7 and e and e["code"] == "no_device"
          and "libctune-cuda.so not found" in e["message"],
          "--device cuda without the plugin: exit 7 naming it: %s"
          % (e and e["message"]), p.stderr)
    # a plugin that cannot load: one that needs a library which is not there
    broken = os.path.join(tmp, "lib", "libctune-cuda.so")
    with open(os.path.join(tmp, "b.c"), "w") as f:
        f.write("extern int ctune_missing_symbol(void);\n"
                "int f(void) { return ctune_missing_symbol(); }\n")
    cc = subprocess.run(["cc", "-shared", "-fPIC", "-o", broken,
                         os.path.join(tmp, "b.c"), "-L" + tmp, "-Wl,--no-as-needed", "-lnotthere"],
                        capture_output=True, text=True)
    if cc.returncode != 0:
        # no such library to link against: make one, link, then remove it
        subprocess.run(["cc", "-shared", "-fPIC", "-o",
                        os.path.join(tmp, "libnotthere.so"), "-x", "c",
                        "/dev/null"], check=True)
        subprocess.run(["cc", "-shared", "-fPIC", "-o", broken,
                        os.path.join(tmp, "b.c"), "-L" + tmp, "-Wl,--no-as-needed", "-lnotthere"],
                       check=True)
        os.unlink(os.path.join(tmp, "libnotthere.so"))
    p = subprocess.run([exe, "--device", "cuda"] + SMALL, env=env,
                       capture_output=True, text=True, timeout=60)
    e = error(p)
    check(p.returncode == 7 and e and "libnotthere.so" in e["message"]
          and "cannot load the CUDA backend" in e["message"],
          "an unloadable plugin: exit 7 with dlerror's sentence: %s"
          % (e and e["message"]), p.stderr)
