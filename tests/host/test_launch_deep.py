"""`launch --deep` on this machine (local transport): the deep check's failure refuses the
launch, as a failed check does, and nothing of the job starts; one that passes leaves the launch
its hosts as they were."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ddptui.remote import inventory
from ddptui.remote.checks.judge import Finding
from ddptui.remote.events import DeepChecked, Event, NodeStarted
from ddptui.remote.run import checkup, runner


def two_nodes(tmp_path: Path) -> Path:
    doc = {
        "defaults": {"transport": "local", "workdir": str(tmp_path), "python": sys.executable},
        "hosts": [{"host": "localhost", "name": f"node{k}"} for k in range(2)],
        "job": {"script": "job.py", "launcher": "env", "master_port": "auto"},
    }
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump(doc))
    return tmp_path / "inv.yaml"


async def test_a_failing_deep_check_refuses_the_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    two_nodes(tmp_path)
    slow = Finding("failure", "slow-gpu", "GPU 1: 12 TFLOP/s against a median of 700", "node1")
    asked: list[float] = []

    async def failing(*_: Any, seconds: float, **__: Any) -> DeepChecked:
        asked.append(seconds)
        return DeepChecked(False, (slow,))

    monkeypatch.setattr(checkup, "deep_check", failing)
    events: list[Event] = []
    run = runner.Run(inventory.load(tmp_path / "inv.yaml"), events.append, run_dir=tmp_path / "run",
              checks=False, deep=checkup.deep_first(30.0))  # fmt: skip
    fin = await run.execute()
    assert asked == [30.0]
    assert (fin.status, fin.exit_code) != ("succeeded", 0)
    assert fin.failure is not None and fin.failure.host == "node1"
    assert "deep check failed (slow-gpu)" in fin.failure.message
    assert not any(isinstance(e, NodeStarted) for e in events)  # nothing of the job started


async def test_a_passing_deep_check_leaves_the_launch_its_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deep check's job starts over the launch's own agents, after its checks: a supervisor
    prepared for the launch meanwhile would be ended by it, its node's directory left in the
    launch's way ("cannot make the node's directory")."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    (tmp_path / "job.py").write_text("print('the job ran', flush=True)\n")
    inv = inventory.load(two_nodes(tmp_path))

    async def measured(inv: inventory.Inventory, fleet: Any, emit: Any, runs: Path) -> DeepChecked:
        deep = runner.Run(inv, lambda _: None, fleet=fleet, checks=False, run_dir=runs / "deep")
        return DeepChecked((await deep.execute()).exit_code == 0)  # a job of its own, as it is

    events: list[Event] = []
    fin = await runner.Run(inv, events.append, run_dir=tmp_path / "run", deep=measured).execute()
    assert (fin.status, fin.exit_code) == ("succeeded", 0), fin.failure
    assert sum(isinstance(e, NodeStarted) for e in events) == 2
