"""A job that hangs on its first attempt only (DDPTUI_ATTEMPT says which): after a few steps,
HANG_RANK sleeps in a data loader that never returns, before an all_reduce every other rank
waits in (gloo). The next attempt runs every step and ends. With `nccl.flight_recorder: true`
each rank serves its flight recorder's dump pipe as NCCL's watchdog would (stall.py)."""

import os
import time

import torch
import torch.distributed as dist
from stall import serve_flight_recorder

STEPS = 5


def load_batch() -> None:
    """The first attempt's stall: a data loader that never returns."""
    while True:
        time.sleep(1)


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    serve_flight_recorder(rank)
    attempt = int(os.environ.get("DDPTUI_ATTEMPT", "0"))
    for step in range(STEPS):
        if attempt == 0 and step == 2 and rank == int(os.environ.get("HANG_RANK", "3")):
            load_batch()
        t = torch.ones(4)
        dist.all_reduce(t)
        print(f"rank {rank} step {step}: {t[0]:.0f}", flush=True)
        time.sleep(0.2)
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
