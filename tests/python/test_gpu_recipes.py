#!/usr/bin/env python3
"""The GPU recipes' example (examples/gpu/train_gpu.py, docs/recipes.md) on
the CPU with gloo, started as a gang's members are: torchrun's variables
(WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR,
MASTER_PORT) and the trial's own (CTUNE_*), one process per member.

- 2 and 4 members: DDP's allreduce keeps every member's weights equal while
  each trains on its own shard, only rank 0's results reach stdout (the
  others' go to stderr), only rank 0 saves a checkpoint;
- one process with a fractional gpu's CTUNE_GPU_MEM_LIMIT_MB: trains and
  reports; the out-of-memory pattern halves the batch until it fits and
  re-raises when even the smallest does not;
- the experiments' JSON asks for what its recipe says.

No ctune binary runs (the gang branch of the worker is what starts members
for real). Needs /usr/bin/python3 with Debian's torch; exits 77 without."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
GPU = os.path.join(REPO, "examples", "gpu")
SCRIPT = os.path.join(GPU, "train_gpu.py")
PY = "/usr/bin/python3"
sys.path.insert(0, os.path.join(REPO, "python", "tests"))
from ctune_procs import check_procs as check, free_port  # noqa: E402
CONFIG = {"epochs": 2, "samples": 256, "batch_size": 64}

OOM_CHECK = r'''
import sys, torch
sys.path.insert(0, sys.argv[1])
import train_gpu
tried = []
def step(bs):
    tried.append(bs)
    if bs > 16:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
    return bs * 10
assert train_gpu.oom_retry(step, 64) == (160, 16), tried
assert tried == [64, 32, 16], tried
try:
    train_gpu.oom_retry(step, 64, min_batch_size=32)
    raise SystemExit("no batch fits but oom_retry returned")
except torch.cuda.OutOfMemoryError:
    pass
print("oom pattern ok", file=sys.stderr)
train_gpu.main()
'''


def trial_env(tmp, name, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CTUNE_") and k not in ("WORLD_SIZE", "RANK", "MASTER_PORT")}
    ck = os.path.join(tmp, name)
    os.makedirs(ck)
    env.update(PYTHONPATH=os.path.join(REPO, "python"), PYTHONUNBUFFERED="1",
               OMP_NUM_THREADS="1", CTUNE_TRIAL_ID="1", CTUNE_CONFIG=json.dumps(CONFIG),
               CTUNE_CHECKPOINT_DIR=ck, CTUNE_RESUME="0", CTUNE_METRIC="loss",
               CUDA_VISIBLE_DEVICES="")
    env.update({k: str(v) for k, v in extra.items()})
    return env, ck


def start_members(tmp, world, nodes):
    """world members on `nodes` pretend hosts (NODE_RANK, LOCAL_RANK)."""
    port, per_node, procs = free_port(), world // nodes, []
    for rank in range(world):
        env, ck = trial_env(tmp, "w%d-r%d" % (world, rank), WORLD_SIZE=world, RANK=rank,
                            LOCAL_RANK=rank % per_node, LOCAL_WORLD_SIZE=per_node,
                            NODE_RANK=rank // per_node, MASTER_ADDR="127.0.0.1",
                            MASTER_PORT=port)
        procs.append((ck, subprocess.Popen([PY, SCRIPT], env=env, cwd=tmp, text=True,
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)))
    return procs


def finish(procs):
    out = []
    for ck, p in procs:
        so, se = p.communicate(timeout=100)  # main() kills them all on a timeout
        out.append((ck, subprocess.CompletedProcess(p.args, p.returncode, so, se)))
    return out


def lines(text):
    return [json.loads(l) for l in text.splitlines() if l.startswith("{")]


def check_members(world, done):
    ps = [p for _, p in done]
    check(all(p.returncode == 0 for p in ps), "%d members train" % world, ps)
    lead = [r for r in lines(ps[0].stdout) if "loss" in r]
    check(len(lead) == CONFIG["epochs"] and all(r["world_size"] == world for r in lead),
          "rank 0 reports each epoch (world_size %d)" % world, ps[:1])
    check(sum(1 for r in lines(ps[0].stdout) if "_checkpoint" in r) == CONFIG["epochs"]
          and os.path.exists(os.path.join(done[0][0], "checkpoint.bin")),
          "rank 0 saves each epoch's checkpoint", ps[:1])
    tag = "ctune: rank %d result: "
    for rank, (ck, p) in enumerate(done[1:], 1):
        check(p.stdout.strip() == "", "rank %d of %d sends no result" % (rank, world), [p])
        side = [json.loads(l[len(tag % rank):]) for l in p.stderr.splitlines()
                if l.startswith(tag % rank)]
        check([r["weights"] for r in side] == [r["weights"] for r in lead],
              "rank %d of %d has rank 0's weights after each epoch (the allreduce): %s"
              % (rank, world, [r["weights"] for r in side]), [ps[0], p])
        check([r["loss"] for r in side] == [r["loss"] for r in lead],
              "rank %d of %d reports the whole epoch's loss" % (rank, world), [ps[0], p])
        check(not os.listdir(ck), "rank %d of %d saves no checkpoint" % (rank, world), [p])
    return lead


def check_configs():
    want = {"four_per_gpu.json": {"cpu": 1, "gpu": 0.25},
            "ddp_2gpu.json": {"num_workers": 2, "cpu": 1, "gpu": 1},
            "ddp_16gpu.json": {"num_workers": 16, "cpu": 4, "gpu": 1},
            "builtin_2x4gpu.json": {"num_workers": 2, "cpu": 8, "gpu": 4}}
    for name, res in want.items():
        with open(os.path.join(GPU, name)) as f:
            exp = json.load(f)
        check(exp["resources_per_trial"] == res, "%s asks for %s" % (name, res))
        argv = exp["trainable"].get("argv")
        check(exp["trainable"]["type"] == "builtin"
              or (argv[0] == PY and os.path.exists(os.path.join(REPO, argv[1]))),
              "%s runs the recipe's script" % name)


def main():
    if subprocess.run([PY, "-c", "import torch.distributed as d; assert d.is_gloo_available()"],
                      capture_output=True).returncode:
        print("SKIP: %s has no torch with gloo (Debian's python3-torch)" % PY)
        return 77
    check_configs()
    with tempfile.TemporaryDirectory(prefix="ctune-gpu-recipes-") as tmp:
        env, ck = trial_env(tmp, "share", CTUNE_GPU_MEM_LIMIT_MB=2048)
        single = subprocess.Popen([PY, "-c", OOM_CHECK, GPU], env=env, cwd=tmp, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        two = start_members(tmp, 2, 1)   # 2 GPUs of one machine
        four = start_members(tmp, 4, 2)  # 2 machines of 2 GPUs
        try:
            so, se = single.communicate(timeout=100)
            one = subprocess.CompletedProcess(single.args, single.returncode, so, se)
            check(one.returncode == 0 and "oom pattern ok" in one.stderr,
                  "the out-of-memory pattern halves the batch, then gives up", [one])
            res = [r for r in lines(one.stdout) if "loss" in r]
            check(len(res) == CONFIG["epochs"] and res[-1]["loss"] < res[0]["loss"],
                  "one process on a memory share trains (loss %s)" % [r["loss"] for r in res],
                  [one])
            check_members(2, finish(two))
            check_members(4, finish(four))
        finally:  # a failed check or a timeout leaves no process behind
            for p in [single] + [q for _, q in two + four]:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
