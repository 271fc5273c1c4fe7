"""A ddptui command with every event it emits timestamped, to see where a launch's time goes.

    .venv/bin/python scripts/timeline.py OUT.tsv -- --headless launch -i inv.yaml
    .venv/bin/python scripts/timeline.py --summary OUT.tsv

Each line of OUT.tsv: seconds since the start, the event's kind (a HostState's with its state),
its host. The summary gives each kind's count, first, median and last time.
"""

from __future__ import annotations

import atexit
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's ddptui

T0 = time.monotonic()


def record(path: str, argv: list[str]) -> int:
    from ddptui.remote.run import runner as run
    from ddptui.tui.cli import main

    out = open(path, "w")  # noqa: SIM115 (closed at exit: the command may os._exit)
    atexit.register(out.close)
    emit = run.Run.emit

    def timed(self: run.Run, event: object) -> None:
        kind = type(event).__name__
        state = getattr(event, "state", "")
        kind += f":{state}" if isinstance(state, str) and state else ""
        out.write(f"{time.monotonic() - T0:.3f}\t{kind}\t{getattr(event, 'host', '')}\n")
        emit(self, event)  # type: ignore[arg-type]

    run.Run.emit = timed  # type: ignore[method-assign]
    return main(argv)


def summary(path: str) -> None:
    times: dict[str, list[float]] = defaultdict(list)
    with open(path) as f:
        for line in f:
            at, kind, _ = line.rstrip("\n").split("\t")
            times[kind].append(float(at))
    for kind, ts in sorted(times.items(), key=lambda kv: kv[1][0]):
        ts.sort()
        print(f"{kind:<28} {len(ts):5d}  first {ts[0]:6.2f}  median {ts[len(ts) // 2]:6.2f}  "
              f"last {ts[-1]:6.2f}")  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1] == "--summary":
        summary(sys.argv[2])
    else:
        sys.exit(record(sys.argv[1], sys.argv[3:]))
