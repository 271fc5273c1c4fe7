"""What tests/data/hangs/recorded_stacks.json was recorded from (py-spy dump --json --nonblocking
of each rank, 3 ranks under torchrun, gloo): rank 1 sleeps at the top level, the others wait for
it in an all_reduce, or (WHERE=ddp) in DDP's backward."""

import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DistributedDataParallel(torch.nn.Linear(64, 64))
for _ in range(3):
    model(torch.randn(32, 64)).sum().backward()
print(f"rank {rank} warm", flush=True)
if rank == 1:
    while True:
        time.sleep(1)
elif os.environ.get("WHERE") == "ddp":
    model(torch.randn(32, 64)).sum().backward()
else:
    dist.all_reduce(torch.ones(4))
