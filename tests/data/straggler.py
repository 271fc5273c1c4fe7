"""A job whose STRAGGLER rank (none if unset) is slower than the others, which wait for it in an
all_reduce (gloo), for SECONDS; a line every 20 steps. Nothing in it tells ddptui which rank is
slow. The straggler either computes 30 % more each step (the default), or, with INPUT_MS, sleeps
that much longer before the all_reduce, as a rank waiting on a slow disk or DataLoader does.
LINE_EVERY: steps a line (0: silent until the end). DEVICE_MS: each step also waits that long,
as a rank waits for its GPU with its CPU free (scripts/bench_watch.py: a job that leaves the
host's cores to the rest; WORK=0 DEVICE_MS=1000: steps of a second, every rank asleep all along).
FIRST_STEP_FILE: rank 0 writes there when its first step ended (time.time()). TERM_S: the
straggler, told to stop (SIGTERM), takes that long to leave, as a rank finishing a save does."""

import os
import signal
import sys
import time

import torch
import torch.distributed as dist

SECONDS = float(os.environ.get("SECONDS_", "150"))
WORK = int(os.environ.get("WORK", "200"))  # matrix products a step
DEVICE_S = float(os.environ.get("DEVICE_MS", "0")) / 1000
INPUT_S = float(os.environ.get("INPUT_MS", "0")) / 1000
EVERY = int(os.environ.get("LINE_EVERY", "20"))  # steps a line; 0: none until the end
TERM_S = float(os.environ.get("TERM_S", "0"))


def leave(*_: object) -> None:
    time.sleep(TERM_S)
    sys.exit(143)


def main() -> None:
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank = dist.get_rank()
    slow = os.environ.get("STRAGGLER")
    slow = slow is not None and rank == int(slow)
    if slow and TERM_S:
        signal.signal(signal.SIGTERM, leave)
    work = int(WORK * 1.3) if slow and not INPUT_S else WORK
    a = torch.randn(128, 128)
    end, step = time.monotonic() + SECONDS, 0
    while True:
        for _ in range(work):
            a = torch.tanh(a @ a)
        if DEVICE_S:
            time.sleep(DEVICE_S)
        if slow and INPUT_S:
            time.sleep(INPUT_S)  # its next batch, late
        done = torch.tensor([float(time.monotonic() >= end)])
        dist.all_reduce(done)  # the gradients' all-reduce, and whether to stop
        step += 1
        if step == 1 and rank == 0 and os.environ.get("FIRST_STEP_FILE"):
            with open(os.environ["FIRST_STEP_FILE"], "w") as f:
                f.write(f"{time.time()}\n")
        if EVERY and step % EVERY == 0:
            print(f"rank {rank} step {step}", flush=True)
        if done.item():
            break
    print(f"rank {rank} done after {step} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
