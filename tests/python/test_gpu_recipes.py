#!/usr/bin/env python3
"""The GPU recipes' example (examples/gpu/train_gpu.py, docs/recipes.md) on
the CPU with gloo, started as a gang's members are: torchrun's variables
(WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR,
MASTER_PORT) and the trial's own (CTUNE_*), one process per member (forked
from one that imported torch once: the import is most of the cost).

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
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
GPU = os.path.join(REPO, "examples", "gpu")
PY = "/usr/bin/python3"
sys.path.insert(0, os.path.join(REPO, "python", "tests"))
from ctune_procs import check_procs as check, free_port  # noqa: E402
CONFIG = {"epochs": 2, "samples": 256, "batch_size": 64}

# One /usr/bin/python3 imports torch and the example once, then forks a
# process per trial or member (torch's import is most of a run's cost),
# each with its own environment, stdout and stderr, that runs the example's
# main() as its own process would. Prints each one's exit status as JSON.
LAUNCHER = r"""
import json, os, sys, traceback
try:
    import torch, torch.distributed as dist
    assert dist.is_gloo_available()
except Exception as e:
    print("SKIP: %s has no torch with gloo (Debian's python3-torch): %r" % (sys.executable, e))
    sys.exit(77)
sys.path.insert(0, sys.argv[1])
import train_gpu


def oom_check():
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


with open(sys.argv[2]) as f:
    jobs = json.load(f)
index = {}
for i, job in enumerate(jobs):
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.environ.clear()
            os.environ.update(job["env"])
            for fd, path in ((1, job["out"]), (2, job["err"])):
                out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(out, fd)
                os.close(out)
            if job["oom"]:
                oom_check()
            train_gpu.main()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    index[pid] = i
status = [None] * len(jobs)
for _ in jobs:
    pid, st = os.wait()
    status[index[pid]] = os.waitstatus_to_exitcode(st)
print(json.dumps(status))
"""


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
    return {"env": env, "ck": ck, "oom": False, "out": ck + ".out", "err": ck + ".err"}


def members(tmp, world, nodes):
    """world members on `nodes` pretend hosts (NODE_RANK, LOCAL_RANK)."""
    port, per_node = free_port(), world // nodes
    return [trial_env(tmp, "w%d-r%d" % (world, rank), WORLD_SIZE=world, RANK=rank,
                      LOCAL_RANK=rank % per_node, LOCAL_WORLD_SIZE=per_node,
                      NODE_RANK=rank // per_node, MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            for rank in range(world)]


def launch(tmp, jobs):
    """Runs the jobs at once; a CompletedProcess per job (None: skipped)."""
    spec = os.path.join(tmp, "jobs.json")
    with open(spec, "w") as f:
        json.dump(jobs, f)
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"), OMP_NUM_THREADS="1")
    p = subprocess.Popen([PY, "-c", LAUNCHER, GPU, spec], cwd=tmp, text=True, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        so, se = p.communicate(timeout=100)
    finally:  # a hung member (or launcher) leaves no process behind
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    if p.returncode == 77:
        print(so.strip())
        return None
    check(p.returncode == 0, "the launcher ran every job",
          [subprocess.CompletedProcess(p.args, p.returncode, so, se)])
    done = []
    for job, rc in zip(jobs, json.loads(so)):
        with open(job["out"]) as f, open(job["err"]) as g:
            done.append((job["ck"], subprocess.CompletedProcess(job["env"].get("RANK"), rc,
                                                                f.read(), g.read())))
    return done


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
    check_configs()
    with tempfile.TemporaryDirectory(prefix="ctune-gpu-recipes-") as tmp:
        share = trial_env(tmp, "share", CTUNE_GPU_MEM_LIMIT_MB=2048)
        share["oom"] = True
        two = members(tmp, 2, 1)   # 2 GPUs of one machine
        four = members(tmp, 4, 2)  # 2 machines of 2 GPUs
        done = launch(tmp, [share] + two + four)
        if done is None:
            return 77
        one = done[0][1]
        check(one.returncode == 0 and "oom pattern ok" in one.stderr,
              "the out-of-memory pattern halves the batch, then gives up", [one])
        res = [r for r in lines(one.stdout) if "loss" in r]
        check(len(res) == CONFIG["epochs"] and res[-1]["loss"] < res[0]["loss"],
              "one process on a memory share trains (loss %s)" % [r["loss"] for r in res],
              [one])
        check_members(2, done[1:3])
        check_members(4, done[3:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
