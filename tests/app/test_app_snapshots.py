"""Snapshots of the dashboard at fixed sizes, from fixed events (pytest-textual-snapshot 1.1.0).

Regenerate after a deliberate change with `pytest tests/app/test_app_snapshots.py --snapshot-update`
and look at the SVGs (snapshot_report.html shows the differences when a test fails).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from apptools import (
    BUSY,
    IDLE,
    RUN_ID,
    FakeClusters,
    FakeRuns,
    failing_script,
    opening,
    settle,
    two_node_script,
    wait_for,
)
from textual.pilot import Pilot

from ddptui.remote.events import Event, GpuStats
from ddptui.tui.dashboard.app import Dashboard, create_app

# Fixed text (no temporary paths, no free port) so the screens are the same on every machine.
INVENTORY = """\
defaults:
  transport: local
hosts:
  - host: localhost
    name: node0
  - host: localhost
    name: node1
job:
  script: examples/train.py
  args: ["--epochs", "3"]
  nproc_per_node: 2
  master_port: 29500
"""

SnapCompare = Callable[..., bool]


class Clock:
    """The run starts at 100 s and the screenshot is taken at 165 s: 01:05 elapsed."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the inventory shows as a relative path


def dashboard(
    script: Callable[[str], Sequence[Event]],
    finish: bool = False,
    clusters: FakeClusters | None = None,
) -> tuple[Dashboard, Callable[[Pilot[Any]], Awaitable[None]]]:
    """The app on the fixed inventory, and what to do before the screenshot: press l, let
    the scripted run play (to its end, if it ends), 65 s pass, no toasts."""
    Path("inventory.yaml").write_text(INVENTORY)
    clock = Clock()
    app = create_app(
        Path("inventory.yaml"),
        run_factory=FakeRuns(script, finish),
        clock=clock,
        run_ids=lambda: RUN_ID,
        cluster_factory=clusters or FakeClusters(),
    )

    async def launched(pilot: Pilot[Any]) -> None:
        await pilot.press("l")
        if finish:
            assert app.worker is not None
            await app.worker.wait()
        await settle(pilot)
        clock.now = 165.0
        app.clear_notifications()
        await settle(pilot)

    return app, launched


def test_main_screen(snap_compare: SnapCompare) -> None:
    app, launched = dashboard(two_node_script)
    assert snap_compare(app, terminal_size=(100, 30), run_before=launched)


def test_main_screen_80x24(snap_compare: SnapCompare) -> None:
    app, launched = dashboard(two_node_script)
    assert snap_compare(app, terminal_size=(80, 24), run_before=launched)


def test_failure_banner(snap_compare: SnapCompare) -> None:
    app, launched = dashboard(failing_script, finish=True)
    assert snap_compare(app, terminal_size=(100, 30), run_before=launched)


def test_inventory_error_screen(snap_compare: SnapCompare) -> None:
    app, _ = dashboard(two_node_script)
    Path("inventory.yaml").write_text(INVENTORY.replace("master_port", "master_prot"))
    assert snap_compare(app, terminal_size=(80, 24))


def test_main_screen_light_theme(snap_compare: SnapCompare) -> None:
    """Readable on a light background too: rank colours and marks switch to darker shades."""
    app, launched = dashboard(failing_script, finish=True)

    async def light(pilot: Pilot[Any]) -> None:
        app.theme = "textual-light"
        await launched(pilot)

    assert snap_compare(app, terminal_size=(100, 30), run_before=light)


# -- the cluster at a glance ------------------------------------------------------------------


def glance() -> FakeClusters:
    """Five minutes of node0's figures: GPU 0 busy in waves, GPU 2 held by alice's job."""
    waves = [0, 5, 30, 80, 100, 100, 95, 60, 20, 0, 0, 10, 70, 100, 100, 100, 85, 40, 5, 0]
    samples = [
        GpuStats(
            "node0",
            0,
            (
                dataclasses.replace(IDLE, utilization_pct=u, memory_used_mib=400 * u),
                dataclasses.replace(BUSY, utilization_pct=90 + i % 10),
            ),
        )
        for i, u in enumerate(waves * 3)
    ]
    return FakeClusters([*opening(), *samples])


async def opened(pilot: Pilot[Any]) -> None:
    await settle(pilot)
    pilot.app.clear_notifications()
    await settle(pilot)


def test_opens_on_the_cluster(snap_compare: SnapCompare) -> None:
    """No key pressed: the checks' findings where the logs go, bars of the last minutes."""
    app, _ = dashboard(two_node_script, clusters=glance())
    assert snap_compare(app, terminal_size=(100, 30), run_before=opened)


def test_host_detail_sparklines(snap_compare: SnapCompare) -> None:
    app, _ = dashboard(two_node_script, clusters=glance())

    async def detail(pilot: Pilot[Any]) -> None:
        await opened(pilot)
        await pilot.press("enter")  # node0: the hosts pane has the focus
        await settle(pilot)

    assert snap_compare(app, terminal_size=(100, 30), run_before=detail)


def test_stacks_screen(snap_compare: SnapCompare) -> None:
    clusters = glance()
    app, launched = dashboard(two_node_script, clusters=clusters)

    async def stacks(pilot: Pilot[Any]) -> None:
        await launched(pilot)
        await pilot.press("d")
        await wait_for(pilot, lambda: clusters.made[0].dumps, "the dump")
        await settle(pilot)

    assert snap_compare(app, terminal_size=(100, 30), run_before=stacks)
