"""The cluster at a glance, in the dashboard: from the moment it opens, its own connection to
every host (remote/run/cluster.py) checks them and keeps their GPU figures live, run or no run;
`c` checks again, `D` runs the deep check over them, `d` dumps every rank's stack of the run.
A controller the app holds: it
owns the connections and their workers; their events come back to the app as ClusterEvents.

A run launched or opened here borrows these connections (one login per host for the
dashboard's whole life); while it goes, the run streams the figures and the dashboard's own
listening pauses, so each host samples its GPUs once per interval.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from textual.app import App
from textual.worker import Worker, WorkerCancelled, WorkerFailed

from ddptui.remote.agents.fleet import Fleet
from ddptui.remote.agents.monitor import Emit
from ddptui.remote.events import ChecksDone, DeepChecked, Event
from ddptui.remote.inventory import Host, Inventory
from ddptui.remote.run import deepcheck
from ddptui.remote.run.cluster import Cluster
from ddptui.remote.stalls.stacks import Report

from ..text import tilde
from .messages import ClusterEvent
from .stacks_screen import StacksScreen


class ClusterLike(Protocol):
    """What the dashboard needs of its connections (a `Cluster`; tests fake it)."""

    @property
    def fleet(self) -> Fleet | None: ...  # None: runs open their own

    async def run(self, *, check: bool = True) -> None: ...
    async def check(self) -> ChecksDone: ...
    def pause(self, paused: bool) -> None: ...
    async def stacks(
        self, run_id: str, run_dir: Path, *, flight: bool = False
    ) -> tuple[Report, Path]: ...
    async def deep(self, seconds: float, runs_dir: Path | None = None) -> DeepChecked: ...


ClusterFactory = Callable[[Inventory, Emit], ClusterLike]


def engine_cluster(inv: Inventory, emit: Emit) -> ClusterLike:
    return Cluster(inv, emit)


class Glance:
    def __init__(self, app: App[Any], factory: ClusterFactory) -> None:
        self.app, self.factory = app, factory
        self.cluster: ClusterLike | None = None
        self.hosts: tuple[Host, ...] = ()
        self.generation = 0  # events of a cluster since replaced are dropped
        self.worker: Worker[None] | None = None

    def open(self, inv: Inventory, *, check: bool = True) -> bool:
        """Connect to the inventory's hosts and check them, unless already connected to them.
        True when that opens new connections (checking them unless `check` is False: a run
        launched at once checks them itself, over these connections)."""
        if self.cluster is not None and inv.hosts == self.hosts:
            return False
        self.app.workers.cancel_group(self.app, "cluster")  # the old hosts' connections close
        self.generation += 1
        self.cluster = self.factory(inv, partial(self._emit, self.generation))
        self.hosts = inv.hosts
        self.worker = self.app.run_worker(self.cluster.run(check=check), name="cluster",
                                          group="cluster", exit_on_error=False)  # fmt: skip
        return True

    async def close(self) -> None:
        """The connections closed, and waited for: the app's loop ends after it (else their
        processes outlive it, and are reaped by nothing)."""
        if self.worker is not None:
            self.worker.cancel()
            with contextlib.suppress(WorkerCancelled, WorkerFailed):
                await self.worker.wait()

    def fleet(self, inv: Inventory) -> Fleet | None:
        """The open connections, for a run on the same hosts to borrow: a launch or an
        attach from the dashboard costs no login more."""
        if self.cluster is None or inv.hosts != self.hosts:
            return None
        return self.cluster.fleet

    def _emit(self, generation: int, event: Event) -> None:
        self.app.post_message(ClusterEvent(generation, event))

    def current(self, message: ClusterEvent) -> bool:
        """Is this the word of the connections open now (not of replaced ones)?"""
        return message.generation == self.generation

    def check(self, inv: Inventory) -> None:
        """Check every host again (connecting first to hosts new to the inventory)."""
        if not self.open(inv) and self.cluster is not None:
            self.app.run_worker(self.cluster.check(), name="check", group="check", exclusive=True)

    def pause(self, paused: bool) -> None:
        if self.cluster is not None:
            self.cluster.pause(paused)

    # -- the deep check -------------------------------------------------------------------

    @property
    def deep_checking(self) -> bool:
        return any(w.group == "deep" and not w.is_finished for w in self.app.workers)

    def deep(self, inv: Inventory, runs_dir: Path | None) -> None:
        """The deep check over these connections: its progress and verdict come back as
        ClusterEvents (the checks pane shows them)."""
        self.open(inv)
        if self.cluster is not None and not self.deep_checking:
            work = self.cluster.deep(deepcheck.SECONDS, runs_dir)
            self.app.run_worker(work, name="deep", group="deep", exit_on_error=False)

    # -- every rank's stack ---------------------------------------------------------------

    def stacks(self, run_id: str, run_dir: Path, *, flight: bool) -> None:
        """Dump every rank's stack, shown on the stacks screen (again, if it is up)."""
        if self.cluster is None:
            return
        up = self.app.screen
        if isinstance(up, StacksScreen):
            screen = up
            screen.waiting()
        else:
            screen = StacksScreen(run_id)
            self.app.push_screen(screen)
        dump = self.cluster.stacks(run_id, run_dir, flight=flight)
        self.app.run_worker(
            self._show_stacks(screen, dump), name="stacks", group="stacks", exclusive=True,
            exit_on_error=False,
        )  # fmt: skip

    async def _show_stacks(
        self, screen: StacksScreen, dump: Awaitable[tuple[Report, Path]]
    ) -> None:
        try:
            report, path = await dump
        except OSError as exc:  # the run dir could not be written, say
            self.app.notify(f"the stacks dump failed: {exc}", severity="error", timeout=10)
            return
        if screen.is_attached:
            screen.show(report, tilde(str(path)))
