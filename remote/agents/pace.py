"""Line work in slices: a flood of lines holds the event loop for SLICE_S at most at a time.

Every host's reader runs on one event loop, the dashboard's, whose keys and frames wait behind
whatever is ready before them: asyncio runs every ready callback of a turn of the loop in order,
and a key goes through several turns (each hop through Textual's widgets is one). Under a flood
from thousands of ranks a turn was every host's reader decoding frames and every node's timer
handing lines on, so a key waited for several of those (docs/benchmarks.md). With a `Pacer`
installed on the loop (the dashboard does it), line work shares one budget: once it has held the
loop SLICE_S, the rest waits until the loop has come round, after what was queued meanwhile (a
key's next hop, a redraw).

Without one (the console, the tests of the engine) line work runs as it comes.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections import deque
from collections.abc import Callable

SLICE_S = 0.004  # line work at a time, before what waits behind it runs

_pacers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pacer] = weakref.WeakKeyDictionary()


class Pacer:
    """One loop's budget for line work. `run(fn)` (a task's unit of it: a read of a host's
    frames) and `call(fn)` (a timer's) run `fn` now if the slice has room, else queue it; the
    queue is worked through, in order, one slice each time the loop comes round. A task waits
    for its unit to be done: a host whose lines wait is not read further meanwhile."""

    def __init__(self, loop: asyncio.AbstractEventLoop, budget: float = SLICE_S) -> None:
        self.loop, self.budget = loop, budget
        self.began: float | None = None  # when the current slice began (None: none open)
        self.spent = False  # the slice is used up: line work waits for the loop to come round
        self.queue: deque[tuple[Callable[[], None], asyncio.Future[None] | None]] = deque()

    def room(self) -> bool:
        """May a unit of line work run now? Not while older units wait. The first opens a
        slice; once it is spent, the rest waits for what was queued meanwhile."""
        if self.spent or self.queue:
            return False
        now = time.perf_counter()
        if self.began is None:
            self._open(now)
            return True
        if now - self.began < self.budget:
            return True
        self._spend()
        return False

    async def run(self, fn: Callable[[], None]) -> None:
        """`fn` now, or once its turn comes (its exception raised here)."""
        if self.room():
            fn()
            return
        done: asyncio.Future[None] = self.loop.create_future()
        self.queue.append((fn, done))
        await done

    def call(self, fn: Callable[[], None]) -> None:
        """`fn` now, or once its turn comes."""
        if self.room():
            fn()
        else:
            self.queue.append((fn, None))

    def _open(self, now: float) -> None:
        self.began = now
        self.loop.call_soon(self._came_round)

    def _came_round(self) -> None:
        if not self.spent:  # nothing waits: the next line work opens a slice of its own
            self.began = None

    def _spend(self) -> None:
        """The slice is used up: what waits goes on after what is queued now."""
        self.spent = True
        self.loop.call_soon(self._next)

    def _next(self) -> None:
        """The next slice: what waits, in order. (Something waits only while a slice is
        spent, and a spent slice has its next one queued.)"""
        self.began, self.spent = None, False
        queue = self.queue
        if not queue:
            return
        began = time.perf_counter()
        self._open(began)
        while queue:
            fn, done = queue.popleft()
            if done is None or not done.cancelled():  # else its task went away, and its need
                try:
                    fn()
                except Exception as exc:
                    if done is None:
                        self.loop.call_exception_handler({"message": repr(fn), "exception": exc})
                    else:
                        done.set_exception(exc)
                else:
                    if done is not None:
                        done.set_result(None)
            if time.perf_counter() - began >= self.budget:
                self._spend()
                return


def install(loop: asyncio.AbstractEventLoop | None = None) -> Pacer:
    """Pace the line work of this loop (default: the running one)."""
    loop = loop or asyncio.get_running_loop()
    pacer = _pacers[loop] = Pacer(loop)
    return pacer


def uninstall(loop: asyncio.AbstractEventLoop | None = None) -> None:
    loop = loop or asyncio.get_running_loop()
    pacer = _pacers.pop(loop, None)
    if pacer is not None:  # what waits runs now: no one comes round for it any more
        pacer.budget = float("inf")
        pacer._next()


def current() -> Pacer | None:
    """The running loop's pacer, if one is installed."""
    try:
        return _pacers.get(asyncio.get_running_loop())
    except RuntimeError:
        return None
