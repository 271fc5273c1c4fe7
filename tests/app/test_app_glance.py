"""The cluster at a glance in the dashboard, driven by Pilot against scripted connections
(FakeClusters) and runs: opening on the checks and live GPU figures, `c`, `d`, a stall, the
silence of each rank, lines/s, and 256 hosts / 2,048 ranks found by `/`."""

from __future__ import annotations

from pathlib import Path

import pytest
from apptools import (
    BUSY_TEXT,
    H100,
    RUN_ID,
    FakeClusters,
    FakeRuns,
    fake_app,
    local_inventory,
    opening,
    screen_text,
    settle,
    two_node_script,
    wait_for,
    write_inventory,
)
from textual.widgets import Sparkline

from ddptui.remote.events import (
    ChecksDone,
    Event,
    GpuStats,
    HangDetected,
    HostChecked,
    HostState,
    LogBatch,
    NodeStarted,
    RunStarted,
)
from ddptui.tui.dashboard.app import Dashboard, create_app
from ddptui.tui.dashboard.screens import HostDetailScreen
from ddptui.tui.dashboard.stacks_screen import StacksScreen
from ddptui.tui.dashboard.views import age_text

SIZE = (100, 30)


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    return local_inventory(tmp_path, ["--epochs", "1"])


def row(app: Dashboard, name: str) -> str:
    return next(ln for ln in screen_text(app).splitlines() if f"│ {name} " in ln)


async def test_opens_on_the_cluster_with_nothing_pressed(inv: Path) -> None:
    clusters = FakeClusters(opening())
    app, runs = fake_app(inv, two_node_script, cluster=clusters)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert len(clusters.made) == 1 and clusters.made[0].checks == 1
        assert runs.runs == []  # nothing started
        node0, node1 = row(app, "node0"), row(app, "node1")
        assert "2× H100" in node0 and "2:python3 (alice)" in node0  # noqa: RUF001
        assert "49%" in node0  # the mean of 0 % and 98 %
        assert "ready, 1 warning" in node0
        assert "none" in node1 and "ready" in node1
        text = screen_text(app)
        assert f"! gpu-busy node0: {BUSY_TEXT}" in text  # the findings, where the logs go
        assert "✓ 1 of 2 hosts passed every check (node1)" in text
        assert "!checks" in text and "hosts up 2/2" in text and "no run yet" in text


async def test_a_starting_host_says_how_long_so_far(inv: Path) -> None:
    """From its login until its agent says hello, a host is starting: its row counts."""
    now = [100.0]

    def script(run_id: str) -> list[Event]:
        return [
            RunStarted(run_id, f"/runs/{run_id}", ("node0", "node1"), 2, "torchrun"),
            HostState("node0", 0, "starting"),
            HostState("node1", 1, "starting"),
            HostState("node1", 1, "running", "rank 1"),
        ]

    app, _ = fake_app(inv, script, clock=lambda: now[0])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await settle(pilot)
        now[0] = 112.4
        await settle(pilot)
        assert "starting 12s" in row(app, "node0") and "running" in row(app, "node1")
        now[0] = 225.0
        await settle(pilot)
        assert "starting 2m05s" in row(app, "node0")


async def test_unreachable_host_says_why(inv: Path) -> None:
    why = "timed out connecting to root@10.0.0.9:22 after 10 s"
    clusters = FakeClusters([HostState("node1", 1, "connecting"),
                             HostState("node1", 1, "unreachable", why)])  # fmt: skip
    app, _ = fake_app(inv, two_node_script, cluster=clusters)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert "unreachable: tim…" in row(app, "node1")
        info = app.hosts.info(1)
        assert info is not None and info.reach_detail == why and not info.up


async def test_each_host_shows_its_image(tmp_path: Path) -> None:
    """Jobs in containers: the image per host (a host's own over defaults'), and once checked
    the start of its id, so two hosts whose tags agree but images differ show it."""
    box = {"runtime": "podman", "image": "nvcr.io/nvidia/pytorch:24.05-py3"}
    own = {"image": "team/train:2"}
    hosts = [{"host": "localhost", "name": "node0"},
             {"host": "localhost", "name": "node1", "container": own}]  # fmt: skip
    inv = write_inventory(tmp_path / "inv.yaml", hosts, {"script": "x.py"},
                          {"transport": "local", "container": box})  # fmt: skip
    facts = {"hostname": "gpu-a", "container": {"image_id": "sha256:3f1c9a2b77e0d1"}}
    clusters = FakeClusters([HostChecked("node0", 0, facts, ()), ChecksDone(True, ())])
    app, _ = fake_app(inv, two_node_script, cluster=clusters)
    async with app.run_test(size=(140, 30)) as pilot:
        await settle(pilot)
        assert "Image" in screen_text(app)
        assert "pytorch:24.05-py3 3f1c9a2b" in row(app, "node0")
        assert "train:2" in row(app, "node1")
        await pilot.press("enter")
        await settle(pilot)
        assert "nvcr.io/nvidia/pytorch:24.05-py3" in screen_text(app)


async def test_c_checks_again_and_a_run_pauses_the_figures(inv: Path) -> None:
    clusters = FakeClusters(opening())
    app, _ = fake_app(inv, two_node_script, finish=True, cluster=clusters)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("c")
        await settle(pilot)
        assert clusters.made[0].checks == 2 and len(clusters.made) == 1
        await pilot.press("l")
        assert app.worker is not None
        await app.worker.wait()
        await settle(pilot)
        assert clusters.made[0].paused == [True, False]  # the run's own monitors meanwhile
        assert not app.pane.showing_checks  # the logs took the findings' place


async def test_d_deep_checks_over_the_same_connections(inv: Path) -> None:
    """`D`: the deep check over the dashboard's connections, its progress and verdict in the
    checks pane; no launch meanwhile (its job holds the hosts)."""
    clusters = FakeClusters(opening())
    app, runs = fake_app(inv, two_node_script, cluster=clusters)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("D")
        await settle(pilot)
        cluster = clusters.made[0]
        assert cluster.deep_asked == [60.0] and len(clusters.made) == 1
        assert "deep check: all-reduce 1 MiB: 12 iterations" in screen_text(app)
        assert app.check_action("launch", ()) is None
        await pilot.press("l")
        await pilot.press("D")  # once at a time
        await settle(pilot)
        assert runs.runs == [] and cluster.deep_asked == [60.0]
        cluster.deep_go.set()
        await wait_for(
            pilot, lambda: "deep check passed in 21.5 s" in screen_text(app), "the verdict"
        )
        text = screen_text(app)
        assert "! slow-link node1: 2.7 MB/s against a median of 1.5 GB/s" in text
        assert "✓ fabric-allreduce: all-reduce of 4 MiB across 4 ranks" in text
        assert app.check_action("launch", ()) is True


async def test_bars_of_the_last_minutes_and_the_detail_sparklines(inv: Path) -> None:
    clusters = FakeClusters(opening(samples=12))
    app, _ = fake_app(inv, two_node_script, cluster=clusters)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        info = app.hosts.info(0)
        assert info is not None and len(info.history.util) == 12
        assert "▅▆██  99%" in row(app, "node0")  # util rising over the last minutes
        app.hosts.focus()
        await pilot.press("enter")
        assert isinstance(app.screen, HostDetailScreen)
        await pilot.pause()
        spark = app.screen.query_one("#gpu-0-util", Sparkline)
        assert spark.data is not None and list(spark.data)[-3:] == [90.0, 100.0, 100.0]
        text = screen_text(app)
        assert "100% (0-100, 5 min)" in text and "71/80G (71-71)" in text
        assert "alice" in text  # the process table names the owner


async def test_stacks_screen(inv: Path) -> None:
    clusters = FakeClusters(opening())
    app, _ = fake_app(inv, two_node_script, cluster=clusters)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("d")  # no run: nothing to dump
        assert not isinstance(app.screen, StacksScreen)
        await pilot.press("l")
        await settle(pilot)
        await pilot.press("d")
        await wait_for(pilot, lambda: clusters.made[0].dumps, "the dump")
        await settle(pilot)
        assert isinstance(app.screen, StacksScreen)
        assert clusters.made[0].dumps == [(RUN_ID, Path(f"/runs/{RUN_ID}"), False)]
        text = screen_text(app)
        assert text.index("rank 3 (node1)") < text.index("ranks 0-2,4-5 (node[0-2])")
        assert "load_batch (stall.py:17)" in text and "barrier (torch/distributed/" in text
        assert f"saved to /runs/{RUN_ID}/stacks-20250101-120100.txt" in text
        await pilot.press("d")  # again, from the stacks screen
        await wait_for(pilot, lambda: len(clusters.made[0].dumps) == 2, "the second dump")
        await pilot.press("escape")
        assert not isinstance(app.screen, StacksScreen)


async def test_a_stall_shows_until_a_rank_speaks(inv: Path) -> None:
    def script(run_id: str) -> list[Event]:
        return [*two_node_script(run_id), HangDetected((0, 1, 2, 3), ("node0", "node1"), 15.0)]

    app, _ = fake_app(inv, script)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await settle(pilot)
        assert "stalled? silent 15 s (d: stacks)" in screen_text(app)
        app.control.emit(RUN_ID, LogBatch("node0", 0, "stdout", ((0, "step 7"),)))
        await settle(pilot)
        app.tick()
        assert "stalled?" not in app.status.text()


async def test_each_rank_says_how_long_since_its_last_line(inv: Path) -> None:
    now = [100.0]
    app, _ = fake_app(inv, two_node_script, clock=lambda: now[0])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await settle(pilot)
        now[0] = 112.0
        app.control.emit(RUN_ID, LogBatch("node0", 0, "stdout", ((0, "step 9"),)))
        await settle(pilot)
        now[0] = 125.0
        app.tick()
        await pilot.pause()
        labels = [ln.split("│")[1] for ln in screen_text(app).splitlines() if "│  r" in ln]
        assert [lb.rstrip() for lb in labels[:4]] == [
            "  r0 node0   13s",  # its last line 13 s ago
            "  r1 node0   25s",  # none since the run started, 25 s ago
            "  r2 node1   25s",
            "  r3 node1   25s",
        ]
        assert "lines/s" in app.status.text()


def test_age_text() -> None:
    assert [age_text(s) for s in (1, 5, 14.7, 59, 61, 3599, 7300)] == [
        "", "5s", "14s", "59s", "1m", "59m", "2h"
    ]  # fmt: skip


# -- 256 hosts, 2,048 ranks -------------------------------------------------------------------


def big_run(run_id: str) -> list[Event]:
    names = [f"n{k:03d}" for k in range(256)]
    out: list[Event] = [RunStarted(run_id, f"/runs/{run_id}", tuple(names), 2048, "torchrun")]
    for k, name in enumerate(names):
        out.append(NodeStarted(name, k, 1000 + k, name, tuple(range(8 * k, 8 * k + 8))))
        out.append(HostState(name, k, "running"))
    out.append(LogBatch("n255", 255, "stdout", ((2047, "the last rank speaks"),)))
    return out


async def test_256_hosts_and_2048_ranks_scroll_and_find(tmp_path: Path) -> None:
    hosts = [{"host": "localhost", "name": f"n{k:03d}"} for k in range(256)]
    inv = write_inventory(tmp_path / "inv.yaml", hosts, {"script": "t.py", "nproc_per_node": 8},
                          {"transport": "local"})  # fmt: skip
    gpus = (H100,) * 8
    clusters = FakeClusters([GpuStats(f"n{k:03d}", k, gpus) for k in range(256)])
    app, _ = fake_app(inv, big_run, cluster=clusters)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert app.hosts.row_count == 256
        app.hosts.focus()
        await pilot.press("ctrl+end")  # the last host, scrolled into view
        await pilot.pause()
        assert "n255" in screen_text(app)
        await pilot.press("slash", *"n12")
        await pilot.pause()
        assert app.hosts.row_count == 10  # n120-n129
        await pilot.press("enter")
        assert app.hosts.has_focus and app.hosts.row_count == 10
        await pilot.press("slash", "escape")
        assert app.hosts.row_count == 256
        await pilot.press("l")
        await settle(pilot)
        assert len(app.pane.views.entries) == 2 + 2048  # checks, all ranks, every rank
        assert "ranks 0-2047 on n[000-255]" in _folded(app)
        app.pane.views.focus()
        await pilot.press("slash", *"r2047")
        await pilot.press("enter")
        assert len(app.pane.views.entries) == 2  # the checks, and rank 2047
        await pilot.press("enter")  # the first match is highlighted
        assert app.pane.logs.view.key == 2047
        assert any("the last rank speaks" in line for line in app.pane.log_view.lines)


def _folded(app: Dashboard) -> str:
    from ddptui.remote import fold

    ranks = [r for info in app.hosts.infos.values() for r in info.ranks]
    return fold.ranks_on(ranks, [info.name for info in app.hosts.infos.values()])


async def test_ddptui_launch_opens_the_cluster_after_the_run(inv: Path) -> None:
    """`ddptui launch`: the run checks the hosts; the dashboard's own connections come after."""
    clusters = FakeClusters(opening())
    runs = FakeRuns(two_node_script)  # runs until stopped
    app = create_app(inv, run_factory=runs, cluster_factory=clusters, start="launch",
                     clock=lambda: 100.0, run_ids=lambda: RUN_ID)  # fmt: skip
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        # the connections are open for the run to borrow; their checks wait for its end
        assert len(runs.runs) == 1 and len(clusters.made) == 1 and clusters.made[0].checks == 0
        assert app.worker is not None
        await pilot.press("s")
        await app.worker.wait()
        await settle(pilot)
        assert len(clusters.made) == 1 and clusters.made[0].checks == 1
