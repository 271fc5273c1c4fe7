"""The dashboard driven by Pilot against the real engine: local nodes, then the ssh test hosts.

Each run is a real torchrun job (examples/train.py on gloo), so these take ~15-25 s each; the
tests wait on the run's worker and poll the app's state, never fixed sleeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from apptools import local_inventory, screen_text, settle, wait_for
from testhosts import TestCluster, pids_with_env

from ddptui.tui.dashboard.app import Dashboard, create_app
from ddptui.tui.dashboard.logbuffer import TEXT, View
from ddptui.tui.dashboard.screens import QuitScreen

SIZE = (100, 30)
SHORT = ["--epochs", "1", "--samples", "128"]
LONG = ["--epochs", "1000", "--step-time", "0.2", "--samples", "128"]  # runs until stopped


def rank_log(runs: Path, app: Dashboard, rank: int) -> str:
    path = runs / run_id(app) / f"rank-{rank}.log"
    return path.read_text() if path.exists() else ""


def run_id(app: Dashboard) -> str:
    assert app.run_id is not None
    return app.run_id


def greeted(app: Dashboard, ranks: Sequence[int], world: int) -> bool:
    """Every rank printed its greeting (so the job really runs)."""
    texts = {line[TEXT] for line in app.pane.logs.all}
    return all(any(t.startswith(f"rank {r}/{world} on") for t in texts) for r in ranks)


def nothing_left(run_id: str) -> bool:
    return not pids_with_env("DDPTUI_RUN_ID", run_id)


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return tmp_path / "runs"


async def test_launch_streams_every_rank_then_views_and_filter(tmp_path: Path, runs: Path) -> None:
    app = create_app(local_inventory(tmp_path, SHORT), runs_dir=runs)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        assert app.worker is not None
        fin = await app.worker.wait()
        await settle(pilot)
        assert fin.status == "succeeded", screen_text(app)
        text = screen_text(app)
        assert f"run {app.run_id} │ succeeded" in text and "hosts up 2/2" in text
        assert "world size 2" in text
        lines = list(app.pane.log_view.lines)
        assert any(ln.startswith("r0 node0 │ rank 0/2 on") for ln in lines)
        assert any(ln.startswith("r1 node1 │ rank 1/2 on") for ln in lines)
        assert "r0 node0 │ done" in lines
        # the training panel, from the engine's Progress: `epoch 0: loss X` (examples/train.py)
        await wait_for(pilot, lambda: app.training.has_class("-shown"), "the training panel")
        assert "step 0 · loss " in screen_text(app)
        # one rank's view, by key
        await pilot.press("right_square_bracket", "right_square_bracket")
        assert app.pane.logs.view == View("rank", 1)
        assert all(ln.startswith(("│", "┃")) for ln in app.pane.log_view.lines)
        assert any("rank 1/2 on" in ln for ln in app.pane.log_view.lines)
        # a filter on the all-ranks view
        await pilot.press("a", "slash", *"^epoch", "enter")
        assert list(app.pane.log_view.lines) == ["r0 node0 │ epoch 0: loss " + _loss(app)]
        # the full logs are on disk
        assert "epoch 0: loss" in rank_log(runs, app, 0) and "rank 1/2 on" in rank_log(runs, app, 1)
        assert nothing_left(run_id(app))


def _loss(app: Dashboard) -> str:
    line = next(ln[TEXT] for ln in app.pane.logs.all if ln[TEXT].startswith("epoch 0: loss "))
    return line.removeprefix("epoch 0: loss ")


async def test_failing_rank_banner_and_jump(tmp_path: Path, runs: Path) -> None:
    inv = local_inventory(tmp_path, [*SHORT, "--fail-rank", "1", "--fail-step", "2"])
    app = create_app(inv, runs_dir=runs)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        assert app.worker is not None
        fin = await app.worker.wait()
        await settle(pilot)
        assert fin.status == "failed"
        text = screen_text(app)
        assert "first failure" in text
        assert "✗ rank 1 on node1 (exit code 1): RuntimeError: rank 1 failed on purpose" in text
        assert "j: rank 1's log" in text
        await pilot.press("j")
        assert app.pane.logs.view == View("rank", 1)
        # torch's excepthook prefixes the rank's traceback lines with [rank1]:
        assert app.pane.log_view.lines[-1].endswith(
            "RuntimeError: rank 1 failed on purpose at step 2"
        )
        await pilot.press("e")  # errors only: the whole traceback, every line of it an error
        assert any("Traceback (most recent call last):" in ln for ln in app.pane.log_view.lines)
        assert all(ln.startswith("┃") for ln in app.pane.log_view.lines)
        assert nothing_left(run_id(app))


async def test_stop_restart_and_quit_with_confirmation(tmp_path: Path, runs: Path) -> None:
    app = create_app(local_inventory(tmp_path, LONG), runs_dir=runs)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await wait_for(pilot, lambda: greeted(app, (0, 1), 2), "both ranks to start", 120)
        first = app.worker
        first_id = run_id(app)
        assert first is not None and pids_with_env("DDPTUI_RUN_ID", first_id)
        await pilot.press("s")
        fin = await first.wait()
        assert fin.status == "stopped" and nothing_left(first_id)
        await settle(pilot)
        assert "│ stopped │" in screen_text(app)

        await pilot.press("r")  # a new run
        await wait_for(pilot, lambda: greeted(app, (0, 1), 2), "the new run's ranks", 120)
        second, second_id = app.worker, run_id(app)
        assert second is not None and second_id != first_id
        await pilot.press("q")
        assert isinstance(app.screen, QuitScreen)
        await pilot.press("escape")  # stay: the job keeps running
        assert app.running and pids_with_env("DDPTUI_RUN_ID", second_id)
        await pilot.press("q", "s")  # stop the job and quit
        fin = await second.wait()
        await pilot.pause()
        assert fin.status == "stopped"
    assert app.return_value == 0
    assert nothing_left(second_id)


@pytest.mark.e2e
async def test_dashboard_on_ssh_hosts(cluster: TestCluster, tmp_path: Path, runs: Path) -> None:
    job = {
        "script": "examples/train.py",
        "args": LONG,
        "nproc_per_node": 1,
        "master_port": 29641,
        "stop_grace": 2,
    }
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=(0, 1))
    app = create_app(inv, runs_dir=runs)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await wait_for(pilot, lambda: greeted(app, (0, 1), 2), "ranks on node0 and node1", 120)
        await settle(pilot)
        text = screen_text(app)
        assert "hosts up 2/2" in text and "│ running │" in text
        assert any(ln.startswith("r1 node1 │ rank 1/2 on node1") for ln in app.pane.log_view.lines)
        rid = run_id(app)
        await pilot.press("s")
        assert app.worker is not None
        fin = await app.worker.wait()
        assert fin.status == "stopped"
    assert nothing_left(rid)
