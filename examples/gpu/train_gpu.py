#!/usr/bin/python3
"""One PyTorch script for the GPU recipes of docs/recipes.md: a trial on a
share of a GPU, a DistributedDataParallel trial of several member processes
(on one machine or many), and the out-of-memory pattern. The data set and
model are tiny stand-ins (a synthetic classification problem and an MLP):
put yours in their place.

    ctune run examples/gpu/four_per_gpu.json     # "gpu": 0.25: four per GPU
    ctune run examples/gpu/ddp_2gpu.json         # num_workers 2, a GPU each
    ctune run examples/gpu/ddp_16gpu.json        # num_workers 16, many hosts

By hand, one process: python3 examples/gpu/train_gpu.py. As torchrun
would start it: torchrun --nproc-per-node 2 examples/gpu/train_gpu.py.

Each member process gets torchrun's variables (WORLD_SIZE, RANK,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and its CUDA_VISIBLE_DEVICES, so
init_process_group() needs no arguments. Without a GPU it runs on the CPU
with gloo, which is how `make test` runs it."""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import ctune

DEFAULTS = {"lr": 0.1, "momentum": 0.9, "batch_size": 64, "epochs": 3, "hidden": 32,
            "samples": 512, "features": 16, "classes": 4, "seed": 0}


def make_data(cfg):
    """A synthetic problem: labels from a fixed random linear map."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(cfg["samples"], cfg["features"], generator=g)
    w = torch.randn(cfg["features"], cfg["classes"], generator=g)
    return x, (x @ w).argmax(dim=1)


def oom_retry(step, batch_size, min_batch_size=1):
    """The out-of-memory pattern (ctune-train's --oom-retry for scripts):
    run step(batch_size); on torch.cuda.OutOfMemoryError free the cache,
    halve the batch and try again, down to min_batch_size. Returns
    (step's value, the batch size that fitted). Report the batch size with
    the result, so the trial's record says what it trained with."""
    while True:
        try:
            return step(batch_size), batch_size
        except torch.cuda.OutOfMemoryError:
            if batch_size // 2 < min_batch_size:
                raise  # even the smallest batch does not fit: fail the trial
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            print(f"out of GPU memory at batch_size {batch_size}: halving it", flush=True,
                  file=sys.stderr)
            batch_size //= 2


def main():
    cfg = ctune.get_config(DEFAULTS)
    ctx = ctune.get_context()
    if torch.cuda.is_available():
        # The worker gives each member its own GPU(s): device 0 here. Under
        # torchrun with every GPU visible, LOCAL_RANK picks this member's.
        device = torch.device("cuda", ctx.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        # "gpu": 0.25 => CTUNE_GPU_MEM_LIMIT_MB: hold PyTorch to that share
        ctune.torch_memory_fraction(device)
    else:
        device = torch.device("cpu")
    members = ctx.world_size > 1
    if members:
        # MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE come from the environment
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    torch.manual_seed(cfg["seed"])  # the same initial weights on every member
    model = nn.Sequential(nn.Linear(cfg["features"], cfg["hidden"]), nn.ReLU(),
                          nn.Linear(cfg["hidden"], cfg["classes"])).to(device)
    if members:
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[device] if device.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=cfg["momentum"])
    state = ctune.load_checkpoint()  # every member gets rank 0's checkpoint
    start = 0
    if state:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        ctune.apply_config(opt, cfg)
        start = state["epoch"]

    x, y = make_data(cfg)
    n = len(x)
    # Each member trains on its own 1/world_size of every epoch (what
    # DistributedSampler does); DDP averages the gradients across members.
    batch = cfg["batch_size"]
    per_member = max(1, batch // ctx.world_size)
    for epoch in range(start, cfg["epochs"]):
        order = torch.randperm(n, generator=torch.Generator().manual_seed(epoch))
        # every member takes as many rows (and so steps) as the others: a
        # member with one step more would wait alone in DDP's allreduce
        mine = order[:n - n % ctx.world_size][ctx.rank::ctx.world_size]
        total = 0.0
        for i in range(0, len(mine), per_member):
            idx = mine[i:i + per_member]

            def step(bs, idx=idx):
                # one optimiser step over idx in pieces of bs rows (gradient
                # accumulation keeps the step the same when bs shrinks)
                opt.zero_grad()
                loss_sum = 0.0
                for j in range(0, len(idx), bs):
                    part = idx[j:j + bs]
                    loss = F.cross_entropy(model(x[part].to(device)), y[part].to(device),
                                           reduction="sum") / len(idx)
                    loss.backward()
                    loss_sum += loss.item()
                opt.step()
                return loss_sum

            if members:  # a member may not halve alone: the others wait in allreduce
                total += step(per_member) * len(idx)
            else:
                loss, per_member = oom_retry(step, per_member)
                total += loss * len(idx)
        with torch.no_grad():
            acc = (model(x.to(device)).argmax(dim=1).cpu() == y).float().mean().item()
        train_loss = torch.tensor([total, float(len(mine))])
        if members:
            dist.all_reduce(train_loss)  # the whole epoch's loss, not this member's
        weights = sum(p.detach().double().sum().item() for p in model.parameters())
        # Every rank may call report(): only rank 0's result reaches the
        # trial (the others' lines go to its log), and only rank 0 saves.
        ctune.report(loss=train_loss[0].item() / train_loss[1].item(), accuracy=acc,
                     batch_size=per_member * ctx.world_size, weights=weights,
                     world_size=ctx.world_size,
                     checkpoint={"model": model.state_dict(), "opt": opt.state_dict(),
                                 "epoch": epoch + 1})
    if members:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
