"""A metric's curve over steps, drawn with plotext: `ddptui plot RUN [METRIC]` and the
dashboard's training panel draw the same figure. Each attempt is a line of its own, and a
restart is a vertical mark where the next attempt began."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Points = Sequence[Sequence[float]]  # (step, value, attempt)


def pick(metrics: Sequence[str], wanted: str | None = None) -> str | None:
    """The metric to draw: the one asked for, else `loss`, else one named *loss, else the first."""
    if wanted is not None:
        return wanted if wanted in metrics else None
    losses = [m for m in metrics if m == "loss"] or [m for m in metrics if "loss" in m]
    found = losses or list(metrics)
    return found[0] if found else None


def draw(plt: Any, name: str, points: Points, starts: Sequence[Sequence[Any]] = ()) -> None:
    """The figure on plotext's module (or a PlotextPlot's `plt`): one line per attempt."""
    plt.clear_figure() if hasattr(plt, "clear_figure") else plt.clear_data()
    attempts: dict[int, tuple[list[float], list[float]]] = {}
    for step, value, attempt in points:
        xs, ys = attempts.setdefault(int(attempt), ([], []))
        xs.append(step)
        ys.append(value)
    for attempt, (xs, ys) in sorted(attempts.items()):
        label = f"attempt {attempt + 1}" if len(attempts) > 1 else name
        plt.plot(xs, ys, label=label, marker="braille")
    for start in starts:
        if start[1] is not None:
            plt.vline(start[1], "red")  # a restart: where the next attempt began
    plt.title(name)
    plt.xlabel("step")


def restarts(series: Mapping[str, Any]) -> list[tuple[int, float]]:
    """Each attempt's first step after the first attempt, from series.json."""
    found = series.get("attempts") or []
    return [(a["attempt"], a["step"]) for a in found[1:] if a.get("step") is not None]
