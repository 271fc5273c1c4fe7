"""A job whose STRAGGLER rank (none if unset) computes 30 % more each step than the others, which
wait for it in an all_reduce (gloo), for SECONDS; a line every 20 steps. Nothing in it tells
ddptui which rank is slow. LINE_EVERY: steps a line (0: silent until the end). DEVICE_MS: each step
also waits that long, as a rank waits for its GPU with its CPU free (scripts/bench_watch.py: a job
that leaves the host's cores to the rest)."""

import os
import time

import torch
import torch.distributed as dist

SECONDS = float(os.environ.get("SECONDS_", "150"))
WORK = int(os.environ.get("WORK", "200"))  # matrix products a step
DEVICE_S = float(os.environ.get("DEVICE_MS", "0")) / 1000
EVERY = int(os.environ.get("LINE_EVERY", "20"))  # steps a line; 0: none until the end


def main() -> None:
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank = dist.get_rank()
    slow = os.environ.get("STRAGGLER")
    work = int(WORK * 1.3) if slow is not None and rank == int(slow) else WORK
    a = torch.randn(128, 128)
    end, step = time.monotonic() + SECONDS, 0
    while True:
        for _ in range(work):
            a = torch.tanh(a @ a)
        if DEVICE_S:
            time.sleep(DEVICE_S)
        done = torch.tensor([float(time.monotonic() >= end)])
        dist.all_reduce(done)  # the gradients' all-reduce, and whether to stop
        step += 1
        if EVERY and step % EVERY == 0:
            print(f"rank {rank} step {step}", flush=True)
        if done.item():
            break
    print(f"rank {rank} done after {step} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
