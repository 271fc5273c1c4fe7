"""`ddptui` in a real terminal (tmux): launch on the ssh test hosts, see rank lines, quit.

tmux gives the app a real pty; send-keys types, capture-pane reads the screen as a user sees it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from testhosts import REPO, TestCluster, pids_with_env
from tmux import Tmux, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux"),
]

# Long epochs: each rank's greeting stays on screen while we look for it.
JOB = {
    "script": "examples/train.py",
    "args": ["--epochs", "1000", "--step-time", "0.2", "--samples", "1024"],
    "nproc_per_node": 1,
    "master_port": 29651,
    "stop_grace": 2,
}
RUN_ID = re.compile(r"run (\d{8}-\d{6}-[0-9a-f]{4})")


@pytest.fixture
def tmux_app(cluster: TestCluster, tmp_path: Path) -> Iterator[Tmux]:
    inv = cluster.write_inventory(tmp_path / "inv.yaml", JOB, hosts=(0, 1))
    ddptui = str(Path(sys.executable).parent / "ddptui")
    env = {
        "XDG_DATA_HOME": str(tmp_path / "data"),  # the run's logs go here (platformdirs)
        "TERM": "xterm-256color",
        "COLORTERM": "truecolor",
    }
    term = Tmux([ddptui, "-i", str(inv)], env, (100, 30))
    try:
        yield term
    finally:
        term.kill()


def test_launch_see_rank_lines_and_quit(tmux_app: Tmux, tmp_path: Path) -> None:
    term = tmux_app
    wait_for(lambda: "l Launch" in term.screen(), "the dashboard", 30, term)
    assert "node0" in term.screen() and "node1" in term.screen()
    term.send("l")
    wait_for(
        lambda: (
            "r0 node0 │ rank 0/2 on node0" in (s := term.screen())
            and "r1 node1 │ rank 1/2 on node1" in s
        ),
        "both ranks' first lines",
        120,
        term,
    )
    # The status bar is redrawn once a second: it may say so a tick after the first lines.
    wait_for(
        lambda: "│ running │" in (s := term.screen()) and "hosts up 2/2" in s,
        "the status bar to say running",
        10,
        term,
    )
    screen = term.screen()
    match = RUN_ID.search(screen)
    assert match, screen
    run_id = match.group(1)
    assert pids_with_env("DDPTUI_RUN_ID", run_id)
    assert (tmp_path / "data" / "ddptui" / "runs" / run_id / "rank-1.log").exists()

    term.send("q")
    wait_for(lambda: "A job is running on 2 hosts." in term.screen(), "the question", 30, term)
    term.send("s")  # stop the job and quit
    wait_for(lambda: not term.alive, "ddptui to exit", 60, term)
    deadline = time.monotonic() + 20
    while pids_with_env("DDPTUI_RUN_ID", run_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not pids_with_env("DDPTUI_RUN_ID", run_id), "processes of the run were left"


def test_attach_a_detached_run_then_detach_again(cluster: TestCluster, tmp_path: Path) -> None:
    """`ddptui attach RUN` in a real terminal: the run's lines from its hosts, then `x`
    leaves it running (no launcher lease on a detached run), and `stop` ends it."""
    job = {
        "script": "tests/data/tick.py",
        "args": ["100000", "0.1"],
        "nproc_per_node": 2,
        "master_port": 29652,
        "link_timeout": 5,
        "stop_grace": 2,
    }
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=(0, 1))
    env = {"XDG_DATA_HOME": str(tmp_path / "data"), "TERM": "xterm-256color"}
    ddptui = str(Path(sys.executable).parent / "ddptui")
    headless = [ddptui, "--headless"]
    launched = subprocess.run(
        [*headless, "launch", "-i", str(inv), "--detach"],
        capture_output=True, text=True, timeout=120, cwd=REPO, env={**os.environ, **env},
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    run_id = launched.stdout.splitlines()[-1]
    term = Tmux([ddptui, "attach", run_id], env, (100, 30))
    try:
        wait_for(lambda: re.search(r"r3 node1 │ tick 3 \d+", term.screen()), "rank 3", 60, term)
        assert "x Detach" in term.screen()
        term.send("x")
        wait_for(lambda: not term.alive, "ddptui to leave", 30, term)
    finally:
        term.kill()
    time.sleep(5 + 2)  # longer than link_timeout: a detached run needs nobody
    assert len(pids_with_env("DDPTUI_RUN_ID", run_id)) >= 6
    stopped = subprocess.run(
        [*headless, "stop", run_id], capture_output=True, text=True, timeout=60, cwd=REPO,
        env={**os.environ, **env},
    )  # fmt: skip
    assert stopped.returncode == 0, stopped.stderr
    assert not pids_with_env("DDPTUI_RUN_ID", run_id)
