#!/usr/bin/env python3
"""ctune-train --data-cache as processes: three trials started at once build
one cache file (0700 directory, no temp files left), report the same losses
as a run without the cache, a fourth maps it without building; --help shows
the flag and a missing value is a usage error (exit 2).

Usage: e2e_datacache.py BIN_DIR (or CTUNE_BIN_DIR). Writes its own tiny
Fashion-MNIST-shaped data set.
"""
import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

BIN = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CTUNE_BIN_DIR", "build/bin")
TRAIN = os.path.join(BIN, "ctune-train")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def write_idx(d, n, prefix):
    s = 7
    img = bytearray(struct.pack(">IIII", 0x803, n, 28, 28))
    lab = bytearray(struct.pack(">II", 0x801, n))
    for i in range(n):
        c = i % 10
        lab.append(c)
        for y in range(28):
            s = (s * 1103515245 + 12345) & 0xFFFFFFFF
            img.extend(bytes([min(255, (s >> 16) % 64 + (180 if y == c * 3 else 0))]) * 28)
    with gzip.open(os.path.join(d, prefix + "-images-idx3-ubyte.gz"), "wb") as f:
        f.write(bytes(img))
    with gzip.open(os.path.join(d, prefix + "-labels-idx1-ubyte.gz"), "wb") as f:
        f.write(bytes(lab))


def losses(stdout):
    """The report lines without their timings."""
    out = []
    for line in stdout.splitlines():
        r = json.loads(line)
        for k in ("time_this_iter_s", "time_total_s", "samples_per_s"):
            r.pop(k, None)
        out.append(r)
    return out


def main():
    tmp = tempfile.mkdtemp(prefix="ctune-e2e-datacache-")
    try:
        data = os.path.join(tmp, "data")
        os.mkdir(data)
        write_idx(data, 400, "train")
        write_idx(data, 50, "t10k")
        cache = os.path.join(tmp, "work", "cache")
        args = [TRAIN, "--data-dir", data, "--model", "mlp", "--epochs", "2",
                "--l1", "16", "--l2", "8", "--seed", "3", "--test"]
        plain = subprocess.run(args, capture_output=True, text=True, timeout=60)
        check(plain.returncode == 0, f"plain run: {plain.stderr}")
        want = losses(plain.stdout)
        check(len(want) == 2, f"two reports: {plain.stdout}")
        procs = [subprocess.Popen(args + ["--data-cache", cache], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(3)]
        built = 0
        for p in procs:
            out, err = p.communicate(timeout=60)
            check(p.returncode == 0, f"cached run: {err}")
            check(losses(out) == want, f"same losses with the cache: {out} vs {want}")
            built += err.count("data cache: built")
        check(built == 2, f"train and test built once among 3 trials, got {built}")
        check(os.stat(cache).st_mode & 0o777 == 0o700, "cache dir is 0700")
        names = sorted(os.listdir(cache))
        check(len([n for n in names if n.endswith(".cache")]) == 2, f"two files: {names}")
        check(not [n for n in names if ".tmp." in n], f"no temp files: {names}")
        p = subprocess.run(args + [f"--data-cache={cache}"], capture_output=True, text=True,
                           timeout=60)
        check(p.returncode == 0 and losses(p.stdout) == want, f"mapped run: {p.stderr}")
        check("data cache: mapped" in p.stderr and "built" not in p.stderr,
              f"fourth trial maps: {p.stderr}")
        h = subprocess.run([TRAIN, "--help"], capture_output=True, text=True, timeout=10)
        check("--data-cache DIR" in h.stdout, "--help shows --data-cache")
        m = subprocess.run([TRAIN, "--data-cache"], capture_output=True, text=True, timeout=10)
        check(m.returncode == 2 and "missing value" in m.stderr, f"missing value: {m.stderr}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} failure(s)", file=sys.stderr)
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
