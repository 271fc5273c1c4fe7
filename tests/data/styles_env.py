"""Every launch style's view of its job, one line a process: `seen {json}` with its rank and world
as its process group has them, the sum of every rank (an all_reduce: the group is whole), the
host it runs on, and the environment variables DDPTUI_SHOW names. gloo, CPU only.

    python styles_env.py                       # torchrun, torch.distributed.launch: RANK...
    python styles_env.py --world_size N --rank K --init_method tcp://M:P   # spawn: 2 a node
    python styles_env.py --lightning N         # Lightning's own launcher: 2 a node, N nodes
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

PER_NODE = 2  # spawn's and Lightning's processes a node


def show(rank: int, world: int) -> None:
    total = torch.tensor([rank])
    dist.all_reduce(total)
    names = [n for n in os.environ.get("DDPTUI_SHOW", "").split(",") if n]
    said = {"rank": rank, "world": world, "sum": int(total), "host": os.uname().nodename,
            "env": {n: os.environ.get(n) for n in names}}  # fmt: skip
    # One write a line: the processes of a node share its stdout, and print() writes the text
    # and its newline apart (the exported script has no ddptui to keep lines whole).
    sys.stdout.write("seen " + json.dumps(said, sort_keys=True) + "\n")
    sys.stdout.flush()
    dist.barrier()


def leave() -> None:
    """Without finalizing: gloo's C++ threads can abort an interpreter's finalization
    ("terminate called without an active exception", torch 2.13; see examples/train.py)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def spawned(local: int, args: argparse.Namespace) -> None:
    rank, world = args.rank * PER_NODE + local, args.world_size * PER_NODE
    dist.init_process_group("gloo", init_method=args.init_method, world_size=world, rank=rank)
    show(rank, world)
    dist.destroy_process_group()
    leave()


def lightning(nodes: int) -> None:
    from lightning.pytorch import Trainer
    from lightning.pytorch.demos.boring_classes import BoringModel

    class Shown(BoringModel):
        def on_fit_start(self) -> None:
            show(self.trainer.global_rank, self.trainer.world_size)

    trainer = Trainer(accelerator="cpu", devices=PER_NODE, num_nodes=nodes, strategy="ddp",
                      max_steps=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(Shown())
    with contextlib.suppress(ChildProcessError):  # the node's other processes, Lightning's
        while True:
            os.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--world_size", type=int)
    p.add_argument("--rank", type=int)
    p.add_argument("--init_method")
    p.add_argument("--lightning", type=int, metavar="NODES")
    args = p.parse_args()
    if args.init_method:
        mp.spawn(spawned, nprocs=PER_NODE, args=(args,))
    elif args.lightning:
        lightning(args.lightning)
    else:
        dist.init_process_group("gloo")
        show(dist.get_rank(), dist.get_world_size())
        dist.destroy_process_group()
    leave()


if __name__ == "__main__":
    main()
