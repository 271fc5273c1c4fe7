"""The cluster at a glance: the dashboard's own connection to every host, from the moment it opens.

`run()` connects to every host and checks it (what `ddptui check` does: its GPU figures fill the
table first), then keeps each host's GPU figures live with a monitor (remote/monitor.py), run or
no run, until cancelled. Nothing of
a job is started: a monitor ends with its connection. `check()` again logs in afresh and probes
(the dashboard's `c`). While a run streams figures of its own, `pause()` stops the sampling.
`stacks()` dumps a run's stacks over these connections (the dashboard's `d`).
A host whose link drops is reported unreachable until the next check.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from pathlib import Path

from . import stacks
from .events import ChecksDone, Event, HostState
from .inventory import Inventory
from .monitor import Emit, Monitor
from .run import Run
from .transport import Transport, for_host

LOST = "connection lost (c checks again)"
WATCH_AFTER_S = 0.5  # after the checks, before the monitors start: the table is drawn


class Cluster:
    def __init__(
        self, inv: Inventory, emit: Emit, transports: Sequence[Transport] | None = None
    ) -> None:
        self.inv, self._emit_to = inv, emit
        self.transports = list(transports or [for_host(h) for h in inv.hosts])
        self.paused = False
        self._monitors: dict[int, tuple[Monitor, asyncio.Task[None]]] = {}
        self._up: dict[int, bool] = {}  # node rank → logged in
        self._watch_later: asyncio.TimerHandle | None = None
        self._checking: asyncio.Lock | None = None

    async def run(self) -> None:
        """Check, then keep the GPU figures live until cancelled; closes everything then."""
        try:
            await self.check()
            await asyncio.Event().wait()  # the monitors run as tasks of their own
        finally:
            await self.close()

    async def check(self) -> ChecksDone:
        """Log in to every host afresh and probe it; the monitors start once all answered."""
        self._checking = self._checking or asyncio.Lock()
        async with self._checking:
            await self.close()
            run = Run(self.inv, self._emit, transports=self.transports)
            return await run.check(close=False)

    async def stacks(
        self, run_id: str, run_dir: Path, *, flight: bool = False
    ) -> tuple[stacks.Report, Path]:
        """Every rank's stack of a run on these hosts, grouped and saved in its run dir."""
        return await stacks.capture(self.transports, run_id, run_dir, flight=flight)

    def pause(self, paused: bool) -> None:
        """Stop (or restart) sampling on every host, e.g. while a run streams its own."""
        self.paused = paused
        for monitor, _ in self._monitors.values():
            monitor.pause(paused)

    async def close(self) -> None:
        """Stop every monitor and close every connection (each host's monitor leaves at EOF)."""
        if self._watch_later is not None:
            self._watch_later.cancel()
        tasks = [task for _, task in self._monitors.values()]
        self._monitors.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(t.close() for t in self.transports), return_exceptions=True)

    def _emit(self, event: Event) -> None:
        self._emit_to(event)
        if isinstance(event, HostState):
            self._up[event.node_rank] = event.state == "connected"
        if isinstance(event, ChecksDone):
            up = [t for t in self.transports if self._up.get(t.host.node_rank)]
            loop = asyncio.get_running_loop()
            self._watch_later = loop.call_later(WATCH_AFTER_S, self._watch_all, up)

    def _watch_all(self, transports: list[Transport]) -> None:
        """Start each host's monitor once the checks are in (they bring the first figures)
        and drawn: started at each login, the monitors slowed the checks by a third on 32
        hosts here."""
        for t in transports:
            self._watch(t)

    def _watch(self, transport: Transport) -> None:
        monitor = Monitor(transport, self._emit_to)
        monitor.paused = self.paused
        task = asyncio.ensure_future(self._stream(monitor))
        self._monitors[transport.host.node_rank] = (monitor, task)

    async def _stream(self, monitor: Monitor) -> None:
        host = monitor.transport.host
        with contextlib.suppress(asyncio.CancelledError):
            if await monitor.run() == "lost":
                self._emit_to(HostState(host.name, host.node_rank, "unreachable", LOST))
