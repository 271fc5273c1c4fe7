"""A node's part as torchrun would run it, without torch: NPROC children, each a "rank" with
RANK, LOCAL_RANK, WORLD_SIZE and TORCHELASTIC_RUN_ID, reading the flight recorder's pipe (as torch
does once its process group exists) and writing a plain trace when poked. Rank 3 waits in a
function of its own, the others in `barrier`.

    python tests/data/fake_ranks.py NPROC
"""

import os
import pickle
import subprocess
import sys
import threading
import time


def rank_main(rank: int) -> None:
    pipe = os.environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
    # the newer name where ddptui set it alone (torch >= 2.11), else the old one
    trace = os.environ.get("TORCH_FR_DUMP_TEMP_FILE") or os.environ.get(
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
    )

    def dump_on_demand(fd: int) -> None:  # torch's pipe reader: never closed
        while True:
            time.sleep(0.02)
            try:
                poked = os.read(fd, 1)
            except BlockingIOError:
                continue
            if poked:
                with open(f"{trace}{rank}", "wb") as out:
                    pickle.dump({"version": "2.9", "rank": rank, "entries": []}, out)

    if pipe:
        os.mkfifo(f"{pipe}{rank}.pipe")
        fd = os.open(f"{pipe}{rank}.pipe", os.O_RDONLY | os.O_NONBLOCK)
        threading.Thread(target=dump_on_demand, args=(fd,), daemon=True).start()
    print(f"[{rank}]:ready", flush=True)
    load_batch() if rank == 3 else barrier()


def load_batch() -> None:
    time.sleep(300)


def barrier() -> None:
    time.sleep(300)


if __name__ == "__main__":
    if len(sys.argv) > 2:
        rank_main(int(sys.argv[2]))
    n, node = int(sys.argv[1]), int(os.environ["NODE_RANK"])
    kids = []
    for local in range(n):
        rank = node * n + local
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(local),
            "TORCHELASTIC_RUN_ID": "fake",
            "WORLD_SIZE": os.environ.get("WORLD_SIZE", ""),
        }
        kids.append(subprocess.Popen([sys.executable, __file__, str(n), str(rank)], env=env))
    for kid in kids:
        kid.wait()
