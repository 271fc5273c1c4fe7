"""A DDP job that starts its own processes with torch.multiprocessing.spawn.

The shape of the common "main.py" example (ImageNet, ModelArts): the script is started once per
node and told the node count, its node rank and the rendezvous address; it spawns one process
per GPU (or --nprocs on CPU) and computes each global rank itself. ddptui runs it with
`launcher: spawn`:
    python examples/spawn_main.py --world_size 2 --rank 0 --init_method tcp://10.0.0.1:29500

--fail R makes global rank R raise at --fail-step (for trying ddptui's failure handling);
--lines N has every process print N lines as fast as it can (they share the node's stdout).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--world_size", type=int, default=1, help="number of nodes")
    p.add_argument("--rank", type=int, default=0, help="this node's rank")
    p.add_argument("--init_method", default="tcp://127.0.0.1:29500")
    p.add_argument("--nprocs", type=int, default=0, help="processes per node (0: GPUs, else 2)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--samples", type=int, default=512)
    p.add_argument("--fail", type=int, default=None, metavar="RANK", help="this rank raises")
    p.add_argument("--fail-step", type=int, default=3)
    p.add_argument("--lines", type=int, default=0, help="print this many lines per process")
    return p.parse_args()


def worker(local_rank: int, nprocs: int, args: argparse.Namespace) -> None:
    # The usual convention of these scripts: node rank * processes per node + local index.
    rank = args.rank * nprocs + local_rank
    world = args.world_size * nprocs
    if torch.cuda.is_available():
        device, backend = torch.device("cuda", local_rank), "nccl"
        torch.cuda.set_device(device)
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend, init_method=args.init_method, world_size=world, rank=rank)
    print(
        f"rank {rank}/{world} on {os.uname().nodename} (node {args.rank}, local rank {local_rank})"
    )
    for i in range(args.lines):
        print(f"flood {rank} {i} {'x' * 60}")
    torch.manual_seed(0)
    x = torch.randn(args.samples, 16)
    data = TensorDataset(x, x @ torch.randn(16, 1))
    sampler = DistributedSampler(data, num_replicas=world, rank=rank)
    model = DDP(
        torch.nn.Linear(16, 1).to(device),
        device_ids=[local_rank] if device.type == "cuda" else None,
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    step = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for xb, yb in DataLoader(data, batch_size=32, sampler=sampler):
            step += 1
            if rank == args.fail and step == args.fail_step:
                raise RuntimeError(f"rank {rank} failed on purpose at step {step}")
            loss = torch.nn.functional.mse_loss(model(xb.to(device)), yb.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
        if rank == 0:
            print(f"epoch {epoch}: loss {loss.item():.4f}")
    # NCCL's barrier warns on every rank unless told its GPU
    dist.barrier(device_ids=[device.index] if device.type == "cuda" else None)
    if rank == 0:
        print("done")
    dist.destroy_process_group()
    # mp.spawn's children finalize the interpreter on return, where gloo's C++ threads can
    # abort them ("terminate called without an active exception", torch 2.13; see train.py):
    # the work is done, so leave without finalizing.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main() -> None:
    args = parse_args()
    nprocs = args.nprocs or torch.cuda.device_count() or 2
    mp.spawn(worker, nprocs=nprocs, args=(nprocs, args))


if __name__ == "__main__":
    main()
