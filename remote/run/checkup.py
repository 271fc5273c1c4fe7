"""`ddptui check` and the dashboard's `c` and `D`: the checks (remote/checks/preflight.py), then
the deep check if asked; and the deep check itself, the fabric test launched and followed as a
run of its own (remote/run/deepcheck.py says what it runs and reads), which `launch --deep` runs
before its start (`deep_first`). Nothing of the job starts here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from pathlib import Path

from ddptui.remote.agents.fleet import Fleet, fleet_for
from ddptui.remote.agents.transport import Transport
from ddptui.remote.checks.preflight import Preflight
from ddptui.remote.events import ChecksDone, DeepChecked, DeepProgress, RunFinished
from ddptui.remote.inventory import Inventory
from ddptui.remote.run import deepcheck
from ddptui.remote.run.runner import DeepFirst, Emit, Run
from ddptui.remote.store.runs import new_run_id


async def check(
    inv: Inventory,
    emit: Emit,
    transports: Sequence[Transport] | None = None,
    *,
    fleet: Fleet | None = None,
    deep: float | None = None,
    runs_dir: Path | None = None,
) -> ChecksDone:
    """The checks, and the deep check after them if asked (`deep` seconds at most) and they
    passed (its verdict emitted, DeepChecked). Over `fleet` if given, else a fleet of its own,
    closed after."""
    own = fleet is None
    fleet = fleet or fleet_for(inv, transports)
    try:
        done = await Preflight(inv, fleet, emit).check()
        if deep is not None and done.ok:
            await deep_check(inv, fleet, emit, seconds=deep, runs_dir=runs_dir)
        return done
    finally:
        if own:
            await fleet.close()


async def deep_check(
    inv: Inventory,
    fleet: Fleet,
    emit: Emit,
    *,
    seconds: float = deepcheck.SECONDS,
    runs_dir: Path | None = None,
) -> DeepChecked:
    """The deep check on `fleet`'s hosts: the fabric test launched as a run of its own,
    bounded by `seconds`; its verdict, emitted too."""
    t0 = time.monotonic()
    run_id = new_run_id() + "-deep"
    collect = deepcheck.Collector(emit)
    emit(DeepProgress(f"the fabric measured on every rank, at most {seconds:g} s"))
    run = Run(
        deepcheck.deep_inventory(inv, seconds),
        collect,
        fleet=fleet,
        checks=False,
        run_id=run_id,
        run_dir=runs_dir / run_id if runs_dir is not None else None,
    )
    fin: RunFinished | None = None  # None: the time bound ran out (its nodes are stopped)
    with contextlib.suppress(TimeoutError):
        fin = await asyncio.wait_for(run.execute(), seconds)
    done = deepcheck.verdict(collect, fin, [h.name for h in inv.hosts], seconds, t0)
    emit(done)
    return done


def deep_first(seconds: float) -> DeepFirst:
    """`launch --deep`: the deep check in `seconds` at most, before the run it is handed to
    starts (a failure refuses it)."""

    async def first(inv: Inventory, fleet: Fleet, emit: Emit, runs_dir: Path) -> DeepChecked:
        return await deep_check(inv, fleet, emit, seconds=seconds, runs_dir=runs_dir)

    return first
