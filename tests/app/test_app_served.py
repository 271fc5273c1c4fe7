"""The dashboard as `ddptui serve` runs it for each browser: read-only unless --control, and a
browser that leaves detaches from the run instead of stopping it."""

from __future__ import annotations

from pathlib import Path

import pytest
from apptools import FakeClusters, FakeRuns, local_inventory, screen_text, settle, wait_for
from apptools import two_node_script as script
from textual.messages import ExitApp

from ddptui.tui.dashboard.app import CONTROL_ACTIONS, create_app

SIZE = (120, 36)


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    return local_inventory(tmp_path, ["--epochs", "1"])


async def test_read_only_hides_and_refuses_launch_stop_restart_and_deep(inv: Path) -> None:
    runs = FakeRuns(script)
    app = create_app(inv, run_factory=runs, cluster_factory=FakeClusters(), read_only=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        footer = screen_text(app).splitlines()[-1]
        assert "Check" in footer and "Stacks" in footer
        assert not any(word in footer for word in ("Launch", "Stop", "Restart"))
        assert "no run yet (read-only)" in screen_text(app)
        assert "l launches" not in screen_text(app)
        for key in ("l", "r", "D"):
            await pilot.press(key)
        for action in CONTROL_ACTIONS:  # the command palette and a click go this way
            await app.run_action(action)
        await settle(pilot)
        assert runs.runs == [] and app.control.current_run is None


async def test_read_only_quit_leaves_the_run_going(inv: Path) -> None:
    runs = FakeRuns(script)
    app = create_app(inv, run_factory=runs, cluster_factory=FakeClusters())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")  # a run to watch (read-only is switched on below)
        await settle(pilot)
        app.read_only = True
        await app.run_action("stop")
        assert runs.runs[0].stops == 0
        await pilot.press("q")  # no question: a viewer leaves, the job goes on
        await wait_for(pilot, lambda: app.return_value is not None, "the app to quit")
    assert runs.runs[0].detached and runs.runs[0].stops == 0


async def test_a_browser_that_leaves_detaches_even_with_control(inv: Path) -> None:
    runs = FakeRuns(script)
    app = create_app(inv, run_factory=runs, cluster_factory=FakeClusters(), served=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")  # --control: launching is allowed
        await settle(pilot)
        assert app.running
        app.post_message(ExitApp())  # what textual-serve's driver sends as the socket closes
        await wait_for(pilot, lambda: runs.runs[0].detached, "the run to be detached")
    assert runs.runs[0].stops == 0
