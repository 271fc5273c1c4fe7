"""`launch --deep` on this machine (local transport): the deep check's failure refuses the
launch, as a failed check does, and nothing of the job starts."""

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


async def test_a_failing_deep_check_refuses_the_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = {
        "defaults": {"transport": "local", "workdir": str(tmp_path), "python": sys.executable},
        "hosts": [{"host": "localhost", "name": f"node{k}"} for k in range(2)],
        "job": {"script": "job.py", "launcher": "env", "master_port": "auto"},
    }
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump(doc))
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
