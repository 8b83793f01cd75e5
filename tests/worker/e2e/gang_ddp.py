"""A PyTorch DDP trainable for the gang e2e test: an unmodified
init_process_group("gloo") from torchrun's variables, a tiny model whose
gradients are averaged by DDP's allreduce, rank 0's checkpoint restored on
every member. usage: gang_ddp.py ITERATIONS [HOLD_FILE]. While HOLD_FILE
exists, rank 0 waits after its first checkpoint (a test kills a worker
then)."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist

iters = int(sys.argv[1])
hold = sys.argv[2] if len(sys.argv) > 2 else None
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
ck = os.path.join(os.environ["CTUNE_CHECKPOINT_DIR"], "checkpoint.bin")
start = 0
if os.environ.get("CTUNE_RESUME") == "1" and os.path.exists(ck):
    with open(ck) as f:
        start = json.load(f)["iter"]
# Every member restored the same checkpoint: the sum is world * start.
seen = torch.tensor([float(start)])
dist.all_reduce(seen)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1, 1, bias=False))
opt = torch.optim.SGD(model.parameters(), lr=0.0)
for it in range(start + 1, iters + 1):
    # Each rank's gradient is its rank + 1: DDP averages them.
    loss = model(torch.ones(1, 1)).sum() * 0 + (rank + 1) * model.module.weight.sum()
    opt.zero_grad()
    loss.backward()
    grad = model.module.weight.grad.item()
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    if rank == 0:
        with open(ck + ".tmp", "w") as f:
            json.dump({"iter": it}, f)
        os.replace(ck + ".tmp", ck)
        print(json.dumps({"training_iteration": it, "loss": 1.0 / it, "sum": total.item(),
                          "grad": grad, "world": world, "start": start,
                          "restored_everywhere": int(seen.item() == start * world),
                          "pid": os.getpid()}), flush=True)
        while hold and os.path.exists(hold):
            time.sleep(0.05)
    else:
        print("rank %d of %d: iteration %d sum %g pid %d" % (rank, world, it, total.item(),
                                                           os.getpid()), flush=True)
dist.barrier()
dist.destroy_process_group()
