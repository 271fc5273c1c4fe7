"""The dashboard's log pane and views list: what is drawn, which view, the filter and the find
box. A mixin of the Dashboard (tui/app.py), which owns the widgets and the buffers.

The views list starts with the checks' findings (shown where the logs go until a run starts),
then all ranks, each rank (with how long since its last line while a run goes), each node's
own lines. `/` filters the log by regex; in the hosts pane or the views list it finds instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.text import Text
from textual.widgets import Input, OptionList

from .colours import rank_colour
from .findings import FindingsView
from .hosts import HostsTable
from .logbuffer import ALL, LogBuffer, View
from .logview import RankLog
from .views import CHECKS, LABEL, Entry, ViewList
from .widgets import FilterInput, FindInput

if TYPE_CHECKING:
    from textual.app import App

    from remote.events import Failure, RunFinished

    _Base = App[int]
else:
    _Base = object

FIND_HINTS = {"hosts": "find hosts: name or address", "views": "find views: r12, node3, …"}


class LogPane(_Base):
    logs: LogBuffer
    log_view: RankLog
    views: ViewList
    findings: FindingsView
    hosts: HostsTable
    filter_box: FilterInput
    find_box: FindInput
    follow: bool
    _paused_by_scroll: bool
    showing_checks: bool
    failure: Failure | None
    failures: list[Failure]
    finished: RunFinished | None
    clock: Callable[[], float]
    _started_at: float | None
    _view_count: int

    # -- drawing ----------------------------------------------------------------------------

    def flush(self) -> None:
        """Draw what arrived since the last flush (timer): new views, new lines of this one."""
        if self._view_count != len(self.logs.by_view):
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

    # -- views ------------------------------------------------------------------------------

    def sync_views(self) -> None:
        """The views list as it should be now: new views, failure marks."""
        self._view_count = len(self.logs.by_view)
        failed = {f.rank for f in self.failures + ([self.failure] if self.failure else [])}
        entries: list[tuple[Entry, Text]] = [(CHECKS, self._checks_prompt())]
        for v in self.logs.views():
            text = self._view_label(v, v.kind == "rank" and v.key in failed)[:LABEL]
            entries.append((v, self._view_prompt(v, text)))
        self.views.show(entries, self.current_entry)

    def silences(self) -> dict[View, float]:
        """How long since each rank's last line (since the run started, if none yet), while
        a run goes."""
        if self._started_at is None or self.finished is not None:
            return {}
        now, start, seen = self.clock(), self._started_at, self.logs.last_seen
        return {v: now - seen.get(v, start) for v in self.logs.by_view if v.kind == "rank"}

    @property
    def current_entry(self) -> Entry:
        return CHECKS if self.showing_checks else self.logs.view

    def _checks_prompt(self) -> Text:
        findings = [f for h in self.findings.checked.values() for f in h.findings]
        mark = " "
        if any(f.level == "failure" for f in findings):
            mark = "✗"
        elif any(f.level == "warning" for f in findings):
            mark = "!"
        return Text(f"{mark}checks", style="bold")

    def _view_label(self, view: View, failed: bool) -> str:
        if view.kind == "all":
            return " all ranks"
        host = self.logs.hosts.get(self.logs.rank_hosts.get(view.key, -1), "")
        if view.kind == "node":
            host = self.logs.hosts.get(view.key, f"node {view.key}")
            return f" {host} (own)"
        return f"{'✗' if failed else ' '}r{view.key} {host}"

    def _view_prompt(self, view: View, text: str) -> Text:
        if view.kind != "rank":
            return Text(text, style="italic" if view.kind == "node" else "bold")
        colour = rank_colour(view.key, self.current_theme.dark)
        return Text.assemble(text[:1], (text[1:], colour))

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

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option_list is not self.views:
            return
        valid, entry = self.views.entry_at(event.option_index)
        if not valid:
            return
        if entry is CHECKS:
            self.show_checks(True)
        else:
            self.show_view(entry)

    def action_view_all(self) -> None:
        self.show_view(ALL)

    def action_view_next(self) -> None:
        self._step_view(1)

    def action_view_prev(self) -> None:
        self._step_view(-1)

    def _step_view(self, step: int) -> None:
        entries: list[Entry] = [CHECKS, *self.logs.views()]
        current = self.current_entry
        at = entries.index(current) if current in entries else 0
        entry = entries[(at + step) % len(entries)]
        if entry is CHECKS:
            self.show_checks(True)
        else:
            self.show_view(entry)

    def action_errors(self) -> None:
        self.logs.errors_only = not self.logs.errors_only
        self._redraw()
        self._title()

    def action_follow(self) -> None:
        self._set_follow(not self.follow)

    # -- filter (the log) and find (the hosts pane, the views list) -----------------------

    def action_filter(self) -> None:
        box = self.filter_box
        box.value = self.logs.pattern.pattern if self.logs.pattern else ""
        box.add_class("-shown")
        box.focus()

    def action_find(self, target: str) -> None:
        box = self.find_box
        box.target = target
        box.placeholder = FIND_HINTS[target]
        box.value = self.hosts.needle if target == "hosts" else self.views.needle
        box.add_class("-shown")
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input is self.filter_box:
            valid, pattern = self._compile(event.value)
            if valid:
                self._apply_filter(pattern)
        elif event.input is self.find_box:
            self._find(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input is self.find_box:
            self._find(event.value)
            self.find_box.remove_class("-shown")
            (self.hosts if self.find_box.target == "hosts" else self.views).focus()
            return
        if event.input is not self.filter_box:
            return
        valid, pattern = self._compile(event.value)
        if not valid:
            self.notify(str(self.filter_box.border_title), severity="error", timeout=4)
            return
        self._apply_filter(pattern)
        self.filter_box.remove_class("-shown")
        self.log_view.focus()

    def _find(self, text: str) -> None:
        if self.find_box.target == "hosts":
            self.hosts.find(text)
        else:
            self.views.find(text, self.current_entry)

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
