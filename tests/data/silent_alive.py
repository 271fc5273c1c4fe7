"""A job silent but alive for minutes, three times over, that no hang watch may take for hung
(gloo): a first step whose DataLoader workers load for SILENT_S while every rank waits on them;
rank 0 writing a checkpoint for SILENT_S while the others wait in a barrier; an evaluation of
SILENT_S on every rank, printing nothing. A line between the three, and one at the end."""

import os
import tempfile
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

SILENT_S = float(os.environ.get("SILENT_S", "90"))
CHUNK = 8 << 20  # bytes of one write of the checkpoint


class SlowData(Dataset[torch.Tensor]):
    """Each item costs its worker SILENT_S / 2 of CPU: the first batch takes SILENT_S."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> torch.Tensor:
        end = time.monotonic() + SILENT_S / 2
        x = torch.zeros(64)
        while time.monotonic() < end:
            x += torch.randn(64)
        return x


def burn(seconds: float) -> float:
    end, total = time.monotonic() + seconds, 0.0
    while time.monotonic() < end:
        total += float(torch.randn(256, 256).sum())
    return total


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    batch = next(iter(DataLoader(SlowData(), batch_size=2, num_workers=1)))
    dist.all_reduce(batch)
    print(f"rank {rank}: first step done", flush=True)
    if rank == 0:  # the checkpoint: written in pieces, slowly
        with tempfile.TemporaryFile() as f:
            end = time.monotonic() + SILENT_S
            while time.monotonic() < end:
                f.write(os.urandom(CHUNK))
                time.sleep(0.5)
    dist.barrier()
    print(f"rank {rank}: checkpoint written", flush=True)
    burn(SILENT_S)  # the evaluation
    dist.barrier()
    print(f"rank {rank}: evaluated; done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
