"""A plain torch.distributed all-reduce, nothing of ddptui's: bench_fabric.py's reference.

    torchrun ... scripts/plain_allreduce.py --bytes N --iters K

gloo (CPU) float32 zeros of N bytes: one warm-up, then K timed back to back on every rank.
Rank 0 prints one JSON line: its seconds per all-reduce, algbw = N / seconds, busbw = algbw *
2(n-1)/n (nccl-tests' definitions).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.distributed as dist


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bytes", type=int, required=True)
    p.add_argument("--iters", type=int, required=True)
    args = p.parse_args()
    dist.init_process_group("gloo")
    n = dist.get_world_size()
    t = torch.zeros(args.bytes // 4, dtype=torch.float32)
    dist.all_reduce(t)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(t)
    per = (time.perf_counter() - t0) / args.iters
    if dist.get_rank() == 0:
        algbw = args.bytes / per
        print(json.dumps({"seconds": per, "algbw": algbw, "busbw": algbw * 2 * (n - 1) / n}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
