"""A job that stalls the way real ones do: after one all_reduce, rank 3 (STALL_RANK) sleeps in a
function of its own (a data loader that never returns) while every other rank waits for it in a
barrier. On GPUs it runs on NCCL, whose own watchdog serves the flight recorder's pipe.

With the flight recorder's variables set (`nccl.flight_recorder: true`), each rank also plays
the part NCCL's watchdog plays for its dump pipe, which gloo on CPU lacks: it makes
`<TORCH_NCCL_DEBUG_INFO_PIPE_FILE><rank>.pipe` and, for each byte written there, writes its
real flight recorder trace (gloo keeps one: TORCH_FR_BUFFER_SIZE) to
`<TORCH_FR_DUMP_TEMP_FILE><rank>`, as NCCL's ranks do.
"""

import os
import pickle
import threading
import time

import torch
import torch.distributed as dist


def load_batch() -> None:
    """Rank 3's stall: a data loader that never returns."""
    while True:
        time.sleep(1)


def serve_flight_recorder(rank: int) -> None:
    pipe = os.environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
    # the newer name where ddptui set it alone (torch >= 2.11), else the old one
    trace = os.environ.get("TORCH_FR_DUMP_TEMP_FILE") or os.environ.get(
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
    )
    if not pipe or not trace:
        return
    path = f"{pipe}{rank}.pipe"
    os.mkfifo(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # as torch's reader: open for good

    def serve() -> None:
        while True:
            time.sleep(0.05)
            try:
                if not os.read(fd, 1):
                    continue
            except BlockingIOError:  # a writer opened it, and has not written yet
                continue
            dump = pickle.loads(torch._C._distributed_c10d._dump_fr_trace())
            # gloo names its default group "" in pg_config but "0" in its entries, which
            # torchfrtrace cannot match; NCCL's dumps key it "0", as done here.
            [config] = dump["pg_config"].values()
            dump["pg_config"] = {"0": {**config, "name": "0", "desc": "default_pg"}}
            with open(f"{trace}{rank}", "wb") as out:
                pickle.dump(dump, out)

    threading.Thread(target=serve, daemon=True).start()


def main() -> None:
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    if device.type == "cpu":
        serve_flight_recorder(rank)
    t = torch.ones(4, device=device)
    dist.all_reduce(t)
    print(f"rank {rank}: all_reduce done ({t[0]:.0f})", flush=True)
    if rank == int(os.environ.get("STALL_RANK", "3")):
        load_batch()
    else:
        dist.barrier()


if __name__ == "__main__":
    main()
