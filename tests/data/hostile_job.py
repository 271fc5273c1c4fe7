"""A job whose text attacks whoever reads or shows it (issue 37), for the security e2e tests.

    python tests/data/hostile_job.py lines STOP   # rank 0: a 200 KB line of every hostile shape
                                                  # (tests/support/hostile.py), then waits;
                                                  # the others tick; all end once STOP exists
    python tests/data/hostile_job.py escapes      # terminal commands in a progress line, a
                                                  # tracker's link and the exception it dies of

No torch: torchrun or the env style starts it; RANK (or NODE_RANK) comes from its environment.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

LINE = 200_000  # bytes
CLIP = "\x1b]52;c;cm0gLXJmIH4=\x07"  # OSC 52: writes the clipboard
TITLE = "\x1b]0;pwned\x1b\\"  # OSC 0: the window's title
DCS = "\x1bPq#0;2;0;0;0\x1b\\"
APC = "\x1b_apc\x9c"
EVIL = f"{CLIP}a{TITLE}b{DCS}c{APC}d\x1b[2J\x9b2Je"  # shown, it reads `abcde`


def lines(rank: int, stop: Path) -> None:
    if rank == 0:
        sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
        from hostile import SHAPES, printed

        print("tick 0 0", flush=True)
        for line in SHAPES.values():
            print(printed(line, LINE), flush=True)  # the shape's head and its end
        print("hostile lines printed", flush=True)
    i = 0
    while not stop.exists():
        if rank:
            print(f"tick {rank} {i}", flush=True)
            i += 1
        time.sleep(0.05)


def escapes() -> None:
    print(f"step 1/2 loss 0.5 {EVIL}", flush=True)
    print(f"TensorBoard {EVIL} at http://localhost:6006/", flush=True)
    print(f"step 2/2 loss 0.25 {EVIL}", flush=True)
    raise ValueError(f"hostile {EVIL}")


def main() -> int:
    rank = int(os.environ.get("RANK", os.environ.get("NODE_RANK", "0")))  # torchrun, env
    if sys.argv[1] == "lines":
        lines(rank, Path(sys.argv[2]))
    else:
        escapes()
    return 0


if __name__ == "__main__":
    sys.exit(main())
