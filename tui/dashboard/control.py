"""The dashboard's inventory and the run it shows: the inventory read (afresh before a launch or a
check, a mistake its own screen), a run launched or opened again (attach, the history), stopped,
detached or restarted, and what follows its end (a restart, or the quit that was asked for). A
controller the app holds (as Glance and Course): it owns the run and its worker, and when the
dashboard's own connections check the hosts (after a run launched at once, which checks them).

It hands the run its `emit`: a line goes straight into the log pane's buffers (no message per
batch: 256 nodes send ~10k batches a second under a flood); every other event comes to the app
as an `EngineEvent` message, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from textual.app import App
from textual.worker import Worker, WorkerState

from ddptui.remote import inventory
from ddptui.remote.agents import openssh
from ddptui.remote.agents.fleet import Fleet
from ddptui.remote.events import Event, JobState, LogBatch, RunFinished
from ddptui.remote.exits import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from ddptui.remote.leases.take import Ask
from ddptui.remote.run.runner import Emit, OnCancel, Run
from ddptui.remote.slurm.run import SlurmRun, job_of
from ddptui.remote.store import runs

from .course import Course
from .glance import Glance
from .history import HistoryScreen
from .hosts import HostsTable
from .logpane import LogPane
from .messages import EngineEvent
from .screens import InventoryErrorScreen, QuitScreen, WaitScreen


class RunLike(Protocol):
    """What the dashboard needs of a run (`Run`; tests and the benchmark may fake it)."""

    run_id: str
    on_cancel: OnCancel  # what its end without a word does to the job (the app's crash, say)

    def execute(self) -> Awaitable[RunFinished]: ...
    def stop(self) -> None: ...
    def detach(self) -> None: ...
    def as_viewer(self) -> None: ...


# (inventory, emit, run id, the dashboard's connections to borrow or None), and `ask`: the
# question whether to wait in the queue when its GPUs are held (remote/leases/take.py)
RunFactory = Callable[..., RunLike]
# A run started earlier, opened again (attach, the history): (its record, emit, stop it, ...).
RejoinFactory = Callable[[runs.RunRecord, Emit, bool, Fleet | None], RunLike]


def engine_rejoin(
    record: runs.RunRecord, emit: Emit, stop: bool, fleet: Fleet | None = None
) -> RunLike:
    if job_of(record):  # handed to Slurm: followed through its login node
        return SlurmRun(record.inventory(), emit, record=record, stop=stop)
    return Run.rejoin(record, emit, stop=stop, fleet=fleet)


def engine_runs(runs_dir: Path | None = None, extra_args: Sequence[str] = ()) -> RunFactory:
    """Runs of the real engine; their logs go under `runs_dir` (default: the user data dir);
    `extra_args` go to the training script after the inventory's `args`."""

    def make(
        inv: inventory.Inventory, emit: Emit, run_id: str, fleet: Fleet | None = None,
        ask: Ask | None = None,
    ) -> RunLike:  # fmt: skip
        run_dir = runs_dir / run_id if runs_dir is not None else None
        if inv.slurm is not None:
            return SlurmRun(inv, emit, run_id=run_id, run_dir=run_dir, extra_args=extra_args)
        return Run(inv, emit, run_id=run_id, run_dir=run_dir, extra_args=extra_args, fleet=fleet,
                   ask=ask)  # fmt: skip

    return make


def addresses(inv: inventory.Inventory) -> dict[str, str]:
    """Each host's name and address: a finding's words name them, folded across hosts."""
    return {h.name: h.host for h in inv.hosts}


class RunControl:
    def __init__(
        self,
        app: App[int],
        glance: Glance,
        course: Course,
        *,
        hosts: HostsTable,
        pane: LogPane,
        inventory_path: Path,
        run_factory: RunFactory,
        rejoin_factory: RejoinFactory,
        run_ids: Callable[[], str],
        cluster_later: bool,
        read_only: bool = False,
        served: bool = False,
    ) -> None:
        self.app, self.glance, self.course, self.hosts, self.pane = app, glance, course, hosts, pane
        self.inventory_path = inventory_path
        self.run_factory, self.rejoin_factory, self.run_ids = run_factory, rejoin_factory, run_ids
        # `ddptui launch`: the run checks the hosts; the dashboard's own connections open after.
        # `ddptui attach RUN` too: a running job's hosts fail a check (its port is taken).
        self.cluster_later = cluster_later
        self.read_only, self.served = read_only, served  # a browser's viewer, a browser's tab
        self.inventory: inventory.Inventory | None = None
        self.current_run: RunLike | None = None
        self.run_id: str | None = None  # only this run's events are taken
        self.worker: Worker[RunFinished] | None = None
        self.after_run: Callable[[], None] | None = None  # restart or quit, once it ended

    @property
    def running(self) -> bool:
        return self.worker is not None and not self.worker.is_finished

    # -- the inventory ----------------------------------------------------------------------

    def use_inventory(self, inv: inventory.Inventory) -> None:
        self.inventory = inv
        self.hosts.set_hosts(inv.hosts, inv.spares)
        self.course.status.hosts = len(inv.hosts)
        self.app.sub_title = str(inv.path)
        # `ddptui launch`: the connections open now, for the run; their checks come after it.
        # None to Slurm's nodes: only its login node is reached, by the run.
        opened = inv.slurm is None and self.glance.open(inv, check=not self.cluster_later)
        if opened and not self.cluster_later:
            self.pane.findings.start(addresses(inv))
        self.course.show()
        self.app.refresh_bindings()

    def reload_inventory(self) -> inventory.Inventory | None:
        """The inventory read afresh (edits since count, ssh_config's too); a mistake opens its
        screen."""
        openssh.forget()
        try:
            inv = inventory.load(self.inventory_path)
        except inventory.InventoryError as exc:
            self.inventory_error(exc)
            return None
        self.use_inventory(inv)
        return inv

    def inventory_error(self, exc: inventory.InventoryError) -> None:
        self.inventory = None
        self.app.refresh_bindings()

        def fixed(inv: inventory.Inventory | None) -> None:
            if inv is not None:
                self.use_inventory(inv)
                self.app.notify(f"inventory loaded: {len(inv.hosts)} hosts", timeout=3)

        self.app.push_screen(InventoryErrorScreen(exc), fixed)

    # -- the run ----------------------------------------------------------------------------

    def launch(self) -> None:
        if self.running:
            return
        inv = self.reload_inventory()  # edits since the last run count
        if inv is None:
            return
        run_id = self.run_ids()
        emit = partial(self.emit, run_id)
        run = self.run_factory(inv, emit, run_id, self.glance.fleet(inv), ask=self._ask_wait)
        self._start(run_id, run)
        if inv.slurm is None:
            self.pane.findings.start(addresses(inv))  # the run checks the hosts too

    async def _ask_wait(self, why: str) -> bool:
        """Its GPUs are held: wait in the queue for them? (a stop meanwhile takes it away)."""
        answer: asyncio.Future[bool | None] = asyncio.get_running_loop().create_future()
        screen = WaitScreen(why)

        def said(wait: bool | None) -> None:
            if not answer.done():
                answer.set_result(wait)

        self.app.push_screen(screen, said)
        try:
            return bool(await answer)
        finally:
            if screen.is_active:  # the launch was stopped before the answer
                screen.dismiss(None)

    def open(self, spec: str, stop: bool = False) -> None:
        """A run started earlier: every host's lines from the first, then live (attached),
        or its logs and how it ended if it is over. stop: stop it as well."""
        if self.running:
            self.app.notify(
                "a run is open here: stop (s) or detach (x) it first", severity="warning"
            )
            return
        try:
            record = runs.resolve(spec)
            inv = record.inventory()
        except runs.RunError as exc:
            self.app.notify(str(exc), severity="error", timeout=10)
            return
        self.use_inventory(inv)
        emit = partial(self.emit, record.run_id)
        fleet = self.glance.fleet(inv)
        self._start(record.run_id, self.rejoin_factory(record, emit, stop, fleet), launched=False)

    def history(self) -> None:
        """The runs kept: the one chosen is opened."""

        def chosen(run_id: str | None) -> None:
            if run_id is not None:
                self.open(run_id)

        self.app.push_screen(HistoryScreen(), chosen)

    def _start(self, run_id: str, run: RunLike, launched: bool = True) -> None:
        """A run (new or rejoined) becomes the one shown: fresh state, its worker started."""
        self.run_id = run_id  # from now on, only this run's events are taken
        self.pane.reset()
        self.course.reset(run_id)
        self.hosts.reset()
        self.current_run = run
        self._on_cancel(run, launched)
        self.worker = self.app.run_worker(
            run.execute(), name="run", group="run", exit_on_error=False
        )
        self.glance.pause(True)  # the run streams the figures over its own connections
        self.pane.show_view(self.pane.logs.view)
        self.pane.log_view.focus()
        self.app.refresh_bindings()
        self.course.show()

    def _on_cancel(self, run: RunLike, launched: bool) -> None:
        """However this app ends (a crash, a closed tab, a cancelled worker), the engine does
        what this says, not the app's handlers: a read-only viewer leaves the run exactly as it
        was (it holds no lease and says nothing to the hosts); a browser's --control tab detaches
        the run it launched (the tab was its only launcher) and leaves one it opened as it was.
        A terminal's dashboard stops its run (Ctrl-C, a crash): nothing outlives it unasked."""
        if self.read_only:
            run.as_viewer()
        elif self.served:
            run.on_cancel = "detach" if launched else "leave"

    def emit(self, run_id: str, event: Event) -> None:
        """The run's emit, on the app's loop (the run is its worker)."""
        if run_id != self.run_id:
            return  # a previous run's last words
        if isinstance(event, JobState) and event.nodes:
            self._slurm_nodes(event.nodes)
        if type(event) is LogBatch:  # the hot path: into the buffers, drawn by the pane's timer
            self.pane.add(event)
        else:
            self.app.post_message(EngineEvent(run_id, event))

    def _slurm_nodes(self, nodes: Sequence[str]) -> None:
        """Slurm gave the job its nodes: the rows are theirs from now on."""
        inv = self.inventory
        if inv is None or [h.name for h in inv.hosts] == list(nodes):
            return
        with contextlib.suppress(ValueError):  # a count that differs: the rows stay
            self.inventory = inventory.with_nodes(inv, nodes)
            self.hosts.set_hosts(self.inventory.hosts)
            self.course.status.hosts = len(nodes)

    def stop(self) -> None:
        if self.current_run is not None and self.running:
            self.course.stopping = True
            self.course.status.state = "stopping"
            self.current_run.stop()
            self.app.refresh_bindings()
            self.course.show()

    def detach(self) -> None:
        """Quit, leaving the job to run on its hosts (its supervisors end it, and clean up)."""
        if self.current_run is None or not self.running:
            return
        self.after_run = self._quit_now
        self.current_run.detach()  # a viewer's only lets go: the run stays as it was
        gone = "left" if self.read_only else "detached"
        self.app.notify(f"{gone}: run {self.run_id} goes on (ddptui attach {self.run_id})")

    def restart(self) -> None:
        if self.running:
            self.after_run = self.launch
            self.stop()
        else:
            self.launch()

    def ended(self, worker: Worker[Any]) -> None:
        """The run's worker is over: the dashboard's connections take over again, then what was
        asked for meanwhile (a restart, the quit)."""
        status = self.course.status
        if worker.state == WorkerState.ERROR:
            status.state = "error"
            self.app.notify(f"the run ended on an internal error: {worker.error!r}",
                            severity="error", timeout=30)  # fmt: skip
        self.glance.pause(False)
        if self.cluster_later and self.inventory is not None and self.inventory.slurm is None:
            self.cluster_later = False  # the run is over: the dashboard's checks now
            self.glance.check(self.inventory)
            self.pane.findings.start(addresses(self.inventory))
        status.alert, status.lines_per_s = "", None
        self.app.refresh_bindings()
        self.course.show()
        after, self.after_run = self.after_run, None
        if after is not None:
            after()

    # -- leaving ----------------------------------------------------------------------------

    def quit(self, viewer: bool = False) -> None:
        """Leave: at once where no run goes; else stop it or detach from it, as asked (a viewer
        of a served dashboard detaches: the job is not theirs to stop)."""
        if viewer and self.running:
            self.detach()
        elif not self.running:  # still a bad inventory: the exit status says so, as --headless's
            self.app.exit(EXIT_USAGE if self.inventory is None else EXIT_OK)
        elif self.after_run == self._quit_now:  # asked twice: leave; each host cleans up
            self.app.exit(EXIT_INTERRUPTED)
        else:
            self.app.push_screen(QuitScreen(len(self.hosts.infos)), self._quit_answered)

    def _quit_answered(self, answer: str | None) -> None:
        if answer is not None and not self.running:  # it ended meanwhile
            self.app.exit(EXIT_OK)
        elif answer == "stop":
            self.after_run = self._quit_now
            self.stop()
            self.app.notify("stopping the job on every host, then quitting (q again: leave now)")
        elif answer == "detach":
            self.detach()

    def _quit_now(self) -> None:
        self.app.exit(EXIT_OK)
