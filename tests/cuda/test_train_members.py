#!/usr/bin/env python3
"""ctune-train as the member processes of one trial, on the CUDA test double.

Each member is started as torchrun (and ctune-worker for a gang trial)
starts it: WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT and its own
GPU(s). Rank 0 makes the NCCL id, the members meet on MASTER_PORT, and the
double's ncclCommInitRank / ncclAllReduce run across the processes (a hub on
a Unix socket). Checked: 2 members of 1 GPU and 2 members of 2 GPUs train
the model that one process with 2 (4) GPUs trains on the same global batch,
every member ends with the same weights (the same validation loss to the
last bit), only rank 0 prints results and saves the checkpoint; a multi-
member run on the CPU and bad variables are refused with a sentence.

usage: test_train_members.py PATH/TO/ctune-train-cudadouble"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "python", "tests"))
from ctune_procs import check_procs, free_port  # noqa: E402 (shared with tests/python)

EXE = os.path.abspath(sys.argv[1])
DATA = os.environ.get("CTUNE_DATA_DIR", "/usr/share/datasets/fashion-mnist")
CACHE = tempfile.TemporaryDirectory(prefix="ctune-members-cache-")
ARGS = ["--model", "mlp", "--l1", "64", "--l2", "32", "--dataset", "fashion-mnist",
        "--data-dir", DATA, "--lr", "0.05", "--momentum", "0.9", "--threads", "1",
        "--train-limit", "600", "--epochs", "2", "--batch-size", "64", "--seed", "3",
        "--data-cache", CACHE.name]


def check(cond, what, *procs):
    check_procs(cond, what, procs)


def env(gpus, **members):
    e = {k: v for k, v in os.environ.items()
         if k not in ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT")}
    e["CTUNE_MOCK_GPUS"] = str(gpus)
    e.update({k: str(v) for k, v in members.items()})
    return e


def run_one(args, gpus, **members):
    return subprocess.run([EXE] + args, env=env(gpus, **members), capture_output=True,
                          text=True, timeout=100)


def run_members(world, gpus, extra=(), ckdirs=None):
    """world member processes of gpus GPUs each; the last rank starts
    first, so the others' connections wait for rank 0 to listen."""
    port = free_port()
    procs = []
    for rank in reversed(range(world)):
        args = ["--device", "cuda", "--gpus", str(gpus)] + ARGS + list(extra)
        if ckdirs:
            args += ["--checkpoint-dir", ckdirs[rank]]
        procs.append(subprocess.Popen(
            [EXE] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env(gpus, WORLD_SIZE=world, RANK=rank, LOCAL_RANK=0, LOCAL_WORLD_SIZE=1,
                    NODE_RANK=rank, MASTER_ADDR="127.0.0.1", MASTER_PORT=port)))
    out = []
    for p in reversed(procs):
        try:
            so, se = p.communicate(timeout=100)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
                q.wait()
            raise
        out.append(subprocess.CompletedProcess(p.args, p.returncode, so, se))
    return out


def results(p):
    return [json.loads(l) for l in p.stdout.splitlines() if l.strip()]


def side_results(p, rank):
    tag = "rank %d result: " % rank
    return [json.loads(l[len(tag):]) for l in p.stderr.splitlines() if l.startswith(tag)]


def error(p):
    for line in p.stderr.splitlines():
        if line.startswith("{"):
            return json.loads(line).get("error")
    return None


def same_model(members, gpus_each):
    one = run_one(["--device", "cuda", "--gpus", str(len(members) * gpus_each)] + ARGS,
                  len(members) * gpus_each)
    ref = results(one)
    check(one.returncode == 0 and len(ref) == 2, "one process, %d GPUs"
          % (len(members) * gpus_each), one)
    lead = results(members[0])
    check(all(p.returncode == 0 for p in members) and len(lead) == 2,
          "%d members of %d GPU(s) train" % (len(members), gpus_each), *members)
    for rank, p in enumerate(members[1:], 1):
        check(p.stdout.strip() == "", "rank %d prints no result on stdout" % rank, p)
        side = side_results(p, rank)
        check([r["loss"] for r in side] == [r["loss"] for r in lead]
              and [r["accuracy"] for r in side] == [r["accuracy"] for r in lead],
              "rank %d ends each epoch with rank 0's weights (loss %s)"
              % (rank, [r["loss"] for r in side]), members[0], p)
    for a, b in zip(lead, ref):
        rel = abs(a["loss"] - b["loss"]) / b["loss"]
        check(rel < 1e-5, "epoch %d: the members train one process's model (loss %.7f vs "
              "%.7f, rel %.1e)" % (a["training_iteration"], a["loss"], b["loss"], rel),
              members[0], one)


def main():
    if not os.path.isdir(DATA):
        print("SKIP: %s missing" % DATA)
        return 77
    # refused before any data is read or device touched
    p = run_one(["--device", "cpu"] + ARGS, 0, WORLD_SIZE=2, RANK=0, MASTER_ADDR="127.0.0.1",
                MASTER_PORT=free_port())
    e = error(p)
    check(p.returncode == 2 and e and "WORLD_SIZE=2" in e["message"]
          and "needs the CUDA backend" in e["message"]
          and "asks for --device cpu" in e["message"],
          "a 2-member run on the CPU is refused: %s" % (e and e["message"]), p)
    p = run_one(["--device", "auto"] + ARGS, 0, WORLD_SIZE=2, RANK=0, MASTER_ADDR="127.0.0.1",
                MASTER_PORT=free_port())
    e = error(p)
    check(p.returncode == 2 and e and "no usable CUDA device here" in e["message"],
          "--device auto falling back to the CPU is refused too", p)
    p = run_one(["--device", "cuda"] + ARGS, 1, WORLD_SIZE=2, MASTER_ADDR="127.0.0.1",
                MASTER_PORT="1")
    e = error(p)
    check(p.returncode == 2 and e and "RANK is unset" in e["message"],
          "WORLD_SIZE without RANK is refused: %s" % (e and e["message"]), p)
    p = run_one(["--device", "cuda"] + ARGS, 1, WORLD_SIZE=2, RANK=2, MASTER_ADDR="x",
                MASTER_PORT="1")
    e = error(p)
    check(p.returncode == 2 and e and e["message"].startswith("RANK=2: expected an integer "
                                                              "from 0 to 1"),
          "RANK out of range names it: %s" % (e and e["message"]), p)
    p = run_one(["--device", "cuda", "--oom-retry"] + ARGS, 1, WORLD_SIZE=2, RANK=0,
                MASTER_ADDR="127.0.0.1", MASTER_PORT=free_port())
    e = error(p)
    check(p.returncode == 2 and e and "--oom-retry with WORLD_SIZE=2" in e["message"],
          "--oom-retry across members is refused", p)

    with tempfile.TemporaryDirectory(prefix="ctune-members-ck-") as ck:
        dirs = [os.path.join(ck, "r0"), os.path.join(ck, "r1")]
        members = run_members(2, 1, ckdirs=dirs)
        same_model(members, 1)
        check(os.path.exists(os.path.join(dirs[0], "checkpoint.bin"))
              and not os.path.exists(os.path.join(dirs[1], "checkpoint.bin")),
              "only rank 0 saves the checkpoint", *members)
    same_model(run_members(2, 2), 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
