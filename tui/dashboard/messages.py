"""The dashboard's own messages, as dataclasses in one place."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from ddptui.remote.events import Event


@dataclass
class EngineEvent(Message):
    """An engine event, posted by the `emit` callback the app gives `Run` (remote/run/runner.py)."""

    run_id: str  # events of a run that is no longer current are dropped
    event: Event


@dataclass
class ClusterEvent(Message):
    """An event of the dashboard's own connections (checks, live GPU figures), no run's."""

    generation: int  # events of a cluster the dashboard has replaced are dropped
    event: Event


@dataclass
class JumpToFailure(Message):
    """The failure banner was clicked: show the failing rank's log."""
