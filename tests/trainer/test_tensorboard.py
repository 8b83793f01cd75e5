#!/usr/bin/env python3
"""ctune-train --tensorboard-dir, read back by TensorBoard's own reader
(tests/cli/tb_read.py in the pinned venv ~/.cache/ctune/tensorboard-2.21.0
made by scripts/install-deps --test; the test FAILS when it is missing): per epoch
the scalars of the stdout line (same values as float32) and lr at step =
training_iteration, and a histogram of every layer's weights and biases
(sizes of the model's tensors, buckets summing to the count); a resumed run
appends; the flag changes nothing on stdout; bad values exit 2.

Usage: test_tensorboard.py BIN_DIR (or CTUNE_BIN_DIR). Writes its own tiny
Fashion-MNIST-shaped data set."""
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
HERE = os.path.dirname(os.path.abspath(__file__))
VENV_PY = os.path.expanduser("~/.cache/ctune/tensorboard-2.21.0/bin/python")
READER = os.path.join(HERE, "..", "cli", "tb_read.py")


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def write_idx(d, n, prefix, seed):
    """n 28x28 images whose class shows as a bright row, plus noise."""
    s = seed
    img = bytearray(struct.pack(">IIII", 0x803, n, 28, 28))
    lab = bytearray(struct.pack(">II", 0x801, n))
    for i in range(n):
        c = i % 10
        lab.append(c)
        for y in range(28):
            s = (s * 1103515245 + 12345) & 0xFFFFFFFF
            base = (s >> 16) % 64
            img.extend(bytes([min(255, base + (180 if y == c * 3 else 0))]) * 28)
    with gzip.open(os.path.join(d, prefix + "-images-idx3-ubyte.gz"), "wb") as f:
        f.write(bytes(img))
    with gzip.open(os.path.join(d, prefix + "-labels-idx1-ubyte.gz"), "wb") as f:
        f.write(bytes(lab))


def run(args):
    p = subprocess.run([TRAIN] + args, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def read_tb(logdir):
    r = subprocess.run([VENV_PY, READER, logdir], capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, f"TensorBoard's reader failed on {logdir}:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout)["runs"]


def no_times(lines):
    drop = ("time_this_iter_s", "time_total_s", "samples_per_s")
    return [{k: v for k, v in json.loads(l).items() if k not in drop} for l in lines.splitlines()]


def run_test(tmp):
    data = os.path.join(tmp, "data")
    os.mkdir(data)
    write_idx(data, 400, "train", 1)
    write_idx(data, 60, "t10k", 2)
    L1, L2 = 24, 12
    common = ["--model", "mlp", "--data-dir", data, "--l1", str(L1), "--l2", str(L2), "--train-limit", "300",
              "--test", "--lr", "0.05", "--batch-size", "32"]

    rc, out, _ = run(["--help"])
    check(rc == 0 and "--tensorboard-dir DIR" in out, f"--help names the flag: {out}")
    rc, out, err = run(common + ["--epochs", "1", "--tensorboard-dir"])
    check(rc == 2 and '"bad_config"' in err and "--tensorboard-dir" in err,
          f"missing value: {rc} {err}")
    afile = os.path.join(tmp, "afile")
    open(afile, "w").close()
    rc, out, err = run(common + ["--epochs", "1", "--tensorboard-dir", afile])
    check(rc == 2 and "--tensorboard-dir" in err and out == "", f"a file as the folder: {rc} {err}")

    # mlp: 2 epochs, then resumed to 3 (a second file in the same folder)
    tb = os.path.join(tmp, "tb", "mlp")
    ck = os.path.join(tmp, "ck")
    rc, out, err = run(common + ["--epochs", "2", "--tensorboard-dir", tb, "--checkpoint-dir", ck])
    check(rc == 0, f"mlp run: {rc} {err}")
    rc, plain, err = run(common + ["--epochs", "2"])
    check(rc == 0 and no_times(plain) == no_times(out),
          f"--tensorboard-dir changes the training:\n{plain}\n{out}")
    rc, out3, err = run(common + ["--epochs", "3", "--resume", "--checkpoint-dir", ck,
                                  f"--tensorboard-dir={tb}"])
    check(rc == 0, f"resumed run: {rc} {err}")
    lines = [json.loads(l) for l in (out + out3).splitlines()]
    check([l["training_iteration"] for l in lines] == [1, 2, 3], f"epochs: {lines}")

    runs = read_tb(tb)
    check(list(runs) == ["."], f"one run: {list(runs)}")
    r = runs["."]
    check(r["files"] == 2 and r["file_version"] == ["brain.Event:2"] * 2,
          f"two files, each starting with file_version: {r['files']} {r['file_version']}")
    sc = r["scalars"]
    for tag in ("loss", "accuracy", "train_loss", "test_accuracy"):  # printed with %.9g
        want = [[l["training_iteration"], f32(l[tag])] for l in lines]
        got = [p[:2] for p in sc.get(tag, [])]
        check(got == want, f"scalar {tag}: {got} != {want}")
    for tag, digits in (("samples_per_s", 0.051), ("time_this_iter_s", 5.1e-7)):  # %.1f, %.6f
        want = [[l["training_iteration"], l[tag]] for l in lines]
        got = [p[:2] for p in sc.get(tag, [])]
        check([g[0] for g in got] == [w[0] for w in want] and
              all(abs(g[1] - w[1]) <= digits + 1e-6 * abs(w[1]) for g, w in zip(got, want)),
              f"scalar {tag}: {got} != {want}")
    check([p[:2] for p in sc["lr"]] == [[1, f32(0.05)], [2, f32(0.05)], [3, f32(0.05)]],
          f"lr: {sc['lr']}")
    sizes = {"fc1/weight": 784 * L1, "fc1/bias": L1, "fc2/weight": L1 * L2, "fc2/bias": L2,
             "fc3/weight": L2 * 10, "fc3/bias": 10}
    hs = r["histograms"]
    check(set(hs) == set(sizes), f"histogram tags: {sorted(hs)}")
    for tag, n in sizes.items():
        check([h["step"] for h in hs[tag]] == [1, 2, 3], f"{tag} steps: {[h['step'] for h in hs[tag]]}")
        for h in hs[tag]:
            check(h["num"] == n and sum(h["bucket"]) == n, f"{tag}: num {h['num']} buckets "
                  f"{sum(h['bucket'])}, wanted {n}")
            check(h["min"] <= h["max"] and h["bucket_limit"][-1] == h["max"] and
                  h["bucket_limit"] == sorted(h["bucket_limit"]), f"{tag}: edges {h}")
            check(h["sum_squares"] >= 0 and abs(h["sum"]) <= n * max(abs(h["min"]), abs(h["max"])) + 1e-9,
                  f"{tag}: sums {h}")
    w = hs["fc1/weight"]
    check(w[0]["sum_squares"] != w[1]["sum_squares"], "the weights change between epochs")

    # cnn: the conv layers get histograms too
    tb2 = os.path.join(tmp, "tb", "cnn")
    rc, out, err = run(common + ["--model", "cnn", "--epochs", "1", "--tensorboard-dir", tb2])
    check(rc == 0, f"cnn run: {rc} {err}")
    hs = read_tb(tb2)["."]["histograms"]
    check({"conv1/weight", "conv1/bias", "conv2/weight", "conv2/bias", "fc3/bias"} <= set(hs),
          f"cnn histograms: {sorted(hs)}")


def main():
    if not os.access(VENV_PY, os.X_OK):
        print(f"FAIL: TensorBoard's reader is missing: {VENV_PY} (run scripts/install-deps --test)")
        return 1
    if not os.access(TRAIN, os.X_OK):
        print(f"FAIL: no {TRAIN}")
        return 1
    tmp = tempfile.mkdtemp(prefix="ctune-train-tb-")
    try:
        run_test(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("ok: ctune-train --tensorboard-dir read back by TensorBoard")
    return 0


if __name__ == "__main__":
    sys.exit(main())
