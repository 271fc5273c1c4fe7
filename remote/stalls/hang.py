"""Hang detection: multi-node jobs mostly don't crash, they stall, silent, in a collective.

`HangWatch` is pure: fed the run's events and asked with the time, it says when a stall begins,
once per stall. A stall is the whole job silent: no rank printed a line for `job.hang_after`
seconds, or, on GPU hosts, the job's GPUs sat at 0 % that long. The job as a whole, not each
rank: many scripts print on rank 0 only, and a rank stuck alone soon holds every other in the
next collective anyway. The GPU rule counts only once the GPUs were seen busy during the run
(a CPU job on a GPU host leaves them idle by design). A line, or a busy GPU, ends the stall;
the next one is reported again.

`guard()` is the run's task: it asks every few seconds and, at a stall, warns (a HangDetected
and a Notice naming the silent ranks and hosts) and has every rank's stack captured.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from ddptui.remote import fold
from ddptui.remote.events import (
    Event,
    GpuStats,
    HangDetected,
    LogBatch,
    NodeExited,
    NodeRanks,
    NodeStarted,
    Notice,
)

TICK = 2.0  # seconds between looks (at most; a short hang_after looks more often)

Clock = Callable[[], float]
Reason = Literal["silent", "gpus-idle"]


@dataclass(frozen=True)
class Stall:
    ranks: tuple[int, ...]
    hosts: tuple[str, ...]
    since: float  # seconds without a line (or a busy GPU)
    reason: Reason

    def text(self) -> str:
        what = "no rank printed a line" if self.reason == "silent" else "the job's GPUs sat at 0 %"
        who = fold.ranks_on(self.ranks, self.hosts)
        return f"{what} for {self.since:.0f} s ({who}): the job may be stalled"


def describe(event: HangDetected) -> str:
    """A hang in one line (job.notify's message)."""
    return Stall(event.ranks, event.hosts, event.since, event.reason).text()


class HangWatch:
    def __init__(self, after: float | None, clock: Clock = time.monotonic) -> None:
        self.after, self.clock = after, clock
        self.limit = after  # hang_after: armed again when an attempt starts (job.restarts)
        self.ranks: dict[int, tuple[int, ...]] = {}  # node rank → its ranks (while it runs)
        self.hosts: dict[int, str] = {}
        self.last_line: float | None = None  # None until the job starts
        self.last_busy: float | None = None  # None until a GPU of the job's hosts is busy
        self.reported = False

    def feed(self, event: Event) -> None:
        """Every event of the run goes through here (cheap: a LogBatch costs one call)."""
        kind = type(event)
        if kind is LogBatch:
            self.last_line = self.clock()
            self.reported = False
        elif kind is GpuStats:
            assert isinstance(event, GpuStats)
            if event.node_rank in self.hosts and any(g.utilization_pct for g in event.gpus):
                self.last_busy = self.clock()
                self.reported = False
        elif isinstance(event, NodeStarted | NodeRanks):
            self.ranks[event.node_rank] = event.ranks
            self.hosts[event.node_rank] = event.host
            if self.last_line is None or isinstance(event, NodeStarted):
                # a job silent from the start (rendezvous) stalls too; an attempt starts afresh
                self.last_line = self.clock()
                self.after = self.limit
        elif isinstance(event, NodeExited):
            self.after = None  # the run is ending: whatever is silent now is not a hang

    def check(self) -> Stall | None:
        """A stall that began since the last one ended; None otherwise."""
        if self.after is None or self.reported or self.last_line is None:
            return None
        now = self.clock()
        silent = now - self.last_line
        idle = None if self.last_busy is None else now - self.last_busy
        reason: Reason
        if silent >= self.after:
            reason, since = "silent", silent
        elif idle is not None and idle >= self.after:
            reason, since = "gpus-idle", idle
        else:
            return None
        self.reported = True
        ranks = tuple(sorted(r for rs in self.ranks.values() for r in rs))
        hosts = tuple(self.hosts[k] for k in sorted(self.hosts))
        return Stall(ranks, hosts, since, reason)


Emit = Callable[[Event], None]


async def guard(watch: HangWatch, emit: Emit, capture: Callable[[], Awaitable[object]]) -> None:
    """The run's hang task: warn at each stall and capture every rank's stack (the capture
    reports what it saved). Ends by cancel."""
    if watch.after is None:
        return
    tick = min(TICK, watch.after / 4)
    while True:
        await asyncio.sleep(tick)
        stall = watch.check()
        if stall is None:
            continue
        emit(HangDetected(stall.ranks, stall.hosts, stall.since, stall.reason))
        emit(Notice("warning", stall.text() + "; capturing every rank's stack"))
        try:
            await capture()
        except OSError as exc:  # the run dir is not writable, say: the warning stands
            emit(Notice("error", f"could not save the stacks: {exc}"))
