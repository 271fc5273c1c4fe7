"""The dashboard's own messages, as dataclasses in one place.

An engine event comes in as one of these (but for log lines, which the log view cleans as it
draws them), and is made safe to show as it does: no text a host or a rank sent reaches a widget
with an escape sequence or a control character in it (tui/text.py: `shown`).
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from ddptui.remote.events import Event, Progress

from ..text import shown


def _shown(event: Event) -> Event:
    """The event as it may be shown. Progress, once a second with every curve, is left as it
    is: its only texts are metric names, of word characters alone (remote/host/progress.py:
    METRIC), and walking its points took tens of milliseconds of the app's loop."""
    return event if type(event) is Progress else shown(event)


@dataclass
class EngineEvent(Message):
    """An engine event, posted by the `emit` callback the app gives `Run` (remote/run/runner.py)."""

    run_id: str  # events of a run that is no longer current are dropped
    event: Event

    def __post_init__(self) -> None:
        super().__post_init__()
        self.event = _shown(self.event)


@dataclass
class ClusterEvent(Message):
    """An event of the dashboard's own connections (checks, live GPU figures), no run's."""

    generation: int  # events of a cluster the dashboard has replaced are dropped
    event: Event

    def __post_init__(self) -> None:
        super().__post_init__()
        self.event = _shown(self.event)


@dataclass
class JumpToFailure(Message):
    """The failure banner was clicked: show the failing rank's log."""
