"""The dashboard: the cluster at a glance from the moment it opens, every rank's log live,
launch / stop / restart, the first failure, every rank's stack when a job stalls.

It renders the engine's events only: `Run(inv, emit=...)` runs in a worker (group
"run") on the app's own loop. The app routes each event to the widgets that own what it
changes (the hosts table, the log pane, the banner, the status bar) and each key to its
action; the dashboard's own connections are Glance's (tui/dashboard/glance.py). Log lines go
straight into the log pane's buffers (no message per batch: 256 nodes send ~10k batches a
second under a flood); every other event comes as an `EngineEvent` message, in order.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Protocol

from textual import on
from textual.actions import SkipAction
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input
from textual.worker import Worker, WorkerState

from ddptui.remote import inventory
from ddptui.remote.agents import openssh, pace
from ddptui.remote.agents.fleet import Fleet
from ddptui.remote.events import (
    Alert,
    ChecksDone,
    CodeSynced,
    DeepChecked,
    Event,
    Failure,
    HangDetected,
    HostState,
    LogBatch,
    NodeExited,
    NodeRanks,
    Notice,
    RunFinished,
    RunRestarting,
    RunStarted,
)
from ddptui.remote.exits import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from ddptui.remote.run.failures import first
from ddptui.remote.run.runner import Emit, OnCancel, Run, new_run_id
from ddptui.remote.store import runs

from ..text import run_ended, shown
from . import hostshell
from .glance import ClusterFactory, Glance, engine_cluster
from .history import HistoryScreen
from .hosts import HostsTable
from .logbuffer import View
from .logpane import LogPane
from .messages import ClusterEvent, EngineEvent, JumpToFailure
from .screens import HostDetailScreen, InventoryErrorScreen, QuitScreen
from .stacks_screen import StacksScreen
from .training import TrainingPanel
from .widgets import FailureBanner, FindInput, Status, StatusBar

SEVERITY: dict[str, SeverityLevel] = {"info": "information", "warning": "warning", "error": "error"}
# Actions of the main screen: hidden while another screen (a dialog, the inventory error) is up.
MAIN_ACTIONS = {
    "launch", "stop", "restart", "filter", "errors", "follow", "jump",
    "view_all", "view_next", "view_prev", "check", "deep", "find", "detach", "history",
}  # fmt: skip
# What a read-only dashboard (`ddptui serve` without --control) refuses: whatever starts, stops
# or takes over a job or a host (a shell on it).
CONTROL_ACTIONS = {"launch", "stop", "restart", "deep", "shell"}
# Under a flood the young generation (the default 700 objects) filled many times a frame: what
# lived for a frame or a batch (strips, timers, held records) reached the oldest generation,
# whose full collections then ran every second. Collected every 10k objects, they die young.
YOUNG_GC = 10_000
GC_DEFAULT = gc.get_threshold()
FIND_HINTS = {"hosts": "find hosts: name or address", "views": "find views: r12, node3, …"}


class RunLike(Protocol):
    """What the app needs of a run (`Run`; tests and the benchmark may fake it)."""

    run_id: str
    on_cancel: OnCancel  # what its end without a word does to the job (the app's crash, say)

    def execute(self) -> Awaitable[RunFinished]: ...
    def stop(self) -> None: ...
    def detach(self) -> None: ...
    def as_viewer(self) -> None: ...


# (inventory, emit, run id, the dashboard's connections to borrow or None)
RunFactory = Callable[[inventory.Inventory, Emit, str, Fleet | None], RunLike]
# A run started earlier, opened again (attach, the history): (its record, emit, stop it, ...).
RejoinFactory = Callable[[runs.RunRecord, Emit, bool, Fleet | None], RunLike]


def engine_rejoin(
    record: runs.RunRecord, emit: Emit, stop: bool, fleet: Fleet | None = None
) -> RunLike:
    return Run.rejoin(record, emit, stop=stop, fleet=fleet)


def engine_runs(runs_dir: Path | None = None, extra_args: Sequence[str] = ()) -> RunFactory:
    """Runs of the real engine; their logs go under `runs_dir` (default: the user data dir);
    `extra_args` go to the training script after the inventory's `args`."""

    def make(
        inv: inventory.Inventory, emit: Emit, run_id: str, fleet: Fleet | None = None
    ) -> RunLike:
        run_dir = runs_dir / run_id if runs_dir is not None else None
        return Run(inv, emit, run_id=run_id, run_dir=run_dir, extra_args=extra_args, fleet=fleet)

    return make


class Dashboard(App[int]):
    CSS_PATH = Path(__file__).parent / "app.tcss"  # absolute: subclasses live elsewhere
    TITLE = "ddptui"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("l", "launch", "Launch", id="launch", tooltip="Start the job on every host"),
        Binding("s", "stop", "Stop", id="stop", tooltip="TERM, grace, then KILL on every host"),
        Binding("r", "restart", "Restart", id="restart", tooltip="Stop the job, launch it again"),
        Binding(
            "slash", "filter", "Filter", id="filter", key_display="/",
            tooltip="Show only lines matching a regex (lowercase: any case)",
        ),
        Binding(
            "e", "errors", "Errors", id="errors-only", priority=True,
            tooltip="Only stderr and tracebacks",
        ),
        Binding(
            "f", "follow", "Follow", id="follow", priority=True,
            tooltip="Stick to the newest line",
        ),
        Binding(
            "a", "view_all", "All ranks", id="all-ranks", show=False, priority=True,
            tooltip="Every rank's lines together",
        ),
        Binding(
            "right_square_bracket", "view_next", "Next view", id="next-view",
            key_display="]", show=False, priority=True, tooltip="The next rank's log",
        ),
        Binding(
            "left_square_bracket", "view_prev", "Previous view", id="previous-view",
            key_display="[", show=False, priority=True, tooltip="The previous rank's log",
        ),
        Binding("q", "quit", "Quit", id="quit", tooltip="Quit (asks first if a job runs)"),
        Binding(
            "x", "detach", "Detach", id="detach",
            tooltip="Quit and leave the job running on its hosts (ddptui attach comes back)",
        ),
        Binding("h", "history", "Runs", id="history", tooltip="Every run: open one"),
        Binding(
            "j", "jump", "Failure", id="jump-to-failure", priority=True, tooltip="Show its log"
        ),
        Binding("c", "check", "Check", id="check", tooltip="Check every host again"),
        Binding(
            "D", "deep", "Deep check", id="deep-check", show=False,
            tooltip="Measure the fabric on every rank the job would have: the slow host named",
        ),
        Binding(
            "d", "stacks", "Stacks", id="stacks",
            tooltip="Every rank's Python stack, grouped: the odd ones out first",
        ),
        Binding(
            "exclamation_mark", "shell", "Shell", id="shell", key_display="!", show=False,
            tooltip="ssh to the selected host (or the shown rank's), in the job's workdir",
        ),
    ]  # fmt: skip

    def __init__(
        self,
        inventory_path: Path,
        *,
        run_factory: RunFactory | None = None,
        clock: Callable[[], float] = time.monotonic,
        run_ids: Callable[[], str] = new_run_id,
        cluster_factory: ClusterFactory = engine_cluster,
        start: str | None = None,
        run: str | None = None,
        rejoin_factory: RejoinFactory = engine_rejoin,
        runs_dir: Path | None = None,
        read_only: bool = False,
        served: bool = False,
    ) -> None:
        super().__init__()
        self.read_only = read_only  # no launch, stop, restart or deep check: only watching
        self.served = served  # a browser's session: leaving it never stops the job
        self.runs_dir = runs_dir  # where runs are kept (None: the user data dir)
        self.inventory_path = inventory_path
        self.run_factory = run_factory or engine_runs()
        self.rejoin_factory = rejoin_factory
        self.clock, self.run_ids = clock, run_ids
        self.start = start  # the command it opened on: `ddptui launch` launches at once
        self.open_on = run  # `ddptui attach|stop|stacks RUN`: the run to open at once
        # `ddptui launch`: the run checks the hosts; the dashboard's own connections open after.
        # `ddptui attach RUN` too: a running job's hosts fail a check (its port is taken).
        self._cluster_later = start == "launch" or run is not None
        self.glance = Glance(self, cluster_factory)
        self.inventory: inventory.Inventory | None = None
        self.current_run: RunLike | None = None
        self.run_id: str | None = None
        self.run_dir: str | None = None
        self.worker: Worker[RunFinished] | None = None
        self.status = Status()
        self.failure: Failure | None = None
        self.failures: list[Failure] = []
        self.finished: RunFinished | None = None
        self._started_at: float | None = None
        self._stopping = False  # the user asked the run to stop
        self._after_run: Callable[[], None] | None = None  # restart or quit, once it ended
        self.hosts = HostsTable(clock, id="hosts")
        self.banner = FailureBanner(id="banner")
        self.pane = LogPane(clock, id="logs")
        self.find_box = FindInput(id="find")
        self.status_bar = StatusBar(id="status")
        self.training = TrainingPanel(id="training")
        if read_only:  # the hints name no key it refuses
            self.status.no_run = "no run yet (read-only)"
            self.pane.findings.keys = "c checks again · h runs · Enter on a host: its facts"

    # -- layout -----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield self.hosts
        yield self.banner
        yield self.training
        yield self.pane
        yield self.find_box
        yield self.status_bar
        yield Footer(show_command_palette=False)  # ctrl+p still opens it: room for the keys

    def on_mount(self) -> None:
        pace.install()  # keys before lines: the hosts' line work yields to them in slices
        self.hosts.focus()
        self.set_interval(1.0, self.tick)
        try:
            self._use_inventory(inventory.load(self.inventory_path))
        except inventory.InventoryError as exc:
            self._inventory_error(exc)
        self.show_status()
        # Everything so far (modules, widgets, styles) lives as long as the app: moved out of
        # the cycle collector's way, a full collection under bench_dashboard.py's flood takes a
        # fraction of the time (the stalls a keypress waits behind).
        gc.freeze()
        gc.set_threshold(YOUNG_GC, *GC_DEFAULT[1:])
        if self.start == "launch" and self.inventory is not None:
            self.action_launch()
        elif self.start == "runs":
            self.action_history()
        elif self.open_on is not None:
            self.open_run(self.open_on, stop=self.start == "stop")

    async def on_unmount(self) -> None:
        await self.glance.close()
        pace.uninstall()
        gc.unfreeze()  # the next app in this process (tests) starts from a clean slate
        gc.set_threshold(*GC_DEFAULT)

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        """Every toast is plain text: messages carry host, rank and inventory text, which is
        never read as markup (`[/x]` in a script's name, `[@click=app.quit]` from a host), nor
        a terminal's command (an OSC 52 in an exception's words)."""
        message, title = shown(message), shown(title)
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=False)

    # -- inventory --------------------------------------------------------------------------

    def _use_inventory(self, inv: inventory.Inventory) -> None:
        self.inventory = inv
        self.hosts.set_hosts(inv.hosts)
        self.status.hosts = len(inv.hosts)
        self.sub_title = str(inv.path)
        # `ddptui launch`: the connections open now, for the run; their checks come after it
        if self.glance.open(inv, check=not self._cluster_later) and not self._cluster_later:
            self.pane.findings.start(addresses(inv))
        self.show_status()
        self.refresh_bindings()

    def reload_inventory(self) -> inventory.Inventory | None:
        """The inventory read afresh (edits since count, ssh_config's too); a mistake opens its
        screen."""
        openssh.forget()
        try:
            inv = inventory.load(self.inventory_path)
        except inventory.InventoryError as exc:
            self._inventory_error(exc)
            return None
        self._use_inventory(inv)
        return inv

    def _inventory_error(self, exc: inventory.InventoryError) -> None:
        self.inventory = None
        self.refresh_bindings()

        def fixed(inv: inventory.Inventory | None) -> None:
            if inv is not None:
                self._use_inventory(inv)
                self.notify(f"inventory loaded: {len(inv.hosts)} hosts", timeout=3)

        self.push_screen(InventoryErrorScreen(exc), fixed)

    # -- running ----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.worker is not None and not self.worker.is_finished

    def action_launch(self) -> None:
        if self.running:
            return
        inv = self.reload_inventory()  # edits since the last run count
        if inv is None:
            return
        run_id = self.run_ids()
        emit = partial(self._emit, run_id)
        self._start(run_id, self.run_factory(inv, emit, run_id, self.glance.fleet(inv)))
        self.pane.findings.start(addresses(inv))  # the run checks the hosts too

    def open_run(self, spec: str, stop: bool = False) -> None:
        """A run started earlier: every host's lines from the first, then live (attached),
        or its logs and how it ended if it is over. stop: stop it as well."""
        if self.running:
            self.notify("a run is open here: stop (s) or detach (x) it first", severity="warning")
            return
        try:
            record = runs.resolve(spec)
            inv = record.inventory()
        except runs.RunError as exc:
            self.notify(str(exc), severity="error", timeout=10)
            return
        self._use_inventory(inv)
        emit = partial(self._emit, record.run_id)
        fleet = self.glance.fleet(inv)
        self._start(record.run_id, self.rejoin_factory(record, emit, stop, fleet), launched=False)

    def _start(self, run_id: str, run: RunLike, launched: bool = True) -> None:
        """A run (new or rejoined) becomes the one shown: fresh state, its worker started."""
        self._reset(run_id)
        self.current_run = run
        self._on_cancel(run, launched)
        self.status.run_id, self.status.state = run_id, "connecting"
        self.worker = self.run_worker(run.execute(), name="run", group="run", exit_on_error=False)
        self.glance.pause(True)  # the run streams the figures over its own connections
        self.pane.show_view(self.pane.logs.view)
        self.pane.log_view.focus()
        self.refresh_bindings()
        self.show_status()

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

    def _reset(self, run_id: str) -> None:
        """A new run: empty logs, no failure, host states start over."""
        self.run_id = run_id  # from now on, only this run's events are taken
        self.pane.reset()
        self.failure, self.failures, self.finished = None, [], None
        self._started_at, self._stopping = None, False
        self.banner.hide()
        self.hosts.reset()
        old = self.status
        self.status = Status(hosts=old.hosts, world_size=old.world_size, no_run=old.no_run)

    def action_history(self) -> None:
        def chosen(run_id: str | None) -> None:
            if run_id is not None:
                self.open_run(run_id)

        self.push_screen(HistoryScreen(), chosen)

    def action_detach(self) -> None:
        """Quit, leaving the job to run on its hosts (its supervisors end it, and clean up)."""
        if self.current_run is None or not self.running:
            return
        self._after_run = self._quit_now
        self.current_run.detach()  # a viewer's only lets go: the run stays as it was
        gone = "left" if self.read_only else "detached"
        self.notify(f"{gone}: run {self.run_id} goes on (ddptui attach {self.run_id})")

    def action_stop(self) -> None:
        if self.current_run is not None and self.running:
            self._stopping = True
            self.status.state = "stopping"
            self.current_run.stop()
            self.refresh_bindings()
            self.show_status()

    def action_restart(self) -> None:
        if self.running:
            self._after_run = self.action_launch
            self.action_stop()
        else:
            self.action_launch()

    async def action_quit(self) -> None:
        if self.read_only and self.running:  # a viewer leaves; the job is not theirs to stop
            self.action_detach()
        elif not self.running:  # still a bad inventory: the exit status says so, as --headless's
            self.exit(EXIT_USAGE if self.inventory is None else EXIT_OK)
        elif self._after_run == self._quit_now:  # asked twice: leave; each host cleans up
            self.exit(EXIT_INTERRUPTED)
        else:
            self.push_screen(QuitScreen(len(self.hosts.infos)), self._quit_answered)

    def _quit_answered(self, answer: str | None) -> None:
        if answer is not None and not self.running:  # it ended meanwhile
            self.exit(EXIT_OK)
        elif answer == "stop":
            self._after_run = self._quit_now
            self.action_stop()
            self.notify("stopping the job on every host, then quitting (q again: leave now)")
        elif answer == "detach":
            self.action_detach()

    def _quit_now(self) -> None:
        self.exit(EXIT_OK)

    def on_exit_app(self) -> None:
        """A served app ends when its browser leaves (the tab closed, the link lost): the run
        it launched is detached now, while its links still carry the word; any other end, a
        crash included, is the engine's on_cancel as its worker is cancelled."""
        if self.current_run is not None and self.running and self.current_run.on_cancel == "detach":
            self.current_run.detach()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group == "deep" and event.worker.is_finished:
            self._deep_ended(event.worker)
        if event.worker is not self.worker or not event.worker.is_finished:
            return
        if event.state == WorkerState.ERROR:
            self.status.state = "error"
            self.notify(f"the run ended on an internal error: {event.worker.error!r}",
                        severity="error", timeout=30)  # fmt: skip
        self.glance.pause(False)
        if self._cluster_later and self.inventory is not None:
            self._cluster_later = False  # the run is over: the dashboard's checks now
            self.glance.check(self.inventory)
            self.pane.findings.start(addresses(self.inventory))
        self.status.alert, self.status.lines_per_s = "", None
        self.refresh_bindings()
        self.show_status()
        after, self._after_run = self._after_run, None
        if after is not None:
            after()

    # -- events -----------------------------------------------------------------------------

    def _emit(self, run_id: str, event: Event) -> None:
        """The run's emit, on the app's loop (the run is its worker)."""
        if run_id != self.run_id:
            return  # a previous run's last words
        if type(event) is LogBatch:  # the hot path: into the buffers, drawn by the pane's timer
            self.pane.add(event)
        else:
            self.post_message(EngineEvent(run_id, event))

    def on_engine_event(self, message: EngineEvent) -> None:
        if message.run_id == self.run_id:
            self._route(message.event)

    def on_cluster_event(self, message: ClusterEvent) -> None:
        if not self.glance.current(message):
            return  # a replaced cluster's last words
        event = message.event
        if isinstance(event, HostState):  # the dashboard's own connection, not a run's
            self.hosts.reach(event)
            self.show_status()
        else:
            self._route(event)

    def _route(self, event: Event) -> None:
        """Each widget takes what it shows of the event; the run's course is the app's."""
        self.hosts.apply(event)
        self.pane.apply(event)
        self.training.apply(event)
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(self, event)

    def _run_started(self, ev: RunStarted) -> None:
        self._started_at = self.clock()
        self.run_dir = ev.run_dir
        self.status.world_size = ev.world_size or self.status.world_size
        self.show_status()

    def _host_state(self, ev: HostState) -> None:
        if ev.state == "running" and self.status.state in ("connecting", "restarting"):
            self.status.state = "running"
        self.show_status()

    def _node_ranks(self, ev: NodeRanks) -> None:
        if ev.world_size:
            self.status.world_size = ev.world_size
            self.show_status()

    def _node_exited(self, ev: NodeExited) -> None:
        if ev.failures and not self._stopping:  # after a stop, failures are its echo
            self.failures.extend(ev.failures)
            if self.status.state == "running":
                self.status.state = "stopping"
            self._show_failure(first(self.failures))

    def _code_synced(self, ev: CodeSynced) -> None:
        self.notify(f"{ev.host}: {ev.text()}", severity="error" if ev.error else "information")

    def _alert(self, ev: Alert) -> None:
        """What job.notify tells of (failed, lost, restarted...): the bell, and a toast; a hang
        the run's watch found is always shown, as an error."""
        if ev.wanted:
            self.bell()
        if ev.wanted or ev.event == "hang":
            severity = SEVERITY[{"hang": "error", "straggler": "warning"}.get(ev.event, "info")]
            self.notify(f"{ev.event}: {ev.message}", title="ddptui", timeout=10, severity=severity)

    def _run_restarting(self, ev: RunRestarting) -> None:
        """The hub starts the job again: the banner keeps the failure that caused it, and the
        next attempt's failures are its own."""
        self.failures.clear()
        self.status.state = "restarting"
        self.show_status()
        self.notify(ev.text(), severity="warning", timeout=10)

    def _notice(self, ev: Notice) -> None:
        where = f"{ev.host}: " if ev.host else ""
        self.notify(where + ev.text, severity=SEVERITY[ev.level], timeout=6)

    def _hang_detected(self, ev: HangDetected) -> None:
        """The run warned of a stall (its Notice is shown too): the status bar says so until
        a rank speaks again."""
        self.status.stalled(ev, self.pane.received)
        self.show_status()

    def _run_finished(self, ev: RunFinished) -> None:
        self.finished = ev
        self.status.state = ev.status
        self.status.elapsed = ev.elapsed
        if ev.failure is not None:
            self._show_failure(ev.failure)
        severity: SeverityLevel = "information" if ev.status == "succeeded" else "warning"
        if ev.status in ("failed", "unreachable"):
            severity = "error"
        self.notify(run_ended(ev, took=False), severity=severity, timeout=10 if ev.reason else 6)
        self.show_status()

    def _checks_done(self, ev: ChecksDone) -> None:
        if self.start == "stacks" and self.running:  # `ddptui stacks RUN`: now connected
            self.start = None
            self.action_stacks()
        self.hosts.flush()  # every host's row now, not at the next tick
        self.show_status()
        failures = [f for f in ev.findings if f.level == "failure"]
        warnings = [f for f in ev.findings if f.level == "warning"]
        if failures:
            self.notify(f"checks failed: {failures[0].message}", severity="error", timeout=10)
        elif warnings:
            self.notify(f"checks passed with {len(warnings)} warning(s)", severity="warning")
        else:
            self.notify("checks passed", timeout=3)

    def _deep_ended(self, worker: Worker[Any]) -> None:
        self.refresh_bindings()  # l again
        if worker.state == WorkerState.ERROR:
            self.pane.findings.deep_progress(f"it ended on an internal error: {worker.error!r}")

    def _deep_checked(self, ev: DeepChecked) -> None:
        failed = [f for f in ev.findings if f.level == "failure"]
        if failed:
            self.notify(f"deep check failed: {failed[0].message}", severity="error", timeout=10)
        else:
            self.notify(f"deep check passed in {ev.seconds:.0f} s", timeout=6)

    _handlers: ClassVar[dict[type[Event], Callable[[Any, Any], None]]] = {
        RunStarted: _run_started,
        HostState: _host_state,
        NodeRanks: _node_ranks,
        NodeExited: _node_exited,
        Notice: _notice,
        RunFinished: _run_finished,
        ChecksDone: _checks_done,
        DeepChecked: _deep_checked,
        HangDetected: _hang_detected,
        CodeSynced: _code_synced,
        RunRestarting: _run_restarting,
        Alert: _alert,
    }

    def _show_failure(self, failure: Failure | None) -> None:
        if failure is None or failure == self.failure:
            return
        self.failure = failure
        self.banner.show_failure(failure)
        self.pane.mark_failed(f.rank for f in [*self.failures, failure])
        self.refresh_bindings()

    def show_status(self) -> None:
        status = self.status
        if self._started_at is not None and self.finished is None:
            status.elapsed = self.clock() - self._started_at
            status.measure(self.clock(), self.pane.received)
        status.hosts_up = len(self.hosts.up)
        self.status_bar.show(status)

    def tick(self) -> None:
        """Every second: the status bar, and how long each rank has been silent."""
        self.show_status()
        self.pane.tick()

    # -- keys: each to the widget it concerns ------------------------------------------------

    # The log's keys are priority bindings: taken as the key reaches the app, not once it has
    # gone through each widget from the focused one up (a turn of the loop each, behind the
    # line work of each under a flood). In a text box they are its letters.

    def _log_key(self) -> None:
        if isinstance(self.focused, Input):
            raise SkipAction

    def action_jump(self) -> None:
        self._log_key()
        f = self.failure
        if f is None:
            return
        if f.rank is not None:
            self.pane.show_view(View("rank", f.rank))
        else:
            node = next((i.node_rank for i in self.hosts.infos.values() if i.name == f.host), 0)
            self.pane.show_view(View("node", node))
        self.pane.log_view.focus()

    def on_jump_to_failure(self, message: JumpToFailure) -> None:
        self.action_jump()

    def action_view_all(self) -> None:
        self._log_key()
        self.pane.show_all()

    def action_view_next(self) -> None:
        self._log_key()
        self.pane.step_view(1)

    def action_view_prev(self) -> None:
        self._log_key()
        self.pane.step_view(-1)

    def action_errors(self) -> None:
        self._log_key()
        self.pane.toggle_errors()

    def action_follow(self) -> None:
        self._log_key()
        self.pane.toggle_follow()

    def action_filter(self) -> None:
        self.pane.open_filter()

    def action_check(self) -> None:
        """Check every host again (the inventory read afresh: edits count)."""
        inv = self.reload_inventory()
        if inv is None:
            return
        self.pane.show_checks(True)
        self.pane.findings.start(addresses(inv))
        self.glance.check(inv)

    def action_deep(self) -> None:
        """The deep check: the fabric measured on every rank the job would have, shown in
        the checks pane (the inventory read afresh)."""
        inv = self.reload_inventory()
        if inv is None or self.running or self.glance.deep_checking:
            return
        self.pane.show_checks(True)
        self.pane.findings.deep_started()
        self.glance.deep(inv, self.runs_dir)
        self.refresh_bindings()

    def action_stacks(self) -> None:
        if self.run_id is None or self.inventory is None:
            return
        flight = self.inventory.job.nccl.flight_recorder
        self.glance.stacks(self.run_id, Path(self.run_dir or "."), flight=flight)

    async def action_shell(self) -> None:
        """A shell on the host in view (tui/dashboard/hostshell.py), the app suspended."""
        host = hostshell.target(self.inventory, self.screen, self.pane, self.hosts)
        if host is not None:
            await hostshell.open_shell(self, host)

    @on(DataTable.RowSelected, "#hosts")
    def _host_chosen(self, event: DataTable.RowSelected) -> None:
        key = event.row_key.value
        info = self.hosts.info(int(key)) if key is not None else None
        if info is not None:
            self.push_screen(HostDetailScreen(info))

    # -- find: the hosts pane or the views list ---------------------------------------------

    def action_find(self, target: str) -> None:
        box = self.find_box
        box.target = target
        box.placeholder = FIND_HINTS[target]
        box.value = self.hosts.needle if target == "hosts" else self.pane.views.needle
        box.add_class("-shown")
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input is self.find_box:
            self._find(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input is self.find_box:
            self._find(event.value)
            self.find_box.remove_class("-shown")
            (self.hosts if self.find_box.target == "hosts" else self.pane.views).focus()

    def _find(self, text: str) -> None:
        if self.find_box.target == "hosts":
            self.hosts.find(text)
        else:
            self.pane.find_views(text)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """False hides a key (another screen is up, no failure, read-only); None shows it
        disabled."""
        if self.read_only and action in CONTROL_ACTIONS:
            return False
        if action in MAIN_ACTIONS and self.screen is not self.screen_stack[0]:
            return False
        if action == "quit" and isinstance(self.screen, QuitScreen):
            return False
        if action == "launch":  # nor while the deep check's job holds the hosts
            busy = self.running or self.glance.deep_checking
            return None if busy or self.inventory is None else True
        if action in ("stop", "detach"):
            return True if self.running and not self._stopping else None
        if action == "history":
            return None if self.running else True
        if action == "restart":
            return None if self.inventory is None else True
        if action == "jump":
            return self.failure is not None
        if action == "shell":  # on the cluster view, or a host's details
            on_host = self.screen is self.screen_stack[0] or isinstance(
                self.screen, HostDetailScreen
            )
            return on_host and self.inventory is not None
        if action in ("check", "deep"):
            return None if self.running or self.inventory is None else True
        if action == "stacks":
            if self.screen is not self.screen_stack[0] and not isinstance(
                self.screen, StacksScreen
            ):
                return False
            return True if self.running and self.run_id is not None else None
        return True

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """The command palette lists the dashboard's keys too."""
        yield from super().get_system_commands(screen)
        for binding in self.BINDINGS:
            assert isinstance(binding, Binding)
            if binding.id and self.check_action(binding.action, ()):
                yield SystemCommand(
                    f"{binding.description} ({binding.key_display or binding.key})",
                    binding.tooltip,
                    partial(self.run_action, binding.action),
                )


def addresses(inv: inventory.Inventory) -> dict[str, str]:
    """Each host's name and address: a finding's words name them, folded across hosts."""
    return {h.name: h.host for h in inv.hosts}


def create_app(
    inventory_path: Path = Path("inventory.yaml"),
    *,
    runs_dir: Path | None = None,
    extra_args: Sequence[str] = (),
    run_factory: RunFactory | None = None,
    clock: Callable[[], float] = time.monotonic,
    run_ids: Callable[[], str] = new_run_id,
    cluster_factory: ClusterFactory = engine_cluster,
    start: str | None = None,
    run: str | None = None,
    rejoin_factory: RejoinFactory = engine_rejoin,
    read_only: bool = False,
    served: bool = False,
) -> Dashboard:
    """The app factory `ddptui` and the tests use (tests fake the run, the cluster, the clock,
    the ids). start: the command it opens on, "launch", "check", "runs", or with `run` (a run
    id, prefix or dir) "attach", "stop" or "stacks" (None: the cluster view). read_only: no
    launch, stop, restart or deep check; served: a browser's session (`ddptui serve`)."""
    return Dashboard(
        inventory_path,
        run_factory=run_factory or engine_runs(runs_dir, extra_args),
        clock=clock,
        run_ids=run_ids,
        cluster_factory=cluster_factory,
        start=start,
        run=run,
        rejoin_factory=rejoin_factory,
        runs_dir=runs_dir,
        read_only=read_only,
        served=served,
    )
