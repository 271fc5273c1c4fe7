"""What a node's supervisor can see of its ranks' progress without changing the script, for the
run's hang rule (remote/host/hangrule.py): per rank, the CPU seconds and I/O bytes of its process
tree (/proc: a DataLoader's workers and a compiler's are its children), and, on request, its
main thread's stack (py-spy, as remote/host/stacks.py takes it for `ddptui stacks`).

The stack is read with `--nonblocking`: the rank is never paused, so the watching costs the job
no throughput. A torn read of a moving rank only looks like a moved stack, which is what it is;
a stuck rank's stack holds still, so it reads whole. python3 >= 3.8, stdlib only.
"""

from __future__ import annotations  # py3.8: annotations stay unevaluated

import contextlib
import json
import os
import time

from . import hangtraces, procs
from .looks import LOOK_S, Looks

TYPE_CHECKING = False  # typing costs milliseconds of import on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any

FRAMES_MAX = 24  # innermost frames kept of a stack: where it waits is at the top
TEXT_MAX = 120  # characters of a function's or a file's name
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


IO_FIELDS = (b"rchar", b"wchar", b"read_bytes", b"write_bytes")


def usage(pid: int) -> tuple[float, int, bool]:
    """(CPU seconds, I/O bytes, in I/O now) of pid and its descendants; what cannot be read
    counts 0. I/O sums the calls' bytes (rchar, wchar: sockets and page cache) and the storage
    layer's (read_bytes, write_bytes: counted as pages are dirtied, so one 1 GB write() of a
    checkpoint moves it while the call lasts). In I/O now: a thread in uninterruptible sleep
    (D), as a write throttled by a slow disk is."""
    cpu, io, blocked = 0.0, 0, False
    for p in [pid, *procs.descendants(pid)]:
        got = procs._stat(p)
        if got is not None:
            with contextlib.suppress(IndexError, ValueError):
                cpu += (int(got[1][11]) + int(got[1][12])) / TICKS  # utime, stime
        io += _io_bytes(p)
        blocked = blocked or _in_io(p)
    return cpu, io, blocked


def _io_bytes(pid: int) -> int:
    try:
        with open("/proc/{}/io".format(pid), "rb") as f:
            fields = dict(line.split(b":", 1) for line in f.read().splitlines() if b":" in line)
        return sum(int(fields.get(name, 0)) for name in IO_FIELDS)
    except (OSError, ValueError):
        return 0


def _in_io(pid: int) -> bool:
    try:
        tids = os.listdir("/proc/{}/task".format(pid))
    except OSError:
        return False
    for tid in tids:
        got = procs._stat("{}/task/{}".format(pid, tid))
        if got is not None and got[1][:1] == [b"D"]:
            return True
    return False


def sample(by_pid: dict[int, int], spy: str | None, quiet: float | None) -> dict[str, Any]:
    """This node's sample: {quiet: seconds since its last line (None: none yet), ranks: {rank:
    {cpu, io, in_io, frames | error}}}; frames: the main thread's, innermost first, each
    [function, file, line]. spy: py-spy's path, None for CPU and I/O alone."""
    from .stacks import dump_all  # py-spy's runner: only where stacks are asked for

    ranks: dict[str, Any] = {}
    for pid, rank in by_pid.items():
        cpu, io, blocked = usage(pid)
        ranks[str(rank)] = {"cpu": round(cpu, 2), "io": io, "in_io": blocked}
    if spy is not None:
        for key, dumped in dump_all(spy, by_pid, native=False, nonblocking=True).items():
            if "error" in dumped:
                ranks[key]["error"] = dumped["error"]
            else:
                ranks[key]["frames"] = main_frames(dumped["threads"])
    return {"quiet": quiet, "ranks": ranks}


def main_frames(threads: list[dict[str, Any]]) -> list[list[Any]]:
    """The main thread's frames (else the first thread's) as [function, file, line]."""
    main = next((t for t in threads if t.get("main")), threads[0] if threads else None)
    if main is None:
        return []
    return [[str(f.get("function"))[:TEXT_MAX], str(f.get("file"))[:TEXT_MAX], f.get("line")]
            for f in main["frames"][:FRAMES_MAX]]  # fmt: skip


def fit(got: dict[str, Any], limit: int) -> dict[str, Any]:
    """A sample within `limit` bytes of JSON (the hub link's line): past it, the stacks go
    (those ranks are then unread: no verdict from them)."""
    if len(json.dumps(got)) <= limit:
        return got
    for rank in got["ranks"].values():
        if rank.pop("frames", None) is not None:
            rank["error"] = "its stack was too long to send"
    return got


class Node:
    """A node supervisor's side of the hang watch: its rank processes (once found), the time of
    its job's last line, and its sample on the hub's ask. Threads: lines come from the pumps,
    asks from the hub link's."""

    def __init__(self) -> None:
        self.by_pid: dict[int, int] = {}
        self.looks = Looks()  # each rank's main thread, once a second (stragglers)
        self.last_line = time.monotonic()  # an attempt's start counts as its first line
        self.spy: str | None = None
        self.looked = False  # for py-spy, once
        self.scratch: str | None = None  # the attempt's private dir: the flight recorder's files

    def start(self) -> None:
        self.by_pid, self.last_line, self.looks = {}, time.monotonic(), Looks()

    def look(self, done: Any, every: float = LOOK_S) -> None:
        """Until `done` is set: once a second, whether each rank waits in a collective (its
        stack, where py-spy reads it) and whether it sleeps (remote/host/looks.py)."""
        self._find_spy()
        looks = self.looks
        while not done.wait(every):
            looks.look(dict(self.by_pid), self.spy)

    def _find_spy(self) -> None:
        if not self.looked:
            from .probe import find_py_spy

            self.spy, self.looked = find_py_spy(), True

    def line(self) -> None:
        self.last_line = time.monotonic()

    def traces(self, wait: float = hangtraces.DUMP_S) -> dict[str, Any]:
        """Every rank's flight recorder trace, dumped through its pipe: {rank: {trace} | {error}}
        (remote/host/stacks.py)."""
        from .stacks import flight

        return flight(self.scratch, sorted(set(self.by_pid.values())), wait)

    def sample(self, stacks: bool) -> dict[str, Any]:
        if stacks:
            self._find_spy()
        quiet = round(time.monotonic() - self.last_line, 1)
        got = sample(dict(self.by_pid), self.spy if stacks else None, quiet)
        for key, rank in got["ranks"].items():
            rank.update(self.looks.counts(int(key)))
        if stacks and self.spy is None:
            for rank in got["ranks"].values():
                rank["error"] = "py-spy not found (pip install py-spy, in the train extra)"
        return got
