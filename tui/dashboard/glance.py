"""The cluster at a glance, in the dashboard: from the moment it opens, its own connection to
every host (remote/cluster.py) checks them and keeps their GPU figures live, run or no run;
`c` checks again, `d` dumps every rank's stack of the run. A mixin of the Dashboard.

While a run goes, its own monitors stream the figures (over its connections) and the
dashboard's pause, so each host samples its GPUs once per interval.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from remote.cluster import Cluster
from remote.events import ChecksDone, Event, HangDetected, HostState
from remote.inventory import Host, Inventory
from remote.monitor import Emit
from remote.stacks import Report

from ..text import tilde
from .findings import FindingsView
from .hosts import HostsTable
from .messages import ClusterEvent
from .stacks_screen import StacksScreen
from .widgets import Status

if TYPE_CHECKING:
    from textual.app import App

    _Base = App[int]
else:
    _Base = object


class ClusterLike(Protocol):
    """What the dashboard needs of its connections (`remote.cluster.Cluster`; tests fake it)."""

    async def run(self) -> None: ...
    async def check(self) -> ChecksDone: ...
    def pause(self, paused: bool) -> None: ...
    async def stacks(
        self, run_id: str, run_dir: Path, *, flight: bool = False
    ) -> tuple[Report, Path]: ...


ClusterFactory = Callable[[Inventory, Emit], ClusterLike]


def engine_cluster(inv: Inventory, emit: Emit) -> ClusterLike:
    return Cluster(inv, emit)


class Glance(_Base):
    inventory: Inventory | None
    hosts: HostsTable
    findings: FindingsView
    status: Status
    run_id: str | None
    run_dir: str | None
    cluster_factory: ClusterFactory
    cluster: ClusterLike | None = None
    _cluster_hosts: tuple[Host, ...] = ()
    _generation = 0
    _received_at_alert = 0

    def open_cluster(self, inv: Inventory) -> None:
        """Connect to the inventory's hosts and check them, unless already connected to them."""
        if self.cluster is not None and inv.hosts == self._cluster_hosts:
            return
        self.workers.cancel_group(self, "cluster")  # the old hosts' connections close
        self._generation += 1
        self.cluster = self.cluster_factory(inv, partial(self._cluster_emit, self._generation))
        self._cluster_hosts = inv.hosts
        self.findings.start(len(inv.hosts))
        self.run_worker(self.cluster.run(), name="cluster", group="cluster", exit_on_error=False)

    def _cluster_emit(self, generation: int, event: Event) -> None:
        self.post_message(ClusterEvent(generation, event))

    def on_cluster_event(self, message: ClusterEvent) -> None:
        if message.generation != self._generation:
            return  # a replaced cluster's last words
        event = message.event
        if isinstance(event, HostState):
            info = self.hosts.info(event.node_rank)
            if info is not None:
                info.reach, info.reach_detail = event.state, event.detail
                self.hosts.refresh_host(event.node_rank)
                self.show_status()
            return
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    def action_check(self) -> None:
        """Check every host again (the inventory read afresh: edits count)."""
        inv = self.reload_inventory()
        if inv is None:
            return
        self.show_checks(True)
        if self.cluster is None or inv.hosts != self._cluster_hosts:
            self.open_cluster(inv)
            return
        self.findings.start(len(inv.hosts))
        self.run_worker(self.cluster.check(), name="check", group="check", exclusive=True)

    # -- every rank's stack ---------------------------------------------------------------

    def action_stacks(self) -> None:
        if self.cluster is None or self.run_id is None or self.inventory is None:
            return
        if isinstance(self.screen, StacksScreen):
            screen = self.screen
            screen.waiting()
        else:
            screen = StacksScreen(self.run_id)
            self.push_screen(screen)
        flight = self.inventory.job.nccl.flight_recorder
        dump = self.cluster.stacks(self.run_id, Path(self.run_dir or "."), flight=flight)
        self.run_worker(
            self._show_stacks(screen, dump), name="stacks", group="stacks", exclusive=True,
            exit_on_error=False,
        )  # fmt: skip

    async def _show_stacks(
        self, screen: StacksScreen, dump: Awaitable[tuple[Report, Path]]
    ) -> None:
        try:
            report, path = await dump
        except OSError as exc:  # the run dir could not be written, say
            self.notify(f"the stacks dump failed: {exc}", severity="error", timeout=10)
            return
        if screen.is_attached:
            screen.show(report, tilde(str(path)))

    # -- hangs ------------------------------------------------------------------------------

    def hang_detected(self, ev: HangDetected) -> None:
        """The run warned of a stall (its Notice is shown too): the status bar says so until
        a rank speaks again."""
        what = "silent" if ev.reason == "silent" else "GPUs idle"
        self.status.alert = f"stalled? {what} {ev.since:.0f} s (d: stacks)"
        self._received_at_alert = self.logs_received()
        self.show_status()

    def clear_alert(self) -> None:
        if self.status.alert and self.logs_received() > self._received_at_alert:
            self.status.alert = ""

    # -- implemented by the Dashboard -------------------------------------------------------

    if TYPE_CHECKING:
        _handlers: dict[type[Event], Callable[[Event], None]]

        def show_status(self) -> None: ...
        def show_checks(self, on: bool) -> None: ...
        def reload_inventory(self) -> Inventory | None: ...
        def logs_received(self) -> int: ...
