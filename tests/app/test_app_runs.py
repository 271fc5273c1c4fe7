"""The dashboard and runs that live on the cluster: detach, the history, opening a run."""

from __future__ import annotations

from pathlib import Path

import pytest
from apptools import (
    FakeClusters,
    Rejoins,
    fake_app,
    local_inventory,
    past_run,
    screen_text,
    settle,
    wait_for,
    write_inventory,
)
from apptools import two_node_script as script

from ddptui.remote.events import Event, HostState, RunStarted
from ddptui.remote.run.runner import Emit
from ddptui.tui.dashboard.app import create_app
from ddptui.tui.dashboard.glance import ClusterLike
from ddptui.tui.dashboard.history import HistoryScreen
from ddptui.tui.dashboard.screens import QuitScreen

SIZE = (120, 36)


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    return local_inventory(tmp_path, ["--epochs", "1"])


@pytest.fixture
def history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inv: Path) -> str:
    return past_run(tmp_path, monkeypatch, inv)


async def test_detach_key_quits_and_leaves_the_job_running(inv: Path) -> None:
    app, made = fake_app(inv, script)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await settle(pilot)
        await pilot.press("x")
        await wait_for(pilot, lambda: app.return_value is not None, "the app to quit")
    assert made.runs[0].detached and made.runs[0].stops == 0
    assert app.return_value == 0


async def test_quit_offers_detach_beside_stop(inv: Path) -> None:
    app, made = fake_app(inv, script)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await settle(pilot)
        await pilot.press("q")
        assert isinstance(app.screen, QuitScreen)
        assert "Detach" in screen_text(app)
        await pilot.click("#detach")
        await wait_for(pilot, lambda: app.return_value is not None, "the app to quit")
    assert made.runs[0].detached and made.runs[0].stops == 0


async def test_history_lists_runs_and_opens_one(inv: Path, history: str) -> None:
    rejoins = Rejoins()
    app = create_app(inv, run_factory=lambda *a: None, rejoin_factory=rejoins,  # type: ignore[arg-type]
                     cluster_factory=_no_cluster)  # fmt: skip
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("h")
        await wait_for(pilot, lambda: isinstance(app.screen, HistoryScreen), "the history")
        await wait_for(pilot, lambda: "failed" in screen_text(app), "the run's row")
        text = screen_text(app)
        assert history in text and "1 (node1)" in text and "1 m 1 s" in text
        await pilot.press("enter")
        await wait_for(pilot, lambda: rejoins.opened, "the run to open")
        await settle(pilot)
        assert app.run_id == history and app.running
        assert "step 5 loss" in screen_text(app)  # its lines, replayed into the logs
        rejoins.runs[0].stop()
        assert app.worker is not None
        await app.worker.wait()
        await pilot.pause()
    assert rejoins.opened == [(history, False)]


async def test_attach_command_opens_the_run(inv: Path, history: str) -> None:
    rejoins = Rejoins()
    app = create_app(inv, run_factory=lambda *a: None, rejoin_factory=rejoins,  # type: ignore[arg-type]
                     cluster_factory=_no_cluster, start="attach", run=history[:12])  # fmt: skip
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: rejoins.opened, "the run to open")
        await settle(pilot)
        assert app.status.run_id == history
        rejoins.runs[0].stop()
        assert app.worker is not None
        await app.worker.wait()
        await pilot.pause()
    assert rejoins.opened == [(history, False)]


class _NoCluster:
    fleet = None

    async def run(self, *, check: bool = True) -> None:
        return None

    async def check(self) -> None:  # type: ignore[override]
        return None

    def pause(self, paused: bool) -> None:
        pass

    async def stacks(self, *a: object, **k: object) -> None:  # type: ignore[override]
        raise AssertionError("no stacks here")


def _no_cluster(inv: object, emit: Emit) -> ClusterLike:
    return _NoCluster()  # type: ignore[return-value]


async def test_attach_checks_no_host_while_its_job_runs(inv: Path, history: str) -> None:
    """A running job's hosts fail the checks (its master port is taken): they come after."""
    rejoins, clusters = Rejoins(), FakeClusters()
    app = create_app(inv, run_factory=lambda *a: None, rejoin_factory=rejoins,  # type: ignore[arg-type]
                     cluster_factory=clusters, start="attach", run=history)  # fmt: skip
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: rejoins.opened, "the run to open")
        await settle(pilot)
        assert clusters.made and not any(c.checks for c in clusters.made)
        rejoins.runs[0].stop()
        assert app.worker is not None
        await app.worker.wait()
        await wait_for(pilot, lambda: any(c.checks for c in clusters.made), "the checks after")


async def test_a_spare_in_a_lost_hosts_place_takes_its_row(tmp_path: Path) -> None:
    """An attach to a run whose hot spare took node 1 with nobody attached: node 1's row is
    the spare's (node2), named as the run has it, never the lost host's (node1)."""
    hosts = [{"host": "localhost", "name": f"node{i}", "spare": i == 2} for i in range(3)]
    job = {"script": "train.py", "master_port": 29500}
    inv = write_inventory(tmp_path / "inv.yaml", hosts, job, {"transport": "local"})

    def swapped(run_id: str) -> list[Event]:
        return [
            RunStarted(run_id, f"/runs/{run_id}", ("node0", "node2"), 2, "torchrun"),
            HostState("node0", 0, "running"),
            HostState("node2", 1, "running"),
        ]

    app, _ = fake_app(inv, swapped)
    async with app.run_test(size=SIZE) as pilot:
        assert [i.name for i in app.hosts.infos.values()] == ["node0", "node1"]
        await pilot.press("l")
        await wait_for(pilot, lambda: "node2" in screen_text(app), "the spare's row")
        assert [(k, i.name) for k, i in app.hosts.infos.items()] == [(0, "node0"), (1, "node2")]
        assert "node1" not in screen_text(app)
