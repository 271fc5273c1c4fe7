"""Lightning's own BoringModel demo on several nodes, started by Lightning's own launcher.

ddptui runs it with `launcher: env`: plain `python examples/lightning_boring.py` on each node
with MASTER_ADDR, MASTER_PORT, NODE_RANK and WORLD_SIZE set; Lightning then starts the node's
other processes itself (they carry LOCAL_RANK). Needs `pip install lightning`.

--fail R makes global rank R raise at training step --fail-step; --lines N has every process
print N lines as fast as it can (they share the node's stdout).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any

import torch
from lightning.pytorch import Trainer
from lightning.pytorch.demos.boring_classes import BoringModel


class Boring(BoringModel):
    def __init__(self, fail_rank: int | None, fail_step: int, lines: int) -> None:
        super().__init__()
        self.fail_rank, self.fail_step, self.lines = fail_rank, fail_step, lines

    def on_fit_start(self) -> None:
        t = self.trainer
        print(
            f"rank {t.global_rank}/{t.world_size} on {os.uname().nodename} "
            f"(node {t.node_rank}, local rank {t.local_rank})"
        )
        for i in range(self.lines):
            print(f"flood {t.global_rank} {i} {'x' * 60}")

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if self.global_rank == self.fail_rank and batch_idx == self.fail_step:
            raise RuntimeError(f"rank {self.global_rank} failed on purpose at step {batch_idx}")
        return super().training_step(batch, batch_idx)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--devices", type=int, default=2, help="processes per node")
    p.add_argument("--num-nodes", type=int, default=2)
    p.add_argument("--max-steps", type=int, default=8)
    p.add_argument("--fail", type=int, default=None, metavar="RANK", help="this rank raises")
    p.add_argument("--fail-step", type=int, default=2)
    p.add_argument("--lines", type=int, default=0, help="print this many lines per process")
    args = p.parse_args()
    trainer = Trainer(
        accelerator="cpu",
        devices=args.devices,
        num_nodes=args.num_nodes,
        strategy="ddp",
        max_steps=args.max_steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Boring(args.fail, args.fail_step, args.lines))
    if trainer.global_rank == 0:
        print("done", flush=True)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
    # As in train.py: gloo's C++ threads can race the interpreter's finalization and abort a
    # finished process ("terminate called without an active exception", seen here on torch
    # 2.13). Wait for the processes Lightning started on this node, then leave unfinalized.
    sys.stdout.flush()
    sys.stderr.flush()
    with contextlib.suppress(ChildProcessError):
        while True:
            os.wait()
    os._exit(0)
