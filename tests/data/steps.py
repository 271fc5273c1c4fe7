"""A training loop as many are written: `step N/T loss X` a step, a tracker's link on rank 0.

    python steps.py STEPS [--fail-rank R] [--step-time S]

Rank R fails at step 5 on the first attempt (DDPTUI_ATTEMPT 0), so job.restarts starts it
again; every rank says its W&B variables first. Standard library only.
"""

import argparse
import os
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("steps", type=int)
p.add_argument("--fail-rank", type=int, default=-1)
p.add_argument("--step-time", type=float, default=0.02)
p.add_argument("--bar", action="store_true", help="a tqdm-style bar on stderr instead of lines")
args = p.parse_args()
rank, attempt = int(os.environ.get("RANK", "0")), int(os.environ.get("DDPTUI_ATTEMPT", "0"))
names = ("WANDB_RUN_ID", "WANDB_RESUME", "WANDB_RUN_GROUP")
print("wandb env attempt {}: {}".format(attempt, " ".join(os.environ.get(n, "-") for n in names)))
if rank == 0:
    print("wandb: 🚀 View run fancy-sun-1 at: https://wandb.ai/team/proj/runs/x1", flush=True)
first = 10 if attempt else 1  # a second attempt resumes from a checkpoint at step 10
if args.bar:  # redrawn with \r, no newline until it closes, as tqdm does into a file
    for step in range(1, args.steps + 1):
        sys.stderr.write(f"\r{step * 100 // args.steps:3d}%|#| {step}/{args.steps} [00:01<00:02, ")
        sys.stderr.write(f"{1 / args.step_time:.2f}it/s]")
        sys.stderr.flush()
        time.sleep(args.step_time)
    sys.stderr.write("\n")
    sys.exit(0)
for step in range(first, args.steps + 1):
    if rank == args.fail_rank and attempt == 0 and step == 5:
        sys.exit(f"rank {rank} failed on purpose at step {step}")
    print(f"step {step}/{args.steps} loss {4.0 / step:.4f}", flush=True)
    time.sleep(args.step_time)
