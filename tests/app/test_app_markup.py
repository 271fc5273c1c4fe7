"""No text from the inventory, a host or a rank is read as markup (issue 19, item 3): `[/x]`
once made `notify()` raise MarkupError (the app exited 1, the run got no summary), and
`[@click=app.quit]` from a host became a clickable action. Each place the dashboard shows such
text gets both: notifications, tables, panes, titles."""

from __future__ import annotations

import dataclasses
import json
import re
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
from textual.widgets._toast import Toast

from ddptui.remote.events import (
    ChecksDone,
    CodeSynced,
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
)
from ddptui.remote.stalls.stacks import Frame, Group, Report
from ddptui.remote.store import runs
from ddptui.tui.dashboard.history import HistoryScreen
from ddptui.tui.dashboard.logbuffer import View
from ddptui.tui.dashboard.screens import HostDetailScreen
from ddptui.tui.dashboard.stacks_screen import StacksScreen

pytestmark = pytest.mark.security

SIZE = (140, 40)
CLOSE = "[/x]"  # a closing tag that opens nothing: MarkupError if read as markup
CLICK = "[@click=app.quit]quit[/]"  # an action, if read as markup
# A host's name in the inventory: an IPv6 address in brackets, which markup would take for a
# tag (any other bracket in a name is refused by the inventory unless it is a numeric range).
NAME = "[fe80::1]"


def hostile(run_id: str) -> list[Event]:
    """A run whose every word from outside carries markup."""
    failure = Failure(NAME, 1, 1, f"ValueError: {CLOSE} {CLICK}", traceback=(f"  {CLICK}",))
    gpu = dataclasses.replace(
        BUSY, name=f"H100 {CLOSE}", processes=(GpuProcess(7, 1024, CLICK, CLOSE),)
    )
    finding = Finding("warning", f"py-spy{CLOSE}", f"missing {CLICK}", NAME)
    return [
        RunStarted(run_id, f"/runs/{CLOSE}/{run_id}", (NAME, "b"), 2, "torchrun"),
        HostState(NAME, 0, "connected", CLOSE),
        HostChecked(NAME, 0, {"hostname": CLICK, "os": CLOSE}, (gpu,), (finding,)),
        HostChecked("b", 1, {"hostname": "b"}, ()),
        ChecksDone(True, (finding,)),
        CodeSynced(NAME, 0, f"~/{CLOSE}", error=CLICK),
        Notice("warning", f"{CLICK} {CLOSE}", host=NAME),
        NodeStarted(NAME, 0, 11, CLICK, (0, 1)),
        HostState(NAME, 0, "running", CLOSE),
        GpuStats(NAME, 0, (gpu,)),
        LogBatch(NAME, 0, "stdout", ((0, f"{CLOSE} {CLICK}"), (None, CLOSE))),
        LogBatch(NAME, 0, "stderr", ((1, f"ValueError: {CLOSE} {CLICK}"),)),
        HostState(NAME, 0, "failed", CLICK),
        NodeExited(NAME, 0, 1, (failure,)),
    ]


def stacks_report() -> Report:
    frames = (Frame(f"f{CLOSE}", f"{CLICK}.py", 3),)
    return Report(RUN_ID, (Group((0, 1), (NAME,), frames),), {"b": CLICK}, 0.1)


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    hosts = [{"host": "localhost", "name": NAME}, {"host": "localhost", "name": "b"}]
    job = {"script": f"train-{CLOSE}.py", "nproc_per_node": 1}
    return write_inventory(tmp_path / "inv.yaml", hosts, job, {"transport": "local"})


async def test_host_and_rank_text_is_shown_as_written_everywhere(inv: Path) -> None:
    clusters = FakeClusters(report=stacks_report())
    app, _ = fake_app(inv, hostile, cluster=clusters)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await settle(pilot)
        # notifications (the notice, the sync), as their toasts draw them
        toasts = [Toast(n).render().plain for n in app._notifications]
        assert f"{NAME}: {CLICK} {CLOSE}" in toasts
        assert f"{NAME}: code sync to ~/{CLOSE} failed: {CLICK}" in toasts
        text = screen_text(app)
        # the hosts table, the banner and its title, the log pane and its title, the views
        assert NAME in text.split("\n", 3)[2]
        assert f"ValueError: {CLOSE} {CLICK}" in text  # the banner
        assert "j: rank 1's log" in text
        assert f"logs in /runs/{CLOSE}/{RUN_ID}" in text
        assert f"r0 {NAME} │ {CLOSE} {CLICK}" in app.pane.log_view.lines
        assert f"r0 {NAME[:11]}" in text  # the views list (cut to its width)
        app.pane.show_view(View("node", 0))
        await settle(pilot)
        assert f"{NAME} (launcher) · following" in screen_text(app)
        # a filter that is a regex of brackets: its title
        await pilot.press("slash", *CLOSE, "enter")
        await settle(pilot)
        assert f"/{CLOSE}/" in screen_text(app)
        # the checks' findings
        app.pane.show_checks(True)
        await settle(pilot)
        assert f"py-spy{CLOSE} {NAME}: missing {CLICK}" in screen_text(app)
        # the host's details: its title, facts, GPU table, findings
        app.hosts.focus()
        await pilot.press("home", "enter")
        assert isinstance(app.screen, HostDetailScreen)
        await pilot.pause()
        text = screen_text(app)
        assert f"{NAME} (node 0)" in text and f"H100 {CLOSE}" in text
        assert re.search(rf"os +{re.escape(CLOSE)}", text)
        assert f"7 {CLICK} 1024 MiB ({CLOSE})" in text  # its GPU's process, and whose
        await pilot.press("escape")
        # every rank's stack
        await pilot.press("d")
        await wait_for(pilot, lambda: clusters.made[0].dumps, "the dump")
        await settle(pilot)
        assert isinstance(app.screen, StacksScreen)
        text = screen_text(app)
        assert f"f{CLOSE} ({CLICK}.py:3)" in text and f"b: {CLICK}" in text
        assert app.running and app.return_value is None  # nothing quit, nothing raised


async def test_the_history_shows_hosts_as_written(
    inv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    run_dir = runs.root() / "20250102-080000-beef"
    run_dir.mkdir(parents=True)
    info = {"run_id": run_dir.name, "hosts": [f"n{CLOSE}", "b"], "started_at": 1.7e9}
    (run_dir / "run.json").write_text(json.dumps(info))
    (run_dir / "inventory.yaml").write_text(inv.read_text())
    summary = {"status": "failed", "exit_code": 1, "elapsed": 61.0, "failing_rank": 1,
               "failing_host": CLICK, "failure": None}  # fmt: skip
    (run_dir / "summary.json").write_text(json.dumps(summary))
    app, _ = fake_app(inv, hostile)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("h")
        assert isinstance(app.screen, HistoryScreen)
        await wait_for(pilot, lambda: "1 runs" in screen_text(app), "the history")
        text = screen_text(app)
        assert f"2: n{CLOSE}…" in text and f"1 ({CLICK})" in text
