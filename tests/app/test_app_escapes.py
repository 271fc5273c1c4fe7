"""No terminal command from a host's or a rank's text reaches the terminal the dashboard draws on
(issue 37, item 4): OSC 52 (the clipboard), OSC 0 (the title), DCS, APC and CSI sequences and C1
controls in a failure's traceback, a toast, a host's facts, a tracker's link, the history or the
stacks came out raw. Every text from outside is made safe where it comes in (messages.py) or is
drawn (the log view, toasts, titles)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from apptools import (
    BUSY,
    RUN_ID,
    FakeClusters,
    fake_app,
    screen_text,
    settle,
    wait_for,
    write_inventory,
)
from textual.app import App

from ddptui.remote.events import (
    Alert,
    ChecksDone,
    Event,
    Failure,
    Finding,
    GpuProcess,
    GpuStats,
    HostChecked,
    HostState,
    LogBatch,
    NodeExited,
    NodeStarted,
    Notice,
    RunStarted,
    TrackerLink,
)
from ddptui.remote.stalls.stacks import Frame, Group, Report
from ddptui.remote.store import runs
from ddptui.tui.dashboard.history import HistoryScreen
from ddptui.tui.dashboard.screens import HostDetailScreen
from ddptui.tui.dashboard.stacks_screen import StacksScreen

pytestmark = pytest.mark.security

SIZE = (160, 45)
CLIP = "\x1b]52;c;cm0gLXJmIH4=\x07"  # OSC 52: the clipboard
TITLE = "\x1b]0;pwned\x1b\\"  # OSC 0: the window's title
DCS = "\x1bPq#0;2;0;0;0\x1b\\"
APC = "\x1b_apc\x9c"
C1 = "\x9b2J\x9d0;x\x9c"  # a C1 CSI (clear the screen), a C1 OSC
EVIL = f"{CLIP}a{TITLE}b{DCS}c{APC}d\x1b[2J\x1bce{C1}f\x07"
SAFE = "abcdef"
CONTROLS = [chr(c) for c in (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))]


def hostile(run_id: str) -> list[Event]:
    traceback = (f"  File {EVIL}", f"ValueError: {EVIL}")
    failure = Failure("node0", 1, 1, f"ValueError: {EVIL}", traceback=traceback)
    process = GpuProcess(7, 1024, f"py{EVIL}", f"u{EVIL}")
    gpu = dataclasses.replace(BUSY, name=f"H100 {EVIL}", processes=(process,))
    finding = Finding("warning", "py-spy", f"missing {EVIL}", "node0")
    return [
        RunStarted(run_id, "/runs/r", ("node0", "b"), 2, "torchrun"),
        HostState("node0", 0, "connected", EVIL),
        HostChecked("node0", 0, {"hostname": f"h{EVIL}", "os": f"o{EVIL}"}, (gpu,), (finding,)),
        HostChecked("b", 1, {"hostname": "b"}, ()),
        ChecksDone(True, (finding,)),
        Notice("warning", f"said {EVIL}", host="node0"),
        NodeStarted("node0", 0, 11, f"h{EVIL}", (0, 1)),
        HostState("node0", 0, "running", EVIL),
        GpuStats("node0", 0, (gpu,)),
        TrackerLink("W&B", f"https://wandb.ai/x{EVIL}", f"run{EVIL}", 0),
        Alert("hang", "running", f"rank 1 hung {EVIL}", True),
        LogBatch("node0", 0, "stdout", ((0, f"line {EVIL}"), (None, EVIL))),
        LogBatch("node0", 0, "stderr", ((1, f"ValueError: {EVIL}"),)),
        HostState("node0", 0, "failed", EVIL),
        NodeExited("node0", 0, 1, (failure,)),
    ]


def assert_safe(text: str, where: str) -> None:
    found = sorted({repr(c) for c in text if c in CONTROLS and c != "\n"})
    assert not found, f"{where}: {found}"


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    hosts = [{"host": "localhost", "name": "node0"}, {"host": "localhost", "name": "b"}]
    return write_inventory(tmp_path / "inv.yaml", hosts, {"script": "t.py"}, {"transport": "local"})


async def test_no_escape_from_outside_reaches_the_terminal(
    inv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    toasts: list[str] = []  # every toast shown (one may expire before it is looked at)
    shown = App.notify

    def notify(app: App[object], message: str, **kw: object) -> None:
        toasts.append(message)
        shown(app, message, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(App, "notify", notify)
    frames = (Frame(f"f{EVIL}", f"x{EVIL}.py", 3),)
    report = Report(RUN_ID, (Group((0, 1), ("node0",), frames),), {"b": f"why {EVIL}"}, 0.1)
    clusters = FakeClusters(report=report)
    app, _ = fake_app(inv, hostile, cluster=clusters)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await settle(pilot)
        assert "node0: said " + SAFE in toasts and "hang: rank 1 hung " + SAFE in toasts
        for toast in toasts:
            assert_safe(toast, "a toast")
        banner = app.banner.render()
        assert f"ValueError: {SAFE}" in str(banner)
        assert_safe(str(banner), "the banner")
        text = screen_text(app)
        assert f"ValueError: {SAFE}" in text and f"line {SAFE}" in text
        assert f"run{SAFE}" in text  # the training panel's link
        assert_safe(text, "the main screen")
        assert_safe("\n".join(app.pane.log_view.lines), "the log view")
        app.hosts.focus()
        await pilot.press("home", "enter")
        assert isinstance(app.screen, HostDetailScreen)
        await pilot.pause()
        text = screen_text(app)
        assert f"H100 {SAFE}" in text and f"o{SAFE}" in text
        assert_safe(text, "the host's details")
        await pilot.press("escape")
        await pilot.press("d")
        await wait_for(pilot, lambda: clusters.made[0].dumps, "the dump")
        await settle(pilot)
        assert isinstance(app.screen, StacksScreen)
        text = screen_text(app)
        assert f"f{SAFE}" in text and f"why {SAFE}" in text
        assert_safe(text, "the stacks")


async def test_the_history_shows_no_escape(
    inv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    run_dir = runs.root() / "20250102-080000-beef"
    run_dir.mkdir(parents=True)
    info = {"run_id": run_dir.name, "hosts": ["node0", "b"], "started_at": 1.7e9}
    (run_dir / "run.json").write_text(json.dumps(info))
    (run_dir / "inventory.yaml").write_text(inv.read_text())
    summary = {"status": "failed", "exit_code": 1, "elapsed": 61.0, "failing_rank": 1,
               "failing_host": f"node0{EVIL}", "failure": None,
               "progress": {"step": 3, "metrics": {f"loss{EVIL}": 1.0}}}  # fmt: skip
    (run_dir / "summary.json").write_text(json.dumps(summary))
    app, _ = fake_app(inv, hostile)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("h")
        assert isinstance(app.screen, HistoryScreen)
        await wait_for(pilot, lambda: "1 runs" in screen_text(app), "the history")
        text = screen_text(app)
        assert f"1 (node0{SAFE})" in text
        assert_safe(text, "the history")
