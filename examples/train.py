"""A small DDP training job: synthetic regression, DistributedSampler, gloo on CPU, NCCL on GPUs.

Start it with torchrun (ddptui does that for you on every host):
    torchrun --nproc-per-node 2 examples/train.py --epochs 3

Flags for trying ddptui's failure handling: --fail-rank R makes rank R raise at --fail-step
(with --fail-attempt A, only in attempt A of the job: DDPTUI_ATTEMPT, job.restarts);
--step-time slows each step; --lines N has every rank print N extra lines (log relay benchmark).
--checkpoint PATH keeps the model after each epoch and, when the job is started again (a restart
after a failure), goes on from there.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--samples", type=int, default=1024)
    p.add_argument("--step-time", type=float, default=0.0, help="extra seconds per step")
    p.add_argument("--fail-rank", type=int, default=None, help="this global rank raises")
    p.add_argument("--fail-step", type=int, default=3)
    p.add_argument("--fail-attempt", type=int, default=None, help="only in this attempt")
    p.add_argument("--checkpoint", default=None, help="keep (and resume from) the model here")
    p.add_argument("--lines", type=int, default=0, help="print this many lines per rank")
    return p.parse_args()


def setup() -> tuple[int, int, torch.device]:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():  # each node on its own GPUs, one per local rank
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend)
    return rank, world, device


def main() -> None:
    args = parse_args()
    rank, world, device = setup()
    host = os.uname().nodename
    print(
        f"rank {rank}/{world} on {host} (node {os.environ.get('NODE_RANK', '?')}, "
        f"local rank {os.environ.get('LOCAL_RANK')}, {device})",
        flush=True,
    )
    for i in range(args.lines):
        print(f"line {i} from rank {rank}")
    sys.stdout.flush()

    torch.manual_seed(0)
    x = torch.randn(args.samples, 16)
    y = x @ torch.randn(16, 1) + 0.1 * torch.randn(args.samples, 1)
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)

    model = DDP(
        torch.nn.Linear(16, 1).to(device),
        device_ids=[device.index] if device.type == "cuda" else None,
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    # ddptui starts the job again after a failure (job.restarts): DDPTUI_ATTEMPT is 1, 2, ...
    attempt = int(os.environ.get("DDPTUI_ATTEMPT", "0"))
    first = 0
    if args.checkpoint and os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint, map_location=device)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        first = state["epoch"] + 1
        if rank == 0:
            print(f"attempt {attempt}: resuming after epoch {state['epoch']}", flush=True)
    fail = rank == args.fail_rank and args.fail_attempt in (None, attempt)
    step = 0
    for epoch in range(first, args.epochs):
        sampler.set_epoch(epoch)
        total = torch.zeros(2, device=device)
        for xb, yb in loader:
            step += 1
            if fail and step == args.fail_step:
                raise RuntimeError(f"rank {rank} failed on purpose at step {step}")
            loss = torch.nn.functional.mse_loss(model(xb.to(device)), yb.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += torch.stack([loss.detach() * len(xb), torch.tensor(len(xb), device=device)])
            time.sleep(args.step_time)
        dist.all_reduce(total)
        if rank == 0:
            print(f"epoch {epoch}: loss {total[0].item() / total[1].item():.4f}", flush=True)
            if args.checkpoint:  # whole or not at all: a rank killed mid-write leaves the last
                state = {"model": model.module.state_dict(), "opt": opt.state_dict()}
                torch.save({**state, "epoch": epoch}, args.checkpoint + ".tmp")
                os.replace(args.checkpoint + ".tmp", args.checkpoint)
    # NCCL's barrier warns on every rank unless told its GPU
    dist.barrier(device_ids=[device.index] if device.type == "cuda" else None)
    if rank == 0:
        print("done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except BaseException:  # a failing rank leaves at once too: its traceback, then exit 1
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    # Gloo's C++ threads can race the interpreter's finalization and abort a finished rank
    # ("terminate called without an active exception", seen here on torch 2.13; pytorch PR
    # 179291). The work is done and the group destroyed: leave without finalizing, as
    # multiprocessing's children do.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
