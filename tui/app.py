"""The dashboard: the hosts, every rank's log live, launch / stop / restart, the first failure.

It renders the engine's events only: `remote.run.Run(inv, emit=...)` runs in a worker (group
"run") on the app's own loop, and `emit` posts each event as an `EngineEvent` message. Log lines
go into bounded buffers (`LogBuffer`); a timer draws the visible view's new lines in one batch.
"""

from __future__ import annotations

import gc
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Protocol

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, OptionList
from textual.widgets.option_list import Option
from textual.worker import Worker, WorkerState

from remote import inventory
from remote.events import (
    ChecksDone,
    Event,
    Failure,
    GpuStats,
    HostChecked,
    HostState,
    LogBatch,
    NodeExited,
    NodeRanks,
    NodeStarted,
    Notice,
    RunFinished,
    RunStarted,
)
from remote.failures import first
from remote.run import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, Emit, Run, new_run_id

from .colours import rank_colour
from .hosts import HostsTable
from .logbuffer import ALL, LogBuffer, View
from .logview import RankLog
from .messages import EngineEvent, JumpToFailure
from .screens import HostDetailScreen, InventoryErrorScreen, QuitScreen
from .widgets import FailureBanner, FilterInput, Status, StatusBar

FLUSH_EVERY = 0.2  # seconds between drawing batches of new lines (5 frames a second)
VIEW_LABEL = 16  # columns of a view's name in the views list
SEVERITY: dict[str, SeverityLevel] = {"info": "information", "warning": "warning", "error": "error"}
# Actions of the main screen: hidden while another screen (a dialog, the inventory error) is up.
MAIN_ACTIONS = {
    "launch", "stop", "restart", "filter", "errors", "follow", "jump",
    "view_all", "view_next", "view_prev",
}  # fmt: skip


class RunLike(Protocol):
    """What the app needs of a run (`remote.run.Run`; tests and the benchmark may fake it)."""

    run_id: str

    def execute(self) -> Awaitable[RunFinished]: ...
    def stop(self) -> None: ...


RunFactory = Callable[[inventory.Inventory, Emit, str], RunLike]


def engine_runs(runs_dir: Path | None = None, extra_args: Sequence[str] = ()) -> RunFactory:
    """Runs of the real engine; their logs go under `runs_dir` (default: the user data dir);
    `extra_args` go to the training script after the inventory's `args`."""

    def make(inv: inventory.Inventory, emit: Emit, run_id: str) -> RunLike:
        run_dir = runs_dir / run_id if runs_dir is not None else None
        return Run(inv, emit, run_id=run_id, run_dir=run_dir, extra_args=extra_args)

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
        Binding("j", "jump", "Failure", id="jump-to-failure", tooltip="Show its log"),
    ]  # fmt: skip

    def __init__(
        self,
        inventory_path: Path,
        *,
        run_factory: RunFactory | None = None,
        clock: Callable[[], float] = time.monotonic,
        run_ids: Callable[[], str] = new_run_id,
        start: str | None = None,
    ) -> None:
        super().__init__()
        self.run_ids = run_ids
        self.start = start  # the command it opened on: `ddptui launch` launches at once
        self.inventory_path = inventory_path
        self.inventory: inventory.Inventory | None = None
        self.run_factory = run_factory or engine_runs()
        self.clock = clock
        self.current_run: RunLike | None = None
        self.run_id: str | None = None
        self.worker: Worker[RunFinished] | None = None
        self.logs = LogBuffer()
        self.status = Status()
        self.follow = True
        self._paused_by_scroll = False
        self.failure: Failure | None = None
        self.failures: list[Failure] = []
        self.finished: RunFinished | None = None
        self._started_at: float | None = None
        self._stopping = False  # the user asked the run to stop
        self._after_run: Callable[[], None] | None = None  # restart or quit, once it ended
        self._views: list[View] = []
        self._view_labels: list[str] = []
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
        }

    # -- layout -----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield HostsTable(id="hosts")
        yield FailureBanner(id="banner")
        with Horizontal(id="body"):
            yield OptionList(id="views")
            yield RankLog(id="log")
        yield FilterInput(placeholder="regex; enter keeps it, escape clears it", id="filter")
        yield StatusBar(id="status")
        yield Footer(show_command_palette=False)  # ctrl+p still opens it: room for the keys

    def on_mount(self) -> None:
        self.hosts = self.query_one(HostsTable)
        self.banner = self.query_one(FailureBanner)
        self.views = self.query_one("#views", OptionList)
        self.log_view = self.query_one(RankLog)
        self.filter_box = self.query_one(FilterInput)
        self.status_bar = self.query_one(StatusBar)
        self.hosts.border_title = "hosts"
        self.views.border_title = "views"
        self._sync_views()
        self._title()
        self.log_view.focus()
        self.set_interval(FLUSH_EVERY, self.flush)
        self.set_interval(1.0, self.show_status)
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

    def on_unmount(self) -> None:
        gc.unfreeze()  # the next app in this process (tests) starts from a clean slate

    # -- inventory --------------------------------------------------------------------------

    def _use_inventory(self, inv: inventory.Inventory) -> None:
        self.inventory = inv
        self.hosts.set_hosts(inv.hosts)
        self.status.hosts = len(inv.hosts)
        self.sub_title = str(inv.path)
        self.show_status()
        self.refresh_bindings()

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
        try:
            inv = inventory.load(self.inventory_path)  # edits since the last run count
        except inventory.InventoryError as exc:
            self._inventory_error(exc)
            return
        self._use_inventory(inv)
        self._reset()
        self.run_id = run_id = self.run_ids()
        self.current_run = self.run_factory(inv, partial(self._emit, run_id), run_id)
        self.status.run_id, self.status.state = run_id, "connecting"
        self.worker = self.run_worker(
            self.current_run.execute(), name="run", group="run", exit_on_error=False
        )
        self.refresh_bindings()
        self.show_status()

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

    def _quit_answered(self, stop: bool | None) -> None:
        if stop and self.running:
            self._after_run = self._quit_now
            self.action_stop()
            self.notify("stopping the job on every host, then quitting (q again: leave now)")
        elif stop:
            self.exit(EXIT_OK)

    def _quit_now(self) -> None:
        self.exit(EXIT_OK)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker is not self.worker or not event.worker.is_finished:
            return
        if event.state == WorkerState.ERROR:
            self.status.state = "error"
            self.notify(f"the run ended on an internal error: {event.worker.error!r}",
                        severity="error", timeout=30)  # fmt: skip
        self.refresh_bindings()
        self.show_status()
        after, self._after_run = self._after_run, None
        if after is not None:
            after()

    def _reset(self) -> None:
        """A new run: empty logs, no failure, host states start over."""
        self.logs = LogBuffer()
        self.log_view.clear()
        self.failure, self.failures, self.finished = None, [], None
        self._started_at, self._stopping = None, False
        self.follow, self._paused_by_scroll = True, False
        self.banner.hide()
        self.hosts.reset()
        self.status = Status(hosts=self.status.hosts, world_size=self.status.world_size)
        self._sync_views()
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
        self.status.world_size = ev.world_size or self.status.world_size
        self.log_view.border_subtitle = f"logs in {_home(ev.run_dir)}"
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
            info.gpus = ev.gpus
            self.hosts.refresh_host(ev.node_rank)
            self.show_status()

    def _checks_done(self, ev: ChecksDone) -> None:
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
            self.hosts.refresh_host(ev.node_rank)

    def _show_failure(self, failure: Failure | None) -> None:
        if failure is None or failure == self.failure:
            return
        self.failure = failure
        self.banner.show_failure(failure)
        self._views = []  # relabel: the failed rank gets a mark
        self.refresh_bindings()

    # -- drawing ----------------------------------------------------------------------------

    def flush(self) -> None:
        """Draw what arrived since the last flush (timer): new views, new lines of this one."""
        if len(self._views) != len(self.logs.by_view) + 1:
            self._sync_views()
        log = self.log_view
        if self.follow and log.scrolled_up:
            self._set_follow(False, by_scroll=True)  # hold the view still while they read
        elif not self.follow and self._paused_by_scroll and log.is_vertical_scroll_end:
            self._set_follow(True)  # they scrolled back down to the end
        if self.follow:
            log.show(self.logs.take(), widths=self._widths())
            if not log.is_vertical_scroll_end:  # the pane changed size (banner, terminal)
                log.pin_to_end()

    def _set_follow(self, on: bool, by_scroll: bool = False) -> None:
        self.follow = on
        self._paused_by_scroll = by_scroll
        if on:
            self._redraw()
        self._title()

    def _redraw(self) -> None:
        """Draw the view from the buffer, at its end, following again."""
        self.follow, self._paused_by_scroll = True, False
        self.log_view.replace(self.logs.select(), widths=self._widths())

    def _widths(self) -> tuple[int, int] | None:
        return self.logs.tag_widths() if self.logs.view.kind == "all" else None

    def _title(self) -> None:
        logs = self.logs
        parts = [logs.view.label(logs.hosts)]
        if logs.pattern is not None:
            parts.append(f"/{logs.pattern.pattern}/")
        if logs.errors_only:
            parts.append("errors only")
        parts.append("following" if self.follow else "paused (f follows)")
        self.log_view.border_title = " · ".join(parts)

    def show_status(self) -> None:
        status = self.status
        if self._started_at is not None and self.finished is None:
            status.elapsed = self.clock() - self._started_at
        status.hosts_up = sum(info.up for info in self.hosts.infos.values())
        self.status_bar.show(status)

    # -- views ------------------------------------------------------------------------------

    def _sync_views(self) -> None:
        views = self.logs.views()
        failed = {f.rank for f in self.failures + ([self.failure] if self.failure else [])}
        labels = [self._view_label(v, v.kind == "rank" and v.key in failed) for v in views]
        if views == self._views and labels == self._view_labels:
            return
        self._views, self._view_labels = views, labels
        self.views.clear_options()
        self.views.add_options(
            Option(self._view_prompt(v, label), id=f"{v.kind}-{v.key}")
            for v, label in zip(views, labels, strict=True)
        )
        self.views.highlighted = views.index(self.logs.view) if self.logs.view in views else 0

    def _view_label(self, view: View, failed: bool) -> str:
        if view.kind == "all":
            return "all ranks"
        host = self.logs.hosts.get(self.logs.rank_hosts.get(view.key, -1), "")
        if view.kind == "node":
            host = self.logs.hosts.get(view.key, f"node {view.key}")
            return f"{host} (own)"[:VIEW_LABEL]
        return (f"{'✗' if failed else ' '}r{view.key} {host}")[:VIEW_LABEL]

    def _view_prompt(self, view: View, label: str) -> Text:
        if view.kind != "rank":
            return Text(label, style="italic" if view.kind == "node" else "bold")
        colour = rank_colour(view.key, self.current_theme.dark)
        return Text.assemble(label[:1], (label[1:], colour))

    def show_view(self, view: View) -> None:
        if view == self.logs.view:
            return
        self.logs.view = view
        self._redraw()
        self._title()
        if view in self._views:
            self.views.highlighted = self._views.index(view)

    @on(OptionList.OptionSelected, "#views")
    def _view_chosen(self, event: OptionList.OptionSelected) -> None:
        index = event.option_index
        if 0 <= index < len(self._views):
            self.show_view(self._views[index])

    def action_view_all(self) -> None:
        self.show_view(ALL)

    def action_view_next(self) -> None:
        self._step_view(1)

    def action_view_prev(self) -> None:
        self._step_view(-1)

    def _step_view(self, step: int) -> None:
        views = self.logs.views()
        at = views.index(self.logs.view) if self.logs.view in views else 0
        self.show_view(views[(at + step) % len(views)])

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

    def action_errors(self) -> None:
        self.logs.errors_only = not self.logs.errors_only
        self._redraw()
        self._title()

    def action_follow(self) -> None:
        self._set_follow(not self.follow)

    # -- filter -----------------------------------------------------------------------------

    def action_filter(self) -> None:
        box = self.filter_box
        box.value = self.logs.pattern.pattern if self.logs.pattern else ""
        box.add_class("-shown")
        box.focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        valid, pattern = self._compile(event.value)
        if valid:
            self._apply_filter(pattern)

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        valid, pattern = self._compile(event.value)
        if not valid:
            self.notify(str(self.filter_box.border_title), severity="error", timeout=4)
            return
        self._apply_filter(pattern)
        self.filter_box.remove_class("-shown")
        self.log_view.focus()

    def _compile(self, text: str) -> tuple[bool, re.Pattern[str] | None]:
        """(valid, regex); no text is a valid empty filter. An invalid one is noted in the box."""
        box = self.filter_box
        pattern = None
        try:
            # Smart case: lowercase matches any case, as in less -i and ripgrep -S.
            if text:
                pattern = re.compile(text, 0 if text != text.lower() else re.IGNORECASE)
        except re.error as exc:
            box.add_class("-invalid")
            box.border_title = f"invalid regex: {exc}"
            return False, None
        box.remove_class("-invalid")
        box.border_title = "filter"
        return True, pattern

    def _apply_filter(self, pattern: re.Pattern[str] | None) -> None:
        current = self.logs.pattern
        if (pattern and pattern.pattern) == (current and current.pattern):
            return
        self.logs.pattern = pattern
        self._redraw()
        self._title()

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
        if action == "stop":
            return True if self.running and not self._stopping else None
        if action == "restart":
            return None if self.inventory is None else True
        if action == "jump":
            return self.failure is not None
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


def _home(path: str) -> str:
    home = str(Path.home())
    return "~" + path[len(home) :] if path.startswith(home + "/") else path


def create_app(
    inventory_path: Path = Path("inventory.yaml"),
    *,
    runs_dir: Path | None = None,
    extra_args: Sequence[str] = (),
    run_factory: RunFactory | None = None,
    clock: Callable[[], float] = time.monotonic,
    run_ids: Callable[[], str] = new_run_id,
    start: str | None = None,
) -> Dashboard:
    """The app factory `ddptui` and the tests use (tests fake the run, the clock, the ids).
    start: the command it opens on, "launch" or "check" (None: idle)."""
    return Dashboard(
        inventory_path,
        run_factory=run_factory or engine_runs(runs_dir, extra_args),
        clock=clock,
        run_ids=run_ids,
        start=start,
    )
