"""Running the real engine on this machine (local transport) from the host tier's tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from ddptui.remote import inventory
from ddptui.remote.events import Event, RunFinished
from ddptui.remote.run.runner import Run


async def run_job(
    inv: inventory.Inventory,
    tmp: Path,
    until: Callable[[Run, list[Event]], None] | None = None,
    timeout: float = 60,
) -> tuple[RunFinished, list[Event]]:
    """The run to its end, every event kept; until(run, events) sees each as it comes."""
    events: list[Event] = []

    def emit(event: Event) -> None:
        events.append(event)
        if until is not None:
            until(run, events)

    run = Run(inv, emit, run_dir=tmp / "run", checks=False)
    fin = await asyncio.wait_for(run.execute(), timeout)
    return fin, events
