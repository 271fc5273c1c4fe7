"""The dashboard: the cluster at a glance from the moment it opens, every rank's log live,
launch / stop / restart, the first failure, every rank's stack when a job stalls.

It renders the engine's events only: `Run(inv, emit=...)` runs in a worker (group
"run") on the app's own loop. The app holds the widgets, each owning what it shows, and three
controllers: the inventory and the run (RunControl, tui/dashboard/control.py), what the run's
events mean for the user (Course, course.py), the dashboard's own connections (Glance,
glance.py). It routes each event to the widgets and the course, and each key to the widget or
controller it concerns.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from textual import on
from textual.actions import SkipAction
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input
from textual.worker import Worker, WorkerState

from ddptui.remote import inventory
from ddptui.remote.agents import pace
from ddptui.remote.events import (
    ChecksDone,
    Event,
    HostState,
    RunFinished,
)
from ddptui.remote.store.runs import new_run_id

from ..text import shown
from . import hostshell
from .control import RejoinFactory, RunControl, RunFactory, addresses, engine_rejoin, engine_runs
from .course import Course
from .find import FindInput
from .glance import ClusterFactory, Glance, engine_cluster
from .hosts import HostsTable
from .logbuffer import View
from .logpane import LogPane
from .messages import ClusterEvent, EngineEvent, JumpToFailure
from .screens import HostDetailScreen, QuitScreen
from .stacks_screen import StacksScreen
from .training import TrainingPanel
from .widgets import FailureBanner, Status, StatusBar

# Actions of the main screen: hidden while another screen (a dialog, the inventory error) is up.
MAIN_ACTIONS = {
    "launch", "stop", "restart", "filter", "errors", "follow", "jump",
    "view_all", "view_next", "view_prev", "check", "deep", "find", "detach", "history",
}  # fmt: skip
# What a read-only dashboard (`ddptui serve` without --control) refuses: whatever starts, stops
# or takes over a job or a host (a shell on it).
CONTROL_ACTIONS = {"launch", "stop", "restart", "deep", "shell"}
NODE_ACTIONS = {"check", "deep", "shell", "stacks"}  # over SSH to the hosts: none to Slurm's
# Under a flood the young generation (the default 700 objects) filled many times a frame: what
# lived for a frame or a batch (strips, timers, held records) reached the oldest generation,
# whose full collections then ran every second. Collected every 10k objects, they die young.
YOUNG_GC = 10_000
GC_DEFAULT = gc.get_threshold()


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
        self.start = start  # the command it opened on: `ddptui launch` launches at once
        self.open_on = run  # `ddptui attach|stop|stacks RUN`: the run to open at once
        self.glance = Glance(self, cluster_factory)
        self.hosts = HostsTable(clock, id="hosts")
        self.banner = FailureBanner(id="banner")
        self.pane = LogPane(clock, id="logs")
        self.find_box = FindInput(self.hosts, self.pane, id="find")
        self.status_bar = StatusBar(id="status")
        self.training = TrainingPanel(id="training")
        self.course = Course(self, clock, hosts=self.hosts, pane=self.pane, banner=self.banner,
                             status_bar=self.status_bar)  # fmt: skip
        self.control = RunControl(
            self, self.glance, self.course, hosts=self.hosts, pane=self.pane,
            inventory_path=inventory_path, run_factory=run_factory or engine_runs(),
            rejoin_factory=rejoin_factory, run_ids=run_ids,
            cluster_later=start == "launch" or run is not None, read_only=read_only, served=served,
        )  # fmt: skip
        if read_only:  # the hints name no key it refuses
            self.status.no_run = "no run yet (read-only)"
            self.pane.findings.keys = "c checks again · h runs · Enter on a host: its facts"

    # What the dashboard shows now, as its widgets, tests and scripts ask it.

    @property
    def inventory(self) -> inventory.Inventory | None:
        return self.control.inventory

    @property
    def run_id(self) -> str | None:
        return self.control.run_id

    @property
    def worker(self) -> Worker[RunFinished] | None:
        return self.control.worker

    @property
    def running(self) -> bool:
        return self.control.running

    @property
    def status(self) -> Status:
        return self.course.status

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
            self.control.use_inventory(inventory.load(self.control.inventory_path))
        except inventory.InventoryError as exc:
            self.control.inventory_error(exc)
        self.course.show()
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
            self.control.open(self.open_on, stop=self.start == "stop")

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

    # -- the run: RunControl's ----------------------------------------------------------------

    def action_launch(self) -> None:
        self.control.launch()

    def action_history(self) -> None:
        self.control.history()

    def action_detach(self) -> None:
        self.control.detach()

    def action_stop(self) -> None:
        self.control.stop()

    def action_restart(self) -> None:
        self.control.restart()

    async def action_quit(self) -> None:
        self.control.quit(viewer=self.read_only)

    def on_exit_app(self) -> None:
        """A served app ends when its browser leaves (the tab closed, the link lost): the run
        it launched is detached now, while its links still carry the word; any other end, a
        crash included, is the engine's on_cancel as its worker is cancelled."""
        run = self.control.current_run
        if run is not None and self.running and run.on_cancel == "detach":
            run.detach()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if worker.group == "deep" and worker.is_finished:  # the deep check's: l again
            self.refresh_bindings()
            if worker.state == WorkerState.ERROR:
                why = f"it ended on an internal error: {worker.error!r}"
                self.pane.findings.deep_progress(why)
        if worker is self.worker and worker.is_finished:
            self.control.ended(worker)

    # -- events: each widget takes what it shows of one, the course the rest -----------------

    def on_engine_event(self, message: EngineEvent) -> None:
        if message.run_id == self.run_id:
            self._route(message.event)

    def on_cluster_event(self, message: ClusterEvent) -> None:
        if not self.glance.current(message):
            return  # a replaced cluster's last words
        event = message.event
        if isinstance(event, HostState):  # the dashboard's own connection, not a run's
            self.hosts.reach(event)
            self.course.show()
        else:
            self._route(event)

    def _route(self, event: Event) -> None:
        self.hosts.apply(event)
        self.pane.apply(event)
        self.training.apply(event)
        if isinstance(event, ChecksDone) and self.start == "stacks" and self.running:
            self.start = None  # `ddptui stacks RUN`: now connected
            self.action_stacks()
        self.course.apply(event)

    def tick(self) -> None:
        """Every second: the status bar, and how long each rank has been silent."""
        self.course.show()
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
        f = self.course.failure
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
        inv = self.control.reload_inventory()
        if inv is None:
            return
        self.pane.show_checks(True)
        self.pane.findings.start(addresses(inv))
        self.glance.check(inv)

    def action_deep(self) -> None:
        """The deep check: the fabric measured on every rank the job would have, shown in
        the checks pane (the inventory read afresh)."""
        inv = self.control.reload_inventory()
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
        self.glance.stacks(self.run_id, Path(self.course.run_dir or "."), flight=flight)

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

    def action_find(self, target: str) -> None:
        self.find_box.open(target)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """False hides a key (another screen is up, no failure, read-only); None shows it
        disabled."""
        if self.read_only and action in CONTROL_ACTIONS:
            return False
        if action in MAIN_ACTIONS and self.screen is not self.screen_stack[0]:
            return False
        if action == "quit" and isinstance(self.screen, QuitScreen):
            return False
        if action in NODE_ACTIONS and self.inventory is not None and self.inventory.slurm:
            return False
        if action == "launch":  # nor while the deep check's job holds the hosts
            busy = self.running or self.glance.deep_checking
            return None if busy or self.inventory is None else True
        if action in ("stop", "detach"):
            return True if self.running and not self.course.stopping else None
        if action == "history":
            return None if self.running else True
        if action == "restart":
            return None if self.inventory is None else True
        if action == "jump":
            return self.course.failure is not None
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
