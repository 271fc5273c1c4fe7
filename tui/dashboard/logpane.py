"""The log pane: the views list, the log of the current view (or the checks' findings in its
place), and the filter box. A widget that owns its state: every rank's recent lines (LogBuffer),
the view shown, follow, the filter; the app hands it the run's events and keys.

The views list starts with the checks' findings (shown where the logs go until a run starts),
then all ranks, each rank (with how long since its last line while a run goes), each node's
own lines. `/` filters the log by regex; in the views list it finds views instead (the app's
find box). New lines are drawn in one batch every FLUSH_EVERY, the visible view's only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Input

from ddptui.remote.events import (
    ChecksDone,
    DeepChecked,
    DeepProgress,
    Event,
    HostChecked,
    LogBatch,
    NodeRanks,
    NodeStarted,
    RunFinished,
    RunStarted,
)

from ..text import tilde
from .colours import rank_colour
from .findings import FindingsView
from .logbuffer import ALL, LogBuffer, View
from .logview import RankLog
from .plain import plain
from .views import CHECKS, LABEL, Entry, ViewList
from .widgets import FilterInput

FLUSH_EVERY = 0.2  # seconds between drawing batches of new lines (5 frames a second)


class LogPane(Vertical):
    def __init__(self, clock: Callable[[], float], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.clock = clock
        self.logs = LogBuffer(clock=clock)
        self.follow = True
        self._paused_by_scroll = False
        self.showing_checks = True  # the checks' findings where the logs go, until a run
        self.failed: set[int | None] = set()  # ranks marked in the views list
        self.started_at: float | None = None  # while a run goes: each rank's silence
        self._view_count = -1  # log views in the views list
        self.filter_error = ""
        self.views = ViewList(self._label, self._silence, id="views")
        self.log_view = RankLog(id="log")
        self.findings = FindingsView(id="findings")
        self.filter_box = FilterInput(
            placeholder="regex; enter keeps it, escape clears it", id="filter"
        )

    def compose(self) -> ComposeResult:
        with Horizontal(id="body", classes="-checks"):
            yield self.views
            yield self.log_view
            yield self.findings
        yield self.filter_box

    def on_mount(self) -> None:
        self.views.border_title = "views"
        self.sync_views()
        self._title()
        self.set_interval(FLUSH_EVERY, self.flush)

    # -- the run's events -------------------------------------------------------------------

    def reset(self) -> None:
        """A new run: empty logs, following, no marks."""
        self.logs = LogBuffer(clock=self.clock)
        self.log_view.clear()
        self.failed, self.started_at = set(), None
        self.follow, self._paused_by_scroll = True, False
        self.sync_views()
        self._title()

    def add(self, batch: LogBatch) -> None:
        """The hot path: every batch of every rank, into the buffers; drawn at the next flush."""
        self.logs.add(batch)

    def apply(self, event: Event) -> None:
        """What the pane shows of a run's (or the checks') events."""
        if isinstance(event, NodeStarted | NodeRanks):
            self.logs.add_ranks(event.node_rank, event.host, event.ranks)
        elif isinstance(event, RunStarted):
            self.started_at = self.clock()
            self.log_view.border_subtitle = plain(f"logs in {tilde(event.run_dir)}")
        elif isinstance(event, RunFinished):
            self.started_at = None
        elif isinstance(event, HostChecked):
            self.findings.host_checked(event)
            self.sync_views()  # the checks' mark
        elif isinstance(event, ChecksDone):
            self.findings.checks_done(event)
        elif isinstance(event, DeepProgress):
            self.findings.deep_progress(event.text)
        elif isinstance(event, DeepChecked):
            self.findings.deep_checked(event)

    def mark_failed(self, ranks: Iterable[int | None]) -> None:
        self.failed.update(ranks)
        self.views.refresh()

    @property
    def received(self) -> int:
        return self.logs.received

    # -- drawing ----------------------------------------------------------------------------

    def flush(self) -> None:
        """Draw what arrived since the last flush (timer): new views, new lines of this one."""
        if self._view_count != self.logs.view_count:
            self.sync_views()
        if self.showing_checks:
            self.logs.take()  # the log is hidden: what arrives is drawn when it is shown
            return
        log = self.log_view
        if self.follow and log.scrolled_up:
            self._set_follow(False, by_scroll=True)  # hold the view still while they read
        elif not self.follow and self._paused_by_scroll and log.is_vertical_scroll_end:
            self._set_follow(True)  # they scrolled back down to the end
        if self.follow:
            log.show(self.logs.take(), widths=self._widths())
            if not log.is_vertical_scroll_end:  # the pane changed size (banner, terminal)
                log.pin_to_end()

    def tick(self) -> None:
        """Every second, while a run goes: each rank's silence, in the rows on screen."""
        if self.started_at is not None:
            self.views.refresh()

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
        self.log_view.border_title = plain(" · ".join(parts))

    # -- views ------------------------------------------------------------------------------

    def sync_views(self) -> None:
        """The views list as it should be now: new views."""
        self._view_count = self.logs.view_count
        self.views.show([CHECKS, *self.logs.views()], self.current_entry)

    def _silence(self, view: View) -> float | None:
        """How long since the rank's last line (since the run started, if none yet), while a
        run goes."""
        if self.started_at is None or view.kind != "rank":
            return None
        return self.clock() - self.logs.last_seen.get(view.key, self.started_at)

    @property
    def current_entry(self) -> Entry:
        return CHECKS if self.showing_checks else self.logs.view

    def _label(self, entry: Entry) -> Text:
        """A row of the views list: `✗r12 node3` in the rank's colour, a mark if it failed."""
        if entry is CHECKS:
            return Text(f"{self.findings.mark()}checks", style="bold")
        if entry.kind == "all":
            return Text(" all ranks", style="bold")
        hosts = self.logs.hosts
        if entry.kind == "node":
            return Text(f" {hosts.get(entry.key, f'node {entry.key}')} (own)"[:LABEL], "italic")
        host = hosts.get(self.logs.rank_hosts.get(entry.key, -1), "")
        mark = "✗" if entry.key in self.failed else " "
        colour = rank_colour(entry.key, self.app.current_theme.dark)
        return Text.assemble(mark, (f"r{entry.key} {host}"[: LABEL - 1], colour))

    def show_view(self, view: View) -> None:
        if view == self.logs.view and not self.showing_checks:
            return
        self.logs.view = view
        self.show_checks(False)
        self._redraw()
        self._title()
        self.views.highlight(view)

    def show_checks(self, on: bool) -> None:
        """The checks' findings in place of the log (on), or the log again."""
        if on == self.showing_checks:
            return
        self.showing_checks = on
        self.query_one("#body").set_class(on, "-checks")
        if not on:
            self._redraw()
        self.views.highlight(self.current_entry)

    def on_view_list_chosen(self, event: ViewList.Chosen) -> None:
        event.stop()
        if event.entry is CHECKS:
            self.show_checks(True)
        else:
            self.show_view(event.entry)

    def step_view(self, step: int) -> None:
        """The next (or previous) view: the checks, all ranks, each rank, each node's own."""
        entries: list[Entry] = [CHECKS, *self.logs.views()]
        current = self.current_entry
        at = entries.index(current) if current in entries else 0
        entry = entries[(at + step) % len(entries)]
        if entry is CHECKS:
            self.show_checks(True)
        else:
            self.show_view(entry)

    def show_all(self) -> None:
        self.show_view(ALL)

    def toggle_errors(self) -> None:
        self.logs.errors_only = not self.logs.errors_only
        self._redraw()
        self._title()

    def toggle_follow(self) -> None:
        self._set_follow(not self.follow)

    def find_views(self, needle: str) -> None:
        self.views.find(needle, self.current_entry)

    # -- the filter -------------------------------------------------------------------------

    def open_filter(self) -> None:
        box = self.filter_box
        box.value = self.logs.pattern.pattern if self.logs.pattern else ""
        box.add_class("-shown")
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input is self.filter_box:
            event.stop()
            valid, pattern = self._compile(event.value)
            if valid:
                self._apply_filter(pattern)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input is not self.filter_box:
            return
        event.stop()
        valid, pattern = self._compile(event.value)
        if not valid:
            self.notify(self.filter_error, severity="error", timeout=4)
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
            self.filter_error = f"invalid regex: {exc}"
            box.add_class("-invalid")
            box.border_title = plain(self.filter_error)
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
