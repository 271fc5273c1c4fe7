"""Small widgets of the main screen: the status bar, the failure banner, the filter and find
boxes."""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.widgets import Input, Static

from ddptui.remote.events import Failure, HangDetected

from ..text import failure_line
from .colours import theme_colour
from .messages import JumpToFailure
from .plain import plain

TRACEBACK_SHOWN = 4  # traceback lines in the banner; the rank's log has the rest


@dataclass
class Status:
    """What the status bar shows."""

    run_id: str | None = None
    state: str = "idle"
    elapsed: float | None = None
    world_size: int | None = None
    hosts_up: int = 0
    hosts: int = 0
    lines_per_s: float | None = None  # while a run goes
    alert: str = ""  # e.g. a stall, until the ranks speak again
    waiting: str = ""  # a stop's grace: the time the ranks have left to save, until the end
    no_run: str = "no run yet (l launches)"  # read-only: no key launches
    _rate_mark: tuple[float, int] | None = field(default=None, repr=False)  # (when, lines)
    _received_at_alert: int = field(default=0, repr=False)

    def measure(self, now: float, received: int) -> None:
        """Lines per second over the last second or more; a stall's alert ends once a rank
        speaks again."""
        if self.alert and received > self._received_at_alert:
            self.alert = ""
        if self._rate_mark is None:
            self._rate_mark = (now, received)
            return
        then, before = self._rate_mark
        if now - then >= 1.0:
            self.lines_per_s = (received - before) / (now - then)
            self._rate_mark = (now, received)

    def stalled(self, ev: HangDetected, received: int) -> None:
        """The run warned of a stall: said until a rank speaks again."""
        what = "silent" if ev.reason == "silent" else "GPUs idle"
        self.say(f"stalled? {what} {ev.since:.0f} s (d: stacks)", received)

    def say(self, alert: str, received: int) -> None:
        """An alert (a stall, a job Slurm holds pending) until a rank speaks again."""
        self.alert, self._received_at_alert = alert, received

    def text(self) -> str:
        run = f"run {self.run_id}" if self.run_id else self.no_run
        parts = [run, self.state]
        if self.waiting:
            parts.append(self.waiting)
        if self.alert:
            parts.append(self.alert)
        if self.elapsed is not None:
            parts.append(clock_text(self.elapsed))
        if self.world_size:
            parts.append(f"world size {self.world_size}")
        if self.lines_per_s is not None:
            parts.append(f"{rate_text(self.lines_per_s)} lines/s")
        parts.append(f"hosts up {self.hosts_up}/{self.hosts}")
        return " │ ".join(parts)


def rate_text(rate: float) -> str:
    """`950`, `12.3k`, `1.2M`."""
    if rate >= 1e6:
        return f"{rate / 1e6:.1f}M"
    return f"{rate / 1e3:.1f}k" if rate >= 1e4 else f"{rate:.0f}"


def clock_text(seconds: float) -> str:
    s = int(seconds)
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02}:{s % 60:02}" if h else f"{m:02}:{s % 60:02}"


STATE_STYLES = {
    "running": "text-success",
    "succeeded": "text-success",
    "failed": "text-error",
    "unreachable": "text-error",
    "error": "text-error",
    "stopping": "text-warning",
    "restarting": "text-warning",
    "stopped": "text-warning",
    "connecting": "text-warning",
    "submitted": "text-warning",
    "pending": "text-warning",
}


class StatusBar(Static):
    """run id │ state │ elapsed │ world size │ hosts up / total"""

    _shown = ""

    def show(self, status: Status) -> None:
        words = status.text()
        if words == self._shown:  # an update re-lays out the screen: only when it changed
            return
        self._shown = words
        text = Text(words)
        if colour := STATE_STYLES.get(status.state):
            start = text.plain.find(f" │ {status.state}") + 3
            text.stylize(f"bold {theme_colour(self, colour)}", start, start + len(status.state))
        if status.alert:
            start = text.plain.find(status.alert)
            colour = theme_colour(self, "text-warning")
            text.stylize(f"bold {colour}", start, start + len(status.alert))
        self.update(text, layout=False)  # one line, always: no need to lay out the screen


class FailureBanner(Static):
    """The first failing rank, its host, exit code and traceback tail; a click shows its log."""

    def show_failure(self, failure: Failure) -> None:
        colour = theme_colour(self, "text-error")
        text = Text()
        text.append("✗ ", style=f"bold {colour}")
        text.append(failure_line(failure), style="bold")
        for line in _tail(failure):
            text.append(f"\n  {line}", style="dim" if line[:1].isspace() else colour)
        self.update(text)
        where = f"rank {failure.rank}" if failure.rank is not None else failure.host
        self.border_title = "first failure"
        self.border_subtitle = plain(f"j: {where}'s log")
        self.set_class(True, "-shown")

    def hide(self) -> None:
        self.set_class(False, "-shown")

    def on_click(self, event: events.Click) -> None:
        self.post_message(JumpToFailure())


def _tail(failure: Failure) -> list[str]:
    """The traceback's last lines (its last line is already the failure's message), or what a
    host's health verdict rests on."""
    lines = [line for line in failure.traceback if line.strip()]
    if lines and lines[-1].strip() == failure.message:
        lines.pop()
    return lines[-TRACEBACK_SHOWN:] + list(failure.evidence)


class ClearableInput(Input):
    """A box that escape empties, and submits empty (the filter and find boxes)."""

    def action_clear(self) -> None:
        self.value = ""
        self.post_message(self.Submitted(self, ""))


class FilterInput(ClearableInput):
    """The regex filter of the log view: enter keeps it, escape clears it."""

    BINDINGS = [
        Binding("escape", "clear", "Clear filter", id="filter-clear", tooltip="No filter"),
    ]
