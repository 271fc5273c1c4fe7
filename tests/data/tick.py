"""A rank that prints numbered lines at a steady pace: `tick <rank> <i>`, for the lease tests.

    python tests/data/tick.py COUNT EVERY [FAIL_RANK]   # FAIL_RANK raises at the middle line

COUNT may be `FIRST/LATER`: FIRST lines in a run's first attempt, LATER after a restart.

No torch: torchrun (or nothing) starts it; RANK comes from its environment.
"""

from __future__ import annotations

import os
import sys
import time


def main() -> int:
    first, _, later = sys.argv[1].partition("/")
    restarted = os.environ.get("DDPTUI_ATTEMPT", "0") != "0"
    count, every = int(later if restarted and later else first), float(sys.argv[2])
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
