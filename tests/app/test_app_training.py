"""The training panel under Pilot: step, speed, time left, links, the curve across attempts, the
newest checkpoint, and a stop's grace for the ranks to save."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from apptools import (
    RUN_ID,
    FakeClusters,
    Rejoins,
    fake_app,
    local_inventory,
    past_run,
    screen_text,
    settle,
    two_node_script,
    wait_for,
)

from ddptui.remote.events import CheckpointSaved, Event, LogBatch, RunFinished, Stopping
from ddptui.remote.run.progress import ProgressReader
from ddptui.tui.dashboard.app import create_app

SIZE = (120, 40)


def training_script(run_id: str) -> list[Event]:
    """Two nodes running; rank 0 prints steps and loss, fails, and a second attempt goes on."""
    out = two_node_script(run_id)
    watch = ProgressReader(None, out.append)
    watch.feed("[0]:wandb: 🚀 View run fancy-sun-1 at: https://wandb.ai/t/p/runs/abc\n", 0)
    for attempt, steps in ((0, range(1, 60)), (1, range(50, 121))):
        for s in steps:  # 4 steps/s by the hosts' clock
            watch.feed(f"[0]:step {s}/500 loss {3 / (1 + s / 20):.3f}\n", attempt, s / 4)
        watch.feed("[1]:step 40/500 loss 9.0\n", attempt, steps[-1] / 4)
    watch.tell()
    return out


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    return local_inventory(tmp_path, ["--epochs", "1"])


async def test_the_panel_shows_the_run_and_the_curve_across_attempts(inv: Path) -> None:
    app, _ = fake_app(inv, training_script)
    async with app.run_test(size=SIZE) as pilot:
        assert not app.training.has_class("-shown")  # no progress yet: no room taken
        await pilot.press("l")
        await settle(pilot)
        assert app.training.has_class("-shown")
        text = screen_text(app)
        assert "step 120/500 · 4 it/s · loss 0.429 · 2 min left" in text
        assert "attempt 2" in text and "slowest: r1 40, r0 120" in text
        assert "W&B (fancy-sun-1): https://wandb.ai/t/p/runs/abc" in text
        plot = app.training.plot  # the curve, a line per attempt, the restart a mark
        assert "⢕⢕ attempt 1" in text and "⢕⢕ attempt 2" in text and "step" in text
        assert plot.size.width > 40 and plot.size.height >= 8
        app.training.focus()
        await pilot.press("m")  # the one metric: still loss
        assert app.training.metric == "loss"


def saving_script(run_id: str) -> list[Event]:
    """Two nodes running; node 0 saw a checkpoint of step 10 saved 30 s before."""
    return [*two_node_script(run_id), CheckpointSaved("/ckpt/step_10.pt", 10, time.time() - 30)]


async def test_a_stop_counts_down_the_ranks_time_to_save_until_the_run_ends(inv: Path) -> None:
    """The newest checkpoint in the panel; a user's stop (TERM sent: the ranks have stop_grace
    to finish a save) said at once and counted down in the status bar, a rank's line not
    hiding it, until the run ends."""
    now = [100.0]
    app, _ = fake_app(inv, saving_script, clock=lambda: now[0])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await settle(pilot)
        text = screen_text(app)
        assert "checkpoint: step 10, saved 3" in text and "(/ckpt/step_10.pt)" in text
        app.control.emit(RUN_ID, Stopping(20, "ckpt"))
        await settle(pilot)
        assert Stopping(20, "ckpt").text() in [n.message for n in app._notifications]
        assert "│ stopping │ 20 s left to save, then KILL │" in app.status.text()
        now[0] += 6
        app.control.emit(RUN_ID, LogBatch("node0", 0, "stdout", ((0, "saving step 12"),)))
        await settle(pilot)
        assert "│ stopping │ 14 s left to save, then KILL │" in app.status.text()
        now[0] += 15
        await settle(pilot)
        assert "│ stopping │ KILL sent │" in app.status.text()
        app.control.emit(RUN_ID, RunFinished("stopped", 130, 20.0))
        await settle(pilot)
        assert "KILL" not in app.status.text() and "│ stopped │" in app.status.text()


async def test_a_viewer_counts_down_a_stop_heard_from_the_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inv: Path
) -> None:
    """A read-only dashboard on a run another launcher stops: the hosts' word of it (Stopping,
    heard as an attach replays it, 12 s of its 20 left) said and counted down from what is
    left, though this dashboard stopped nothing."""
    run_id, rejoins, now = past_run(tmp_path, monkeypatch, inv), Rejoins(), [100.0]
    app = create_app(inv, rejoin_factory=rejoins, cluster_factory=FakeClusters(), start="attach",
                     run=run_id, read_only=True, clock=lambda: now[0])  # fmt: skip
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: rejoins.runs, "the run to open")
        await settle(pilot)
        heard = Stopping(20, "ckpt", left=12)
        rejoins.runs[0].emit(heard)
        await settle(pilot)
        assert heard.text() in [n.message for n in app._notifications]
        assert "│ stopping │ 12 s left to save, then KILL │" in app.status.text()
        now[0] += 5
        await settle(pilot)
        assert "│ stopping │ 7 s left to save, then KILL │" in app.status.text()
    assert rejoins.runs[0].stops == 0
