"""The cluster at a glance: the dashboard's own fleet of agents, from the moment it opens.

`run()` starts every host's agent and checks it (what `ddptui check` does: its GPU figures fill
the table first), then listens to each host's GPU monitor, run or no run, until cancelled.
Nothing of a job is started. `check()` probes again over the same agents (the dashboard's `c`;
a host whose agent was lost gets a new one). A run launched from the dashboard borrows this
fleet (`fleet`), so it costs no login shell more; while it streams the figures itself,
`pause()` keeps them from coming twice. `stacks()` dumps a run's stacks over these agents;
`deep()` runs the deep check over them.
A host whose agent is lost is reported unreachable until the next check.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path

from ddptui.remote.agents.fleet import Fleet, fleet_for
from ddptui.remote.agents.transport import Transport
from ddptui.remote.events import ChecksDone, DeepChecked, Event, HostState
from ddptui.remote.inventory import Inventory
from ddptui.remote.run import checkup
from ddptui.remote.stalls import stacks

LOST = "connection lost (c checks again)"
WATCH_AFTER_S = 0.5  # after the checks, before the monitors start: the table is drawn

Emit = Callable[[Event], None]


class Cluster:
    def __init__(
        self, inv: Inventory, emit: Emit, transports: Sequence[Transport] | None = None
    ) -> None:
        self.inv, self._emit_to = inv, emit
        self.fleet: Fleet = fleet_for(inv, transports)
        self.fleet.on_lost.append(self._lost)
        self.paused = False
        self._watch_later: asyncio.TimerHandle | None = None
        self._checking: asyncio.Lock | None = None

    async def run(self, *, check: bool = True) -> None:
        """Check, then keep the GPU figures live until cancelled; closes everything then.
        check=False: a run launched at once checks the hosts itself (over this fleet); the
        figures wait for the first `check()`."""
        try:
            if check:
                await self.check()
            await asyncio.Event().wait()  # the monitors stream on their agents' channels
        finally:
            await self.close()

    async def check(self) -> ChecksDone:
        """Probe every host over its agent (started afresh where it was lost)."""
        self._checking = self._checking or asyncio.Lock()
        async with self._checking:
            done = await checkup.check(self.inv, self._emit_to, fleet=self.fleet)
        loop = asyncio.get_running_loop()
        self._watch_later = loop.call_later(WATCH_AFTER_S, self._watch)
        return done

    def _watch(self) -> None:
        """The monitors start once the checks are in (they bring the first figures) and drawn:
        started at each login, they slowed the checks by a third on 32 hosts here."""
        if not self.paused:
            self.fleet.listen(self._emit_to)

    async def stacks(
        self, run_id: str, run_dir: Path, *, flight: bool = False
    ) -> tuple[stacks.Report, Path]:
        """Every rank's stack of a run on these hosts, grouped and saved in its run dir."""
        return await stacks.capture(self.fleet, run_id, run_dir, flight_recorder=flight)

    async def deep(self, seconds: float, runs_dir: Path | None = None) -> DeepChecked:
        """The deep check (remote/run/deepcheck.py) over these agents: its progress and verdict
        emitted; the job it runs is registered under `runs_dir`."""
        return await checkup.deep_check(
            self.inv, self.fleet, self._emit_to, seconds=seconds, runs_dir=runs_dir
        )

    def pause(self, paused: bool) -> None:
        """A run streams the figures to the dashboard itself meanwhile: not twice."""
        self.paused = paused
        if paused:
            self.fleet.unlisten(self._emit_to)
        else:
            self.fleet.listen(self._emit_to)

    def _lost(self, k: int, why: str) -> None:
        if self.paused:  # a run borrows the fleet: it says so itself, and reconnects
            return
        host = self.inv.hosts[k]
        self._emit_to(HostState(host.name, k, "unreachable", LOST))

    async def close(self) -> None:
        """Every agent let go (each leaves at once) and every connection closed."""
        if self._watch_later is not None:
            self._watch_later.cancel()
        await self.fleet.close()
