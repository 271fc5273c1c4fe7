"""The dashboard as `ddptui serve` runs it for each browser: read-only unless --control. A
read-only viewer only views: however it ends (q, x, a closed tab, a crash in any handler), the
run stays exactly as it was; a --control tab's own run is detached as it leaves, never stopped."""

from __future__ import annotations

from pathlib import Path

import pytest
from apptools import (
    FakeClusters,
    FakeRuns,
    Rejoins,
    local_inventory,
    past_run,
    screen_text,
    settle,
    wait_for,
)
from apptools import two_node_script as script
from textual.messages import ExitApp

from ddptui.tui.dashboard.app import CONTROL_ACTIONS, Dashboard, create_app

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


@pytest.fixture
def history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inv: Path) -> str:
    return past_run(tmp_path, monkeypatch, inv)


def viewer(inv: Path, run_id: str, rejoins: Rejoins, control: bool = False) -> Dashboard:
    """A browser's dashboard opened on a run (`ddptui serve RUN`)."""
    return create_app(inv, rejoin_factory=rejoins, cluster_factory=FakeClusters(), start="attach",
                      run=run_id, read_only=not control, served=True)  # fmt: skip


@pytest.mark.security
async def test_a_viewer_that_quits_leaves_the_run_as_it_was(inv: Path, history: str) -> None:
    rejoins = Rejoins()
    app = viewer(inv, history, rejoins)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: rejoins.runs, "the run to open")
        await settle(pilot)
        await app.run_action("stop")
        await pilot.press("q")  # no question: a viewer leaves (as `x` does), the run as it was
        await wait_for(pilot, lambda: app.return_value is not None, "the app to quit")
    run = rejoins.runs[0]
    assert run.viewer and run.left
    assert not (run.detached or run.hung_up or run.stops)


@pytest.mark.security
async def test_a_viewer_that_crashes_leaves_the_run_as_it_was(inv: Path, history: str) -> None:
    """A handler's exception (a bad resize did it) ends the app: its run's worker is cancelled,
    and the run, a viewer's, neither hangs up (a STOP to every host) nor detaches."""
    rejoins = Rejoins()
    app = viewer(inv, history, rejoins)
    with pytest.raises(ZeroDivisionError):
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: rejoins.runs, "the run to open")
            await settle(pilot)
            app.call_later(lambda: 1 / 0)
            await wait_for(pilot, lambda: app.worker is not None and app.worker.is_finished,
                           "the run's worker to end")  # fmt: skip
    run = rejoins.runs[0]
    assert run.left and not (run.detached or run.hung_up or run.stops)


async def test_a_control_tab_leaves_a_run_it_opened_as_it_was(inv: Path, history: str) -> None:
    rejoins = Rejoins()
    app = viewer(inv, history, rejoins, control=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: rejoins.runs, "the run to open")
        await settle(pilot)
        app.post_message(ExitApp())  # the tab closed
        await wait_for(pilot, lambda: rejoins.runs[0].left, "the run to be left")
    run = rejoins.runs[0]
    assert not (run.viewer or run.detached or run.hung_up or run.stops)


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


async def test_a_control_tab_that_crashes_detaches_its_run(inv: Path) -> None:
    runs = FakeRuns(script)
    app = create_app(inv, run_factory=runs, cluster_factory=FakeClusters(), served=True)
    with pytest.raises(ZeroDivisionError):
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("l")
            await settle(pilot)
            app.call_later(lambda: 1 / 0)
            await wait_for(pilot, lambda: runs.runs[0].detached, "the run to be detached")
    assert not (runs.runs[0].hung_up or runs.runs[0].stops)
