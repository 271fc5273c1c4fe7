"""`ddptui plot RUN [METRIC]`: a metric's curve over steps, in the terminal (plotext).

A finished run's curve is its run directory's series.json; a run going on (detached too) is
asked of node 0's host, whose supervisor keeps the curve of its ranks' lines, and the run
directory's copy serves where the host cannot be reached.
"""

from __future__ import annotations

import shutil
import sys
from typing import Any, TextIO

from ddptui.remote.events import progress_text
from ddptui.remote.exits import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from ddptui.remote.host.safetext import clean
from ddptui.remote.slurm import status
from ddptui.remote.store import runs

from ..plot import draw, pick, restarts
from .console import isatty


async def plot(spec: str, metric: str | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    record = runs.resolve(spec)
    series = None
    if record.summary is None:  # it may be going on: node 0's host has the latest
        await status.fill([record])
        hub = record.states.get(0) or {}
        series = hub.get("series") if isinstance(hub.get("series"), dict) else None
    series = series or runs.read_series(record.dir)
    metrics: dict[str, Any] = (series or {}).get("metrics") or {}
    if not series or not metrics:
        sys.stderr.write(f"ddptui: run {record.run_id}: no step or metric found in its lines\n")
        return EXIT_FAILED
    name = pick(sorted(metrics), metric)
    if name is None:
        known = clean(", ".join(sorted(metrics)))
        sys.stderr.write(f"ddptui: run {record.run_id} has no metric {metric!r} (it has {known})\n")
        return EXIT_USAGE
    import plotext as plt

    width, height = shutil.get_terminal_size((100, 30))
    plt.clear_figure()
    plt.plotsize(min(width, 120), max(12, min(height - 2, 30)))
    draw(plt, name, metrics[name], restarts(series))
    drawn = plt.build()
    terminal = isatty(out)  # a pipe: no colours; the metric's name is a rank's text, made safe
    out.write(clean(drawn if terminal else plt.uncolorize(drawn), colours=terminal) + "\n")
    last = series.get("last") or {}
    said = progress_text(last.get("step"), last.get("total"), None, last.get("metrics") or {})
    if said:
        out.write(f"last: {clean(said)}\n")
    return EXIT_OK
