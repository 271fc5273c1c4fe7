"""A rank that prints numbered lines at a steady pace: `tick <rank> <i>`, for the lease tests.

    python tests/data/tick.py COUNT EVERY [FAIL_RANK]   # FAIL_RANK raises at the middle line

No torch: torchrun (or nothing) starts it; RANK comes from its environment.
"""

from __future__ import annotations

import os
import sys
import time


def main() -> int:
    count, every = int(sys.argv[1]), float(sys.argv[2])
    fail = int(sys.argv[3]) if len(sys.argv) > 3 else None
    rank = int(os.environ.get("RANK", "0"))
    for i in range(count):
        print(f"tick {rank} {i}", flush=True)
        if rank == fail and i == count // 2:
            raise RuntimeError(f"rank {rank} failed on purpose at tick {i}")
        time.sleep(every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
