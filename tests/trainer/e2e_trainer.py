#!/usr/bin/env python3
"""ctune-train as a process: stdout holds only JSON lines, each failure has its
exit code and a one-line JSON error on stderr, SIGTERM saves a checkpoint and
exits 0, and a resumed run continues exactly where the stopped one was.

Usage: e2e_trainer.py BIN_DIR (or CTUNE_BIN_DIR). Writes its own tiny
Fashion-MNIST-shaped data set; needs nothing else.
"""
import gzip
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

BIN = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CTUNE_BIN_DIR", "build/bin")
TRAIN = os.path.join(BIN, "ctune-train")
procs = []
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


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


def run(args, timeout=60):
    p = subprocess.run([TRAIN] + args, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def error_line(stderr):
    """The JSON error object from the last stderr line, or None."""
    lines = [l for l in stderr.strip().splitlines() if l.startswith("{")]
    if not lines:
        return None
    try:
        return json.loads(lines[-1])["error"]
    except (ValueError, KeyError):
        return None


def results(stdout):
    out = []
    for line in stdout.splitlines():
        obj = json.loads(line)  # raises on anything that is not a JSON line
        out.append(obj)
    return out


def no_times(rs):
    drop = ("time_this_iter_s", "time_total_s", "samples_per_s")
    return [{k: v for k, v in r.items() if k not in drop} for r in rs]


def main():
    if not os.access(TRAIN, os.X_OK):
        print(f"SKIP: no {TRAIN}")
        return 77
    tmp = tempfile.mkdtemp(prefix="ctune-train-e2e-")
    try:
        data = os.path.join(tmp, "data")
        os.mkdir(data)
        write_idx(data, 2000, "train", 1)
        write_idx(data, 200, "t10k", 2)
        common = ["--data-dir", data, "--l1", "32", "--l2", "16"]

        # --version names the backends, on stdout
        rc, out, _ = run(["--version"])
        check(rc == 0 and re.match(r"ctune-train \S+ \(backends: cpu", out), f"--version: {rc} {out!r}")

        # stdout: exactly one JSON object per epoch with the contract's keys
        rc, out, err = run(common + ["--model", "mlp", "--epochs", "2", "--train-limit", "500", "--test"])
        check(rc == 0, f"mlp run exit {rc}: {err}")
        rs = results(out)
        check(len(rs) == 2, f"expected 2 result lines, got {out!r}")
        keys = {"training_iteration", "loss", "accuracy", "train_loss", "time_this_iter_s",
                "time_total_s", "samples_per_s", "test_accuracy"}
        check(all(keys <= set(r) for r in rs), f"missing keys in {rs}")
        check([r["training_iteration"] for r in rs] == [1, 2], "training_iteration counts 1, 2")

        # bad config: exit 2, one JSON line naming the key, nothing on stdout
        for args, key in ((["--config", '{"lr": "fast"}'], '"lr"'),
                          (["--config", '{"l1": 64, "colour": 1}'], '"colour"'),
                          (["--batch-size", "0"], "--batch-size"),
                          (["--optimizer", "rmsprop"], "--optimizer")):
            rc, out, err = run(common + args)
            e = error_line(err)
            check(rc == 2 and out == "" and e and e["code"] == "bad_config" and e["exit_code"] == 2
                  and key in e["message"], f"bad config {args}: rc {rc} err {err!r}")

        # missing data: exit 3
        rc, out, err = run(["--data-dir", os.path.join(tmp, "nope"), "--epochs", "1"])
        e = error_line(err)
        check(rc == 3 and e and e["code"] == "data_error" and "nope" in e["message"],
              f"missing data: rc {rc} {err!r}")

        # corrupt checkpoint: exit 4, and the file is left as it was
        ck = os.path.join(tmp, "ck-corrupt")
        os.mkdir(ck)
        with open(os.path.join(ck, "checkpoint.bin"), "wb") as f:
            f.write(b"CTUNECKP" + b"\x01" * 100)
        rc, out, err = run(common + ["--model", "mlp", "--epochs", "1", "--checkpoint-dir", ck, "--resume"])
        e = error_line(err)
        check(rc == 4 and e and e["code"] == "checkpoint_error", f"corrupt checkpoint: rc {rc} {err!r}")
        check(os.listdir(ck) == ["checkpoint.bin"], f"corrupt checkpoint dir: {os.listdir(ck)}")

        # diverged: exit 5, no half-written files
        ck = os.path.join(tmp, "ck-div")
        rc, out, err = run(common + ["--model", "mlp", "--lr", "10", "--weight-decay", "1",
                                     "--epochs", "3", "--checkpoint-dir", ck])
        e = error_line(err)
        check(rc == 5 and e and e["code"] == "diverged", f"diverged: rc {rc} {err!r}")
        check(not os.path.exists(ck) or set(os.listdir(ck)) <= {"checkpoint.bin"},
              f"diverged left {os.listdir(ck) if os.path.exists(ck) else None}")

        # --device cuda with no usable device: exit 7 (0 means a GPU is here)
        rc, out, err = run(common + ["--device", "cuda", "--epochs", "1", "--train-limit", "100"])
        e = error_line(err)
        check(rc == 0 or (rc == 7 and e and e["code"] == "no_device"), f"--device cuda: rc {rc} {err!r}")

        # SIGTERM after the first epoch's line: checkpoint, exit 0, then a
        # resumed run gives exactly the uninterrupted run's results
        args = common + ["--model", "cnn", "--batch-size", "2", "--epochs", "3", "--seed", "7"]
        rc, out, err = run(args, timeout=120)
        check(rc == 0, f"uninterrupted run: {rc} {err}")
        full = no_times(results(out))
        ck = os.path.join(tmp, "ck-term")
        p = subprocess.Popen([TRAIN] + args + ["--checkpoint-dir", ck], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        procs.append(p)
        first = p.stdout.readline()
        p.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        rest, err = p.communicate(timeout=30)
        check(p.returncode == 0, f"SIGTERM exit {p.returncode}: {err}")
        check(time.monotonic() - t0 < 5, "SIGTERM took more than 5 s")
        check(os.listdir(ck) == ["checkpoint.bin"], f"after SIGTERM: {os.listdir(ck)}")
        part1 = results(first + rest)
        rc, out, err = run(args + ["--checkpoint-dir", ck, "--resume"], timeout=120)
        check(rc == 0, f"resume exit {rc}: {err}")
        both = no_times(part1 + results(out))
        check(both == full, f"resumed run differs:\n{both}\nvs\n{full}")
        check(len(part1) < 3, "SIGTERM arrived after the run had finished")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
