"""The dashboard driven by Pilot against scripted runs: what each key and event does.

The real engine drives the same app in test_app_engine.py; here the events are fixed, so every
state (checks, GPUs, failure, inventory mistakes) is reached in milliseconds.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from apptools import (
    RUN_ID,
    failing_script,
    fake_app,
    local_inventory,
    screen_text,
    settle,
    two_node_script,
)
from textual.widgets import Input

from ddptui.remote import inventory
from ddptui.remote.events import (
    Alert,
    AttemptResult,
    BadHost,
    Event,
    HostState,
    LogBatch,
    RunFinished,
    RunRestarting,
    RunStarted,
)
from ddptui.remote.run.runner import Run
from ddptui.tui.dashboard.app import Dashboard
from ddptui.tui.dashboard.control import engine_runs
from ddptui.tui.dashboard.logbuffer import ALL, View
from ddptui.tui.dashboard.messages import EngineEvent
from ddptui.tui.dashboard.screens import HostDetailScreen, InventoryErrorScreen, QuitScreen

SIZE = (100, 30)


# Read through functions: the app changes between awaits, which mypy's narrowing can't know.
def screen(app: Dashboard) -> object:
    return app.screen


def following(app: Dashboard) -> bool:
    return app.pane.follow


def pattern(app: Dashboard) -> re.Pattern[str] | None:
    return app.pane.logs.pattern


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    return local_inventory(tmp_path, ["--epochs", "1"])


async def test_hosts_pane_shows_states_checks_and_gpus(inv: Path) -> None:
    app, _ = fake_app(inv, two_node_script)
    async with app.run_test(size=SIZE) as pilot:
        assert "no run yet" in screen_text(app)
        await pilot.press("l")
        await settle(pilot)
        text = screen_text(app)
        assert f"run {RUN_ID} │ running" in text
        assert "world size 4" in text and "hosts up 2/2" in text
        rows = {ln.split()[1]: ln for ln in text.splitlines() if " local " in ln}
        node0, node1 = rows["node0"], rows["node1"]
        assert "running" in node0
        assert "0-1" in node0 and "2× H100 " in node0  # noqa: RUF001
        assert "72%" in node0  # GpuStats: mean of 99% and 45%
        assert "60/159G" in node0
        assert "node1 !" in node1 and "none" in node1  # checked, no GPU; a warning


async def test_host_detail_shows_facts_findings_and_gpus(inv: Path) -> None:
    app, _ = fake_app(inv, two_node_script)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await settle(pilot)
        app.hosts.focus()
        await pilot.press("down", "enter")  # the second host
        assert isinstance(screen(app), HostDetailScreen)
        text = screen_text(app)
        assert "node1 (node 1)" in text
        assert "no GPU: ranks run on CPU" in text and "hostname" in text and "gpu-b" in text
        await pilot.press("escape", "up", "enter")
        text = screen_text(app)
        assert "4242 python 40000 MiB" in text and "NVIDIA H100 80GB HBM3" in text
        assert "torch" in text and "2.13.0" in text
        await pilot.press("escape")
        assert not isinstance(screen(app), HostDetailScreen)
        # node1's row (below the border, the header, node0): a click moves there, a second opens
        await pilot.click("#hosts", offset=(3, 3))
        await pilot.click("#hosts", offset=(3, 3))
        await pilot.pause()
        assert isinstance(screen(app), HostDetailScreen) and "node1 (node 1)" in screen_text(app)


async def test_all_ranks_view_tags_each_line_with_rank_and_host(inv: Path) -> None:
    app, _ = fake_app(inv, two_node_script)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await settle(pilot)
        lines = list(app.pane.log_view.lines)
        assert lines[0] == "-- node0 ┃ torchrun: starting 2 workers"
        assert "r0 node0 │ step 0 loss 1.000" in lines
        assert "r3 node1 ┃ UserWarning: something minor" in lines
        assert app.pane.log_view.border_title == "all ranks · following"


async def test_switching_views_by_key_and_by_list(inv: Path) -> None:
    app, _ = fake_app(inv, two_node_script)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await settle(pilot)
        await pilot.press("right_square_bracket")
        assert app.pane.logs.view == View("rank", 0)
        assert list(app.pane.log_view.lines)[:2] == ["│ step 0 loss 1.000", "│ step 1 loss 0.500"]
        assert app.pane.log_view.border_title == "rank 0 · following"
        await pilot.press("left_square_bracket", "left_square_bracket")
        assert app.pane.showing_checks  # the checks' findings come before all ranks
        await pilot.press("left_square_bracket")
        assert app.pane.logs.view == View("node", 0) and not app.pane.showing_checks  # wraps around
        await pilot.press("a")
        assert app.pane.logs.view == ALL
        # the views list: rank 2 is the fifth entry (checks, all, r0, r1, r2)
        app.pane.views.focus()
        await pilot.press("home", "down", "down", "down", "down", "enter")
        assert app.pane.logs.view == View("rank", 2)
        assert all(line.startswith("│ step") for line in app.pane.log_view.lines)
        await pilot.click("#views", offset=(3, 3))  # the row of r0, by mouse
        assert app.pane.logs.view == View("rank", 0)
        await pilot.click("#views", offset=(3, 1))  # the checks
        assert app.pane.showing_checks and "hosts passed every check" in screen_text(app)


async def test_filter_regex_smart_case_and_invalid(inv: Path) -> None:
    app, _ = fake_app(inv, two_node_script)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await settle(pilot)
        await pilot.press("slash")
        box = app.query_one("#filter", Input)
        assert box.has_focus
        await pilot.press(*"LOSS")
        assert list(app.pane.log_view.lines) == []  # uppercase: case matters
        await pilot.press("backspace", "backspace", "backspace", "backspace", *"loss 0\\.[0-9]")
        shown = list(app.pane.log_view.lines)
        assert shown and all("loss 0." in line for line in shown)
        await pilot.press("enter")
        assert not box.has_class("-shown") and app.pane.log_view.has_focus
        assert app.pane.log_view.border_title == "all ranks · /loss 0\\.[0-9]/ · following"
        # an invalid regex is reported in the box; the last good filter stays
        await pilot.press("slash", "end", "(")
        assert box.has_class("-invalid") and "invalid regex" in str(box.border_title)
        kept = pattern(app)
        assert kept is not None and kept.pattern == "loss 0\\.[0-9]"
        await pilot.press("enter")  # refused: the box stays open
        assert box.has_class("-shown")
        await pilot.press("escape")
        assert pattern(app) is None and not box.has_class("-shown")
        assert len(app.pane.log_view.lines) == app.pane.logs.received


async def test_log_keys_are_letters_in_a_text_box(inv: Path) -> None:
    """The log's keys act as they reach the app (priority bindings), but not while a text box
    has the focus: there they are what is typed."""
    app, _ = fake_app(inv, two_node_script)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await settle(pilot)
        keys = ("left_square_bracket", "right_square_bracket", "a", "e", "f", "j")
        await pilot.press("slash", *keys)
        assert app.query_one("#filter", Input).value == "[]aefj"
        await pilot.press("escape")
        await settle(pilot)  # the box closed, the log has the focus: f is follow again
        await pilot.press("f")
        assert app.pane.logs.view == ALL and not app.pane.logs.errors_only
        assert not following(app)


async def test_errors_only_shows_stderr_and_tracebacks(inv: Path) -> None:
    app, _ = fake_app(inv, failing_script, finish=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await app.worker.wait() if app.worker else None
        await settle(pilot)
        await pilot.press("e")
        lines = list(app.pane.log_view.lines)
        assert lines[0].endswith("┃ torchrun: starting 2 workers")
        assert lines[-1].endswith("┃ RuntimeError: rank 3 failed on purpose at step 3")
        assert not any("│" in line for line in lines)
        assert "errors only" in str(app.pane.log_view.border_title)
        await pilot.press("e")
        assert any("│ step 0" in line for line in app.pane.log_view.lines)


async def test_failure_banner_names_rank_host_code_and_jumps(inv: Path) -> None:
    app, _ = fake_app(inv, failing_script, finish=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        assert app.worker is not None
        await app.worker.wait()
        await settle(pilot)
        text = screen_text(app)
        assert "first failure" in text and "j: rank 3's log" in text
        assert "✗ rank 3 on node1 (exit code 1): RuntimeError: rank 3 failed" in text
        assert "raise RuntimeError" in text  # the traceback's last lines
        assert "│ failed │" in text
        await pilot.press("j")
        assert app.pane.logs.view == View("rank", 3)
        assert app.pane.log_view.lines[-1] == "┃ RuntimeError: rank 3 failed on purpose at step 3"
        await pilot.press("a")
        await pilot.click("#banner")
        assert app.pane.logs.view == View("rank", 3)


async def test_follow_is_on_then_off_when_scrolled_up(inv: Path) -> None:
    app, runs = fake_app(inv, lambda run_id: two_node_script(run_id, lines=200))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await settle(pilot)
        log = app.pane.log_view
        assert following(app) and log.is_vertical_scroll_end
        log.focus()
        await pilot.press("pageup")
        app.pane.flush()  # the timer notices the scroll
        assert not following(app) and "paused" in str(log.border_title)
        held = log.scroll_y
        runs.runs[0].emit(LogBatch("node0", 0, "stdout", ((0, "while paused"),)))
        await settle(pilot)
        assert log.scroll_y == held and log.lines[-1] != "r0 node0 │ while paused"
        await pilot.press("f")
        assert following(app) and log.is_vertical_scroll_end
        assert log.lines[-1] == "r0 node0 │ while paused"
        await pilot.press("f")
        assert not following(app)


async def test_stop_and_restart_go_through_the_run(inv: Path) -> None:
    app, runs = fake_app(inv, two_node_script)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await settle(pilot)
        await pilot.press("l")  # launching twice does nothing
        assert len(runs.runs) == 1
        await pilot.press("s")
        assert app.worker is not None
        await app.worker.wait()
        await settle(pilot)
        assert runs.runs[0].stops == 1 and app.status.state == "stopped"
        await pilot.press("r")  # restart when nothing runs: a new run
        await settle(pilot)
        assert len(runs.runs) == 2 and app.running
        assert app.status.run_id == "20250101-120001-abcd"
        first = app.worker
        await pilot.press("r")  # restart while running: stop, then launch again
        assert first is not None
        await first.wait()
        await settle(pilot)
        assert runs.runs[1].stops == 1 and len(runs.runs) == 3 and app.running
        assert app.pane.logs.received == 26  # the new run's lines only


async def test_quit_without_a_job_just_quits(inv: Path) -> None:
    app, _ = fake_app(inv, two_node_script)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
    assert app.return_value == 0


async def test_quit_while_running_asks_stay_or_stop(inv: Path) -> None:
    app, runs = fake_app(inv, two_node_script)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await settle(pilot)
        await pilot.press("q")
        assert isinstance(screen(app), QuitScreen)
        assert "A job is running on 2 hosts." in screen_text(app)
        await pilot.press("q")  # no second dialog on top of the first
        assert len(app.screen_stack) == 2
        await pilot.press("escape")
        assert not isinstance(screen(app), QuitScreen) and app.running
        assert runs.runs[0].stops == 0
        await pilot.press("q")
        await pilot.click("#stop")
        assert app.worker is not None
        await app.worker.wait()
        await pilot.pause()
    assert runs.runs[0].stops == 1
    assert app.return_value == 0


async def test_bad_inventory_shows_where_and_reloads_when_fixed(tmp_path: Path) -> None:
    good = local_inventory(tmp_path, ["--epochs", "1"]).read_text()
    path = tmp_path / "inventory.yaml"
    path.write_text(good.replace("nproc_per_node:", "nproc_per_nod:"))
    app, runs = fake_app(path, two_node_script)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert isinstance(screen(app), InventoryErrorScreen)
        text = screen_text(app)
        assert str(path) in text and "unknown key `nproc_per_nod`" in text
        assert "▶" in text and "nproc_per_nod: 1" in text  # the excerpt marks the line
        await pilot.press("l")  # the dashboard's keys do nothing here
        assert not runs.runs
        await pilot.press("r")  # still wrong
        assert isinstance(screen(app), InventoryErrorScreen)
        path.write_text(good)
        await pilot.press("r")
        assert not isinstance(screen(app), InventoryErrorScreen)
        assert app.inventory is not None and len(app.hosts.infos) == 2
        await pilot.press("l")
        await settle(pilot)
        assert runs.runs


async def test_quitting_on_a_bad_inventory_says_so_in_the_exit_status(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text("hosts: []\n")
    app, _ = fake_app(path, two_node_script)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert isinstance(screen(app), InventoryErrorScreen)
        await pilot.press("q")
    assert app.return_value == 2


async def test_launch_rereads_the_inventory_and_reports_a_new_mistake(tmp_path: Path) -> None:
    path = local_inventory(tmp_path, ["--epochs", "1"])
    app, runs = fake_app(path, two_node_script)
    async with app.run_test(size=SIZE) as pilot:
        path.write_text(path.read_text() + "oops: 1\n")
        await pilot.press("l")
        assert isinstance(screen(app), InventoryErrorScreen) and not runs.runs
        assert "unknown key `oops`" in screen_text(app)


async def test_events_of_a_previous_run_are_ignored(inv: Path) -> None:
    app, runs = fake_app(inv, two_node_script)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await settle(pilot)
        first = app.worker
        await pilot.press("r")
        assert first is not None
        await first.wait()
        await settle(pilot)
        received = app.pane.logs.received
        runs.runs[0].emit(LogBatch("node0", 0, "stdout", ((0, "late"),)))
        await settle(pilot)
        assert app.pane.logs.received == received


async def test_every_key_has_an_id_and_the_palette_lists_them(inv: Path) -> None:
    app, _ = fake_app(inv, two_node_script)
    for binding in Dashboard.BINDINGS:
        assert getattr(binding, "id", None) and getattr(binding, "tooltip", None)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        names = [c.title for c in app.get_system_commands(app.screen)]
        assert "Launch (l)" in names and "Filter (/)" in names and "Quit (q)" in names
        assert not any(n.startswith("Stop") for n in names)  # nothing to stop yet


async def test_fits_80x24(inv: Path) -> None:
    app, _ = fake_app(inv, failing_script, finish=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("l")
        assert app.worker is not None
        await app.worker.wait()
        await settle(pilot)
        text = screen_text(app).splitlines()
        assert len(text) == 24
        assert text[-2].startswith(f" run {RUN_ID} │ failed")
        assert "l Launch" in text[-1] and "q Quit" in text[-1]
        assert app.pane.log_view.size.height >= 5  # lines still readable under the banner


def test_engine_runs_get_the_run_dir_and_extra_args(inv: Path, tmp_path: Path) -> None:
    make = engine_runs(tmp_path / "runs", ["--epochs", "5"])
    run = make(inventory.load(inv), lambda event: None, "20250101-000000-beef")
    assert isinstance(run, Run)
    assert run.run_dir == tmp_path / "runs" / "20250101-000000-beef"
    assert run.launch.extra_args == ("--epochs", "5") and run.run_id == "20250101-000000-beef"


async def test_a_bad_host_says_so_in_its_row(inv: Path) -> None:
    """The run's hub will not use node1 again (its GPU failed): its row says why, in red."""
    why = "GPU 3 (00000000:5D:00.0) on node1: 2 uncorrectable ECC errors"

    def script(run_id: str) -> list[Event]:
        return [
            RunStarted(run_id, f"/runs/{run_id}", ("node0", "node1"), 2, "torchrun"),
            HostState("node1", 1, "failed", why),
            BadHost("node1", 1, why),
        ]

    app, _ = fake_app(inv, script)
    async with app.run_test(size=(200, 30)) as pilot:
        await pilot.press("l")
        await settle(pilot)
        info = app.hosts.info(1)
        assert info is not None and info.bad == why
        assert info.state_text().startswith("bad: GPU 3 (")  # cut to the column
        assert info.state_style() == "text-error"


async def test_a_restart_is_said_and_rings_when_notify_asks(inv: Path) -> None:
    """job.restarts: the status bar says `restarting` until the ranks run again; job.notify's
    events ring the bell with a toast; the end counts the attempts."""

    def script(run_id: str) -> list[Event]:
        return [
            RunStarted(run_id, f"/runs/{run_id}", ("node0", "node1"), 2, "torchrun"),
            HostState("node0", 0, "running"),
            RunRestarting(1, 2, "rank 1 failed on node1", 0.5),
            Alert("restarted", "restarting", "rank 1 failed on node1; restarting in 0.5 s"),
        ]

    app, _ = fake_app(inv, script)
    rings: list[None] = []
    app.bell = lambda: rings.append(None)  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await settle(pilot)
        text = screen_text(app)
        assert "│ restarting │" in text
        said = [n.message for n in app._notifications]
        assert "restarting in 0.5 s: attempt 2 of 2 (after rank 1 failed on node1)" in said
        assert len(rings) == 1
        app.post_message(EngineEvent(RUN_ID, HostState("node0", 0, "running")))
        await settle(pilot)
        assert "│ running │" in screen_text(app)
        done = (AttemptResult(0, 1.0, 2.0, "failed"), AttemptResult(1, 3.0, 4.0, "succeeded"))
        app.post_message(EngineEvent(RUN_ID, RunFinished("succeeded", 0, 9.0, attempts=done)))
        await settle(pilot)
        assert "run succeeded after 2 attempts (exit 0)" in [n.message for n in app._notifications]
        away = "ddptui itself was not running for 84 s (asleep or stopped), past the 60 s lease"
        app.post_message(EngineEvent(RUN_ID, RunFinished("lost", 1, 90.0, reason=away)))
        await settle(pilot)
        assert f"run lost (exit 1): {away}" in [n.message for n in app._notifications]
