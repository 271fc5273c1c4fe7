"""A torch job that saves its checkpoints where job.checkpoint says and resumes from
DDPTUI_CHECKPOINT, as the field's jobs do (gloo, one all_reduce a step).

    python checkpointed.py DIR [--steps N] [--fail first|all] [--save-time S]

Rank 0 says `step N/T loss X` each step and saves every 5th step to DIR/step_N.pt (written
aside, then renamed, as a careful job does); with --fail it exits 3 at step 12, on the first
attempt (first) or on every one (all). SIGTERM is caught: the ranks agree on it at the next
step (a MAX all_reduce of the flag, so every rank stops at the same step), rank 0 takes
--save-time seconds to save where it stands, and every rank ends.
"""

import argparse
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("dir")
p.add_argument("--steps", type=int, default=20)
p.add_argument("--step-time", type=float, default=0.1)
p.add_argument("--fail", choices=("none", "first", "all"), default="none")
p.add_argument("--save-time", type=float, default=0.0)
args = p.parse_args()
told = []
signal.signal(signal.SIGTERM, lambda *_: told.append(1))
dist.init_process_group("gloo")
rank, attempt = dist.get_rank(), int(os.environ["DDPTUI_ATTEMPT"])
resume = os.environ["DDPTUI_CHECKPOINT"]
start = torch.load(resume)["step"] if resume else 0
print(f"rank {rank} attempt {attempt} resumes from {resume or 'nothing'}", flush=True)
os.makedirs(args.dir, exist_ok=True)


def save(step):
    aside = os.path.join(args.dir, f".step_{step}.pt")
    torch.save({"step": step}, aside)
    os.rename(aside, os.path.join(args.dir, f"step_{step}.pt"))


for step in range(start + 1, args.steps + 1):
    stop = torch.tensor([float(bool(told))])
    dist.all_reduce(stop, op=dist.ReduceOp.MAX)
    if stop.item():
        if rank == 0:
            print(f"TERM at step {step - 1}: saving", flush=True)
            time.sleep(args.save_time)
            save(step - 1)
            print(f"saved step {step - 1}", flush=True)
        sys.exit(0)
    time.sleep(args.step_time)
    if rank == 0:
        print(f"step {step}/{args.steps} loss {1 / step:.3f}", flush=True)
        if step % 5 == 0:
            save(step)
        if step == 12 and (args.fail == "all" or (args.fail == "first" and attempt == 0)):
            sys.exit(3)
dist.destroy_process_group()
print(f"rank {rank} done", flush=True)
