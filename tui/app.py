"""The dashboard: the cluster at a glance from the moment it opens, every rank's log live,
launch / stop / restart, the first failure, every rank's stack when a job stalls.

It renders the engine's events only: `remote.run.Run(inv, emit=...)` runs in a worker (group
"run") on the app's own loop, and `emit` posts each event as an `EngineEvent` message; the
dashboard's own connections (`remote.cluster.Cluster`, tui/glance.py) post `ClusterEvent`s.
Log lines go into bounded buffers (`LogBuffer`); a timer draws the visible view's new lines in
one batch (tui/logpane.py: the log pane, the views list, filter and find).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Protocol

from textual import on
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widgets import DataTable, Footer
from textual.worker import Worker, WorkerState

from remote import inventory, runs
from remote.events import (
    Alert,
    ChecksDone,
    CodeSynced,
    Event,
    Failure,
    GpuStats,
    HangDetected,
    HostChecked,
    HostState,
    LogBatch,
    NodeExited,
    NodeRanks,
    NodeStarted,
    Notice,
    RunFinished,
    RunRestarting,
    RunStarted,
)
from remote.failures import first
from remote.run import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, Emit, Run, new_run_id

from .findings import FindingsView
from .glance import ClusterFactory, Glance, engine_cluster, tilde
from .history import HistoryScreen
from .hosts import HostsTable
from .logbuffer import LogBuffer, View
from .logpane import LogPane
from .logview import RankLog
from .messages import EngineEvent, JumpToFailure
from .screens import HostDetailScreen, InventoryErrorScreen, QuitScreen
from .stacks_screen import StacksScreen
from .views import ViewList
from .widgets import FailureBanner, FilterInput, FindInput, Status, StatusBar

FLUSH_EVERY = 0.2  # seconds between drawing batches of new lines (5 frames a second)
SEVERITY: dict[str, SeverityLevel] = {"info": "information", "warning": "warning", "error": "error"}
# Actions of the main screen: hidden while another screen (a dialog, the inventory error) is up.
MAIN_ACTIONS = {
    "launch", "stop", "restart", "filter", "errors", "follow", "jump",
    "view_all", "view_next", "view_prev", "check", "find", "detach", "history",
}  # fmt: skip


class RunLike(Protocol):
    """What the app needs of a run (`remote.run.Run`; tests and the benchmark may fake it)."""

    run_id: str

    def execute(self) -> Awaitable[RunFinished]: ...
    def stop(self) -> None: ...
    def detach(self) -> None: ...


RunFactory = Callable[[inventory.Inventory, Emit, str], RunLike]
# A run started earlier, opened again (attach, the history): (its record, emit, stop it).
RejoinFactory = Callable[[runs.RunRecord, Emit, bool], RunLike]


def engine_rejoin(record: runs.RunRecord, emit: Emit, stop: bool) -> RunLike:
    return Run.rejoin(record, emit, stop=stop)


def engine_runs(runs_dir: Path | None = None, extra_args: Sequence[str] = ()) -> RunFactory:
    """Runs of the real engine; their logs go under `runs_dir` (default: the user data dir);
    `extra_args` go to the training script after the inventory's `args`."""

    def make(inv: inventory.Inventory, emit: Emit, run_id: str) -> RunLike:
        run_dir = runs_dir / run_id if runs_dir is not None else None
        return Run(inv, emit, run_id=run_id, run_dir=run_dir, extra_args=extra_args)

    return make


class Dashboard(Glance, LogPane, App[int]):
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
        Binding("e", "errors", "Errors", id="errors-only", tooltip="Only stderr and tracebacks"),
        Binding("f", "follow", "Follow", id="follow", tooltip="Stick to the newest line"),
        Binding(
            "a", "view_all", "All ranks", id="all-ranks", show=False,
            tooltip="Every rank's lines together",
        ),
        Binding(
            "right_square_bracket", "view_next", "Next view", id="next-view",
            key_display="]", show=False, tooltip="The next rank's log",
        ),
        Binding(
            "left_square_bracket", "view_prev", "Previous view", id="previous-view",
            key_display="[", show=False, tooltip="The previous rank's log",
        ),
        Binding("q", "quit", "Quit", id="quit", tooltip="Quit (asks first if a job runs)"),
        Binding(
            "x", "detach", "Detach", id="detach",
            tooltip="Quit and leave the job running on its hosts (ddptui attach comes back)",
        ),
        Binding("h", "history", "Runs", id="history", tooltip="Every run: open one"),
        Binding("j", "jump", "Failure", id="jump-to-failure", tooltip="Show its log"),
        Binding("c", "check", "Check", id="check", tooltip="Check every host again"),
        Binding(
            "d", "stacks", "Stacks", id="stacks",
            tooltip="Every rank's Python stack, grouped: the odd ones out first",
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
    ) -> None:
        super().__init__()
        self.open_on = run  # `ddptui attach|stop|stacks RUN`: the run to open at once
        self.rejoin_factory = rejoin_factory
        self.run_ids = run_ids
        self.start = start  # the command it opened on: `ddptui launch` launches at once
        # `ddptui launch`: the run checks the hosts; the dashboard's own connections open after
        self._cluster_later = start == "launch"
        self.inventory_path = inventory_path
        self.inventory: inventory.Inventory | None = None
        self.run_factory = run_factory or engine_runs()
        self.cluster_factory = cluster_factory
        self.clock = clock
        self.current_run: RunLike | None = None
        self.run_id: str | None = None
        self.run_dir: str | None = None
        self.worker: Worker[RunFinished] | None = None
        self.logs = LogBuffer(clock=self.clock)
        self.status = Status()
        self.follow = True
        self._paused_by_scroll = False
        self.failure: Failure | None = None
        self.failures: list[Failure] = []
        self.finished: RunFinished | None = None
        self._started_at: float | None = None
        self._stopping = False  # the user asked the run to stop
        self._after_run: Callable[[], None] | None = None  # restart or quit, once it ended
        self.showing_checks = True  # the checks' findings where the logs go, until a run
        self._view_count = -1  # log views in the views list
        self._rate_mark: tuple[float, int] | None = None  # (when, lines received) for lines/s
        self._handlers: dict[type[Event], Callable[[Any], None]] = {
            RunStarted: self._run_started,
            HostState: self._host_state,
            NodeStarted: self._node_started,
            NodeRanks: self._node_ranks,
            NodeExited: self._node_exited,
            Notice: self._notice,
            RunFinished: self._run_finished,
            HostChecked: self._host_checked,
            ChecksDone: self._checks_done,
            GpuStats: self._gpu_stats,
            HangDetected: self.hang_detected,
            CodeSynced: self._code_synced,
            RunRestarting: lambda ev: self.notify(ev.text(), severity="warning", timeout=10),
            Alert: self._alert,
        }

    # -- layout -----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield HostsTable(id="hosts")
        yield FailureBanner(id="banner")
        with Horizontal(id="body", classes="-checks"):
            yield ViewList(id="views")
            yield RankLog(id="log")
            yield FindingsView(id="findings")
        yield FilterInput(placeholder="regex; enter keeps it, escape clears it", id="filter")
        yield FindInput(id="find")
        yield StatusBar(id="status")
        yield Footer(show_command_palette=False)  # ctrl+p still opens it: room for the keys

    def on_mount(self) -> None:
        self.hosts = self.query_one(HostsTable)
        self.banner = self.query_one(FailureBanner)
        self.views = self.query_one(ViewList)
        self.log_view = self.query_one(RankLog)
        self.findings = self.query_one(FindingsView)
        self.filter_box = self.query_one(FilterInput)
        self.find_box = self.query_one(FindInput)
        self.status_bar = self.query_one(StatusBar)
        self.hosts.border_title = "hosts"
        self.views.border_title = "views"
        self.sync_views()
        self._title()
        self.hosts.focus()
        self.set_interval(FLUSH_EVERY, self.flush)
        self.set_interval(1.0, self.tick)
        try:
            self._use_inventory(inventory.load(self.inventory_path))
        except inventory.InventoryError as exc:
            self._inventory_error(exc)
        self.show_status()
        # Everything so far (modules, widgets, styles) lives as long as the app: moved out of
        # the cycle collector's way, a full collection under bench_dashboard.py's flood took
        # ~20 ms instead of ~85 ms (the stalls a keypress waits behind).
        gc.freeze()
        if self.start == "launch" and self.inventory is not None:
            self.action_launch()
        elif self.start == "runs":
            self.action_history()
        elif self.open_on is not None:
            self.open_run(self.open_on, stop=self.start == "stop")

    def on_unmount(self) -> None:
        gc.unfreeze()  # the next app in this process (tests) starts from a clean slate

    # -- inventory --------------------------------------------------------------------------

    def _use_inventory(self, inv: inventory.Inventory) -> None:
        self.inventory = inv
        self.hosts.set_hosts(inv.hosts)
        self.status.hosts = len(inv.hosts)
        self.sub_title = str(inv.path)
        if not self._cluster_later:
            self.open_cluster(inv)  # connects and checks, unless connected to these hosts
        self.show_status()
        self.refresh_bindings()

    def reload_inventory(self) -> inventory.Inventory | None:
        """The inventory read afresh (edits since count); a mistake opens its screen."""
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
        self._reset()
        self.run_id = run_id = self.run_ids()
        self.current_run = self.run_factory(inv, partial(self._emit, run_id), run_id)
        self.status.run_id, self.status.state = run_id, "connecting"
        self.worker = self.run_worker(
            self.current_run.execute(), name="run", group="run", exit_on_error=False
        )
        if self.cluster is not None:
            self.cluster.pause(True)  # the run streams the figures over its own connections
        self.findings.start(len(inv.hosts))  # the run checks the hosts too
        self.show_view(self.logs.view)
        self.log_view.focus()
        self.refresh_bindings()
        self.show_status()

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
        self._reset()
        self.run_id = record.run_id
        self.current_run = self.rejoin_factory(record, partial(self._emit, record.run_id), stop)
        self.status.run_id, self.status.state = record.run_id, "connecting"
        self.worker = self.run_worker(
            self.current_run.execute(), name="run", group="run", exit_on_error=False
        )
        if self.cluster is not None:
            self.cluster.pause(True)  # the run streams the figures over its own connections
        self.show_view(self.logs.view)
        self.log_view.focus()
        self.refresh_bindings()
        self.show_status()

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
        self.current_run.detach()
        self.notify(f"detached: run {self.run_id} goes on (ddptui attach {self.run_id})")

    def _emit(self, run_id: str, event: Event) -> None:
        self.post_message(EngineEvent(run_id, event))

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
        if not self.running:  # still a bad inventory: the exit status says so, as --headless's
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

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker is not self.worker or not event.worker.is_finished:
            return
        if event.state == WorkerState.ERROR:
            self.status.state = "error"
            self.notify(f"the run ended on an internal error: {event.worker.error!r}",
                        severity="error", timeout=30)  # fmt: skip
        if self.cluster is not None:
            self.cluster.pause(False)
        elif self._cluster_later and self.inventory is not None:
            self._cluster_later = False
            self.open_cluster(self.inventory)
        self.status.alert, self.status.lines_per_s = "", None
        self.refresh_bindings()
        self.show_status()
        after, self._after_run = self._after_run, None
        if after is not None:
            after()

    def _reset(self) -> None:
        """A new run: empty logs, no failure, host states start over."""
        self.logs = LogBuffer(clock=self.clock)
        self.log_view.clear()
        self.failure, self.failures, self.finished = None, [], None
        self._started_at, self._stopping = None, False
        self.follow, self._paused_by_scroll = True, False
        self._rate_mark = None
        self.banner.hide()
        self.hosts.reset()
        self.status = Status(hosts=self.status.hosts, world_size=self.status.world_size)
        self.sync_views()
        self._title()

    # -- engine events ----------------------------------------------------------------------

    def on_engine_event(self, message: EngineEvent) -> None:
        if message.run_id != self.run_id:
            return  # a previous run's last words
        event = message.event
        if type(event) is LogBatch:  # the hot path
            self.logs.add(event)
            return
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    def _run_started(self, ev: RunStarted) -> None:
        self._started_at = self.clock()
        self.run_dir = ev.run_dir
        self.status.world_size = ev.world_size or self.status.world_size
        self.log_view.border_subtitle = f"logs in {tilde(ev.run_dir)}"
        self.show_status()

    def _host_state(self, ev: HostState) -> None:
        info = self.hosts.info(ev.node_rank)
        if info is None:
            return
        info.state, info.detail = ev.state, ev.detail
        self.hosts.refresh_host(ev.node_rank)
        if ev.state == "running" and self.status.state == "connecting":
            self.status.state = "running"
        self.show_status()

    def _node_started(self, ev: NodeStarted) -> None:
        info = self.hosts.info(ev.node_rank)
        if info is not None:
            info.ranks, info.hostname, info.ifname, info.pid = (
                ev.ranks, ev.hostname, ev.ifname, ev.pid
            )  # fmt: skip
            self.hosts.refresh_host(ev.node_rank)
        self.logs.add_ranks(ev.node_rank, ev.host, ev.ranks)

    def _node_ranks(self, ev: NodeRanks) -> None:
        """Ranks only the run reveals (c10d, spawn, Lightning)."""
        info = self.hosts.info(ev.node_rank)
        if info is not None:
            info.ranks = ev.ranks
            self.hosts.refresh_host(ev.node_rank)
        self.logs.add_ranks(ev.node_rank, ev.host, ev.ranks)
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
        """What job.notify tells of (failed, lost, restarted...): the bell, and a toast."""
        if ev.wanted:
            self.bell()
            self.notify(f"{ev.event}: {ev.message}", title="ddptui", timeout=10)

    def _notice(self, ev: Notice) -> None:
        where = f"{ev.host}: " if ev.host else ""
        self.notify(where + ev.text, severity=SEVERITY[ev.level], timeout=6)

    def _run_finished(self, ev: RunFinished) -> None:
        self.finished = ev
        self.status.state = ev.status
        self.status.elapsed = ev.elapsed
        if ev.failure is not None:
            self._show_failure(ev.failure)
        severity: SeverityLevel = "information" if ev.status == "succeeded" else "warning"
        if ev.status in ("failed", "unreachable"):
            severity = "error"
        self.notify(f"run {ev.status} (exit {ev.exit_code})", severity=severity, timeout=6)
        self.show_status()

    def _host_checked(self, ev: HostChecked) -> None:
        info = self.hosts.info(ev.node_rank)
        if info is not None:
            info.facts, info.findings = ev.facts, ev.findings
            info.hostname = ev.facts.get("hostname") or info.hostname
            if not info.history.util:  # the live figures, when they came first, stay
                info.gpus = ev.gpus
            self.hosts.refresh_host(ev.node_rank)
            self.show_status()
        self.findings.host_checked(ev)
        self.sync_views()  # the checks' mark

    def _checks_done(self, ev: ChecksDone) -> None:
        if self.start == "stacks" and self.running:  # `ddptui stacks RUN`: now connected
            self.start = None
            self.action_stacks()
        self.hosts.flush()  # every host's row now, not at the next tick
        self.findings.checks_done(ev)
        failures = [f for f in ev.findings if f.level == "failure"]
        warnings = [f for f in ev.findings if f.level == "warning"]
        if failures:
            self.notify(f"checks failed: {failures[0].message}", severity="error", timeout=10)
        elif warnings:
            self.notify(f"checks passed with {len(warnings)} warning(s)", severity="warning")
        else:
            self.notify("checks passed", timeout=3)

    def _gpu_stats(self, ev: GpuStats) -> None:
        info = self.hosts.info(ev.node_rank)
        if info is not None:
            info.gpus = ev.gpus
            info.history.add(ev.gpus)
            self.hosts.refresh_host(ev.node_rank)

    def _show_failure(self, failure: Failure | None) -> None:
        if failure is None or failure == self.failure:
            return
        self.failure = failure
        self.banner.show_failure(failure)
        self.sync_views()  # the failed rank gets a mark
        self.refresh_bindings()

    def show_status(self) -> None:
        status = self.status
        if self._started_at is not None and self.finished is None:
            status.elapsed = self.clock() - self._started_at
            self._measure_rate()
            self.clear_alert()
        status.hosts_up = sum(info.up for info in self.hosts.infos.values())
        self.status_bar.show(status)

    def tick(self) -> None:
        """Every second: the hosts that changed, the status bar, and how long each rank has
        been silent. The hosts table renders every visible cell again for any change (~1 ms
        a cell): at 5 Hz, 32 hosts answering the checks kept the loop from their logins."""
        self.hosts.flush()
        self.show_status()
        self.views.show_silences(self.silences())

    def _measure_rate(self) -> None:
        """Lines per second over the last second or more (the status bar)."""
        now, received = self.clock(), self.logs.received
        if self._rate_mark is None:
            self._rate_mark = (now, received)
            return
        then, before = self._rate_mark
        if now - then >= 1.0:
            self.status.lines_per_s = (received - before) / (now - then)
            self._rate_mark = (now, received)

    def logs_received(self) -> int:
        return self.logs.received

    # -- failure -----------------------------------------------------------------------------

    def action_jump(self) -> None:
        f = self.failure
        if f is None:
            return
        if f.rank is not None:
            self.show_view(View("rank", f.rank))
        else:
            node = next((i.node_rank for i in self.hosts.infos.values() if i.name == f.host), 0)
            self.show_view(View("node", node))
        self.log_view.focus()

    def on_jump_to_failure(self, message: JumpToFailure) -> None:
        self.action_jump()

    # -- hosts ------------------------------------------------------------------------------

    @on(DataTable.RowSelected, "#hosts")
    def _host_chosen(self, event: DataTable.RowSelected) -> None:
        key = event.row_key.value
        info = self.hosts.info(int(key)) if key is not None else None
        if info is not None:
            self.push_screen(HostDetailScreen(info))

    # -- keys -------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """False hides a key (another screen is up, no failure); None shows it disabled."""
        if action in MAIN_ACTIONS and self.screen is not self.screen_stack[0]:
            return False
        if action == "quit" and isinstance(self.screen, QuitScreen):
            return False
        if action == "launch":
            return None if self.running or self.inventory is None else True
        if action in ("stop", "detach"):
            return True if self.running and not self._stopping else None
        if action == "history":
            return None if self.running else True
        if action == "restart":
            return None if self.inventory is None else True
        if action == "jump":
            return self.failure is not None
        if action == "check":
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
) -> Dashboard:
    """The app factory `ddptui` and the tests use (tests fake the run, the cluster, the clock,
    the ids). start: the command it opens on, "launch", "check", "runs", or with `run` (a run
    id, prefix or dir) "attach", "stop" or "stacks" (None: the cluster view)."""
    return Dashboard(
        inventory_path,
        run_factory=run_factory or engine_runs(runs_dir, extra_args),
        clock=clock,
        run_ids=run_ids,
        cluster_factory=cluster_factory,
        start=start,
        run=run,
        rejoin_factory=rejoin_factory,
    )
