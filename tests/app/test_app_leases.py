"""GPU leases in the dashboard: the hosts pane's Leases field (once a run holds a host's GPUs) and
each GPU's holder in the host's view; a launch whose GPUs are held asks whether to wait."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from apptools import FakeRun, fake_app, local_inventory, screen_text, settle, two_node_script

from ddptui.remote.events import Event, GpuLease, HostLeases, LeaseHolder, RunFinished
from ddptui.tui.dashboard.app import create_app
from ddptui.tui.dashboard.screens import HostDetailScreen, WaitScreen

SIZE = (120, 40)
BOB = LeaseHolder("bob", "20250101-090000-beef", 0, 300.0, "detached", "bob@laptop", (0,))


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    return local_inventory(tmp_path, ["--epochs", "1"])


def leased_script(run_id: str) -> list[Event]:
    gpus = (GpuLease(0, "NVIDIA H100 80GB HBM3", "held", BOB),
            GpuLease(1, "NVIDIA H100 80GB HBM3", "free"))  # fmt: skip
    waiting = LeaseHolder("alice", "20250101-091000-cafe", 0, 60.0, count=2, key=3)
    return [*two_node_script(run_id), HostLeases("node0", 0, gpus, (waiting,))]


async def test_the_hosts_pane_says_who_holds_the_gpus(inv: Path) -> None:
    app, _ = fake_app(inv, two_node_script)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await settle(pilot)
        assert "Leases" not in screen_text(app)  # nobody holds a GPU
    app, _ = fake_app(inv, leased_script)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await settle(pilot)
        row = next(ln for ln in screen_text(app).splitlines() if "node0" in ln and "local" in ln)
        assert "Leases" in screen_text(app) and "1 free bob 1" in row
        app.hosts.focus()
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, HostDetailScreen)
        text = screen_text(app)
        assert "held: bob's run" in text and "20250101-090000-beef" in text  # wrapped
        assert "detached, from" in text and "bob@laptop)" in text
        assert "waiting for its GPUs: alice's run 20250101-091000-cafe, 2 GPU(s)" in text


class Asking(FakeRun):
    """A run whose GPUs are held: it asks, and says what it was told."""

    def __init__(self, ask: Any) -> None:
        super().__init__(lambda event: None, "r", (), False)
        self.ask, self.answer = ask, asyncio.get_event_loop().create_future()

    async def execute(self) -> RunFinished:
        self.answer.set_result(await self.ask("not starting: its GPUs are taken: bob's run R"))
        await self.stopped.wait()
        return RunFinished("stopped", 130, 1.0)


@pytest.mark.parametrize(("key", "waits"), [("w", True), ("escape", False)])
async def test_a_launch_whose_gpus_are_held_asks_whether_to_wait(
    inv: Path, key: str, waits: bool
) -> None:
    made: list[Asking] = []

    def runs(*args: Any, ask: Any = None) -> Asking:
        made.append(Asking(ask))
        return made[-1]

    app = create_app(inv, run_factory=runs)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await settle(pilot)
        assert isinstance(app.screen, WaitScreen)
        assert "its GPUs are taken: bob's run R" in screen_text(app)
        await pilot.press(key)
        await settle(pilot)
        assert await made[0].answer is waits
        assert not isinstance(app.screen, WaitScreen)
        made[0].stop()
