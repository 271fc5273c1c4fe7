"""The training panel: step, speed, time left, the trackers' links, job.checkpoint's newest (and
the steps the last failed attempt lost), and a metric's curve over
steps across attempts (a restart marked), from the engine's Progress events; nothing here
reads a line. Hidden until the lines say some progress; `m` (the panel focused, or a click
on it) draws the next metric."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.widgets import Static
from textual_plotext import PlotextPlot

from ddptui.remote.events import (
    CheckpointSaved,
    Event,
    Progress,
    RunStarted,
    StepsLost,
    TrackerLink,
)

from ..plot import draw, pick
from ..text import checkpoint_text
from .plain import plain

RANKS_SHOWN = 4  # the slowest ranks named beside the run's figures


class TrainingPanel(Horizontal, can_focus=True):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("m", "next_metric", "Metric", tooltip="Plot the next metric"),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "training"
        self.figures = Static(id="training-figures")
        self.plot = PlotextPlot(id="training-plot")
        self.metric: str | None = None  # the one the user picked (m), else loss
        self.last: Progress | None = None
        self.links: list[TrackerLink] = []
        self.saved: CheckpointSaved | None = None
        self.lost: StepsLost | None = None

    def compose(self) -> ComposeResult:
        yield self.figures
        yield self.plot

    def apply(self, event: Event) -> None:
        if isinstance(event, Progress):
            self.last = event
            self.add_class("-shown")
            self._show()
        elif isinstance(event, TrackerLink):
            self.links.append(event)
            self.add_class("-shown")
            self._show()
        elif isinstance(event, CheckpointSaved | StepsLost):
            if isinstance(event, CheckpointSaved):
                self.saved = event
            else:
                self.lost = event
            self.add_class("-shown")
            self._show()
        elif isinstance(event, RunStarted):  # a new run: nothing of the last one's
            self.last, self.links, self.saved, self.lost = None, [], None, None
            self.remove_class("-shown")

    def action_next_metric(self) -> None:
        names = sorted(self.last.series) if self.last else []
        if names:
            now = pick(names, self.metric) or pick(names)
            self.metric = names[(names.index(now) + 1) % len(names)] if now else None
            self._show()

    def _show(self) -> None:
        p = self.last
        lines = [p.text() or "no step yet"] if p else []
        if p is not None and p.attempt:
            lines.append(f"attempt {p.attempt + 1}")
        if p is not None and len(p.ranks) > 1:
            stepped = [r for r in p.ranks if r.step is not None]
            slow = sorted(stepped, key=lambda r: r.step or 0)[:RANKS_SHOWN]
            lines.append("slowest: " + ", ".join(f"r{r.rank} {r.step}" for r in slow))
        if self.saved is not None:
            lines.append("checkpoint: " + checkpoint_text(dataclasses.asdict(self.saved)))
        if self.lost is not None:
            lines.append(self.lost.text())
        lines += [link.text() for link in self.links]
        self.figures.update(plain("\n".join(lines)))
        name = pick(sorted(p.series), self.metric) if p else None
        if p is None or name is None:
            return
        starts = [(a, s) for a, s in p.starts]
        draw(self.plot.plt, name, p.series[name], starts)
        self.plot.refresh()
