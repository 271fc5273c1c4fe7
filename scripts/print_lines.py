"""Print N numbered lines as fast as Python can: the log-relay benchmark's rank.

    python scripts/print_lines.py 1000000     # or under torchrun: every rank prints N lines

Line i reads ``line <i> from rank <RANK>``, written in chunks so the printer costs little next to
the relay being measured. Standard library only.
"""

from __future__ import annotations

import os
import sys

CHUNK_LINES = 10_000


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    rank = os.environ.get("RANK", "0")
    out = sys.stdout
    for start in range(0, n, CHUNK_LINES):
        stop = min(start + CHUNK_LINES, n)
        out.write("".join(f"line {i} from rank {rank}\n" for i in range(start, stop)))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
