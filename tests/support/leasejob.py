"""A job for the GPU leases' tests: each rank joins the group (gloo), notes when it ran and on
which GPUs (its CUDA_VISIBLE_DEVICES) in OUT, holds them until OUT/GO exists (the test says
when: no timing to guess on a loaded machine; 300 s at most), then leaves with the others.
A world of one (launcher: env on one GPU, the default run's lean test) joins no group: torch's
import alone would cost it seconds; nor does a rank with LEASEJOB_GROUP=0 (scripts/bench_lease.py:
128 ranks' imports of torch would load the machine, not the lease).

    python leasejob.py OUT GO

OUT/<run id>-r<rank>.json: {run_id, rank, host, user, cvd, start, end} (this machine's clock:
the test hosts share it, so intervals of different runs compare).
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import sys
import time


def main() -> None:
    out, go = sys.argv[1], sys.argv[2]
    world = int(os.environ.get("WORLD_SIZE", "1"))
    group = world > 1 and os.environ.get("LEASEJOB_GROUP") != "0"
    if group:
        import torch.distributed as dist

        dist.init_process_group("gloo")
    rank = int(os.environ.get("RANK", os.environ.get("NODE_RANK", "0")))  # launcher: env
    start = time.time()
    print(f"rank {rank}/{world} on {socket.gethostname()}", flush=True)
    deadline = start + 300
    while not os.path.exists(os.path.join(out, go)) and time.time() < deadline:
        time.sleep(0.1)
    if group:
        dist.barrier()
    note = {
        "run_id": os.environ.get("DDPTUI_RUN_ID"), "rank": rank, "host": socket.gethostname(),
        "user": getpass.getuser(), "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "start": start, "end": time.time(),
    }  # fmt: skip
    path = os.path.join(out, f"{note['run_id']}-r{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(note, f)
    os.replace(path + ".tmp", path)
    if group:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
