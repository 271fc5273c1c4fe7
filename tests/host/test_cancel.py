"""A run cancelled while ddptui lives on (a dashboard closing its worker) leaves nothing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from testhosts import REPO, pids_with_env

from ddptui.remote import inventory
from ddptui.remote.run.runner import Run


async def until(cond: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)


async def test_cancelled_local_run_stops_its_nodes(tmp_path: Path) -> None:
    inv = inventory.load(REPO / "inventory.yaml")  # two local nodes: no link drop to help
    long = ["--epochs", "1000", "--step-time", "0.1"]
    run = Run(inv, lambda e: None, run_dir=tmp_path, extra_args=long, checks=False)
    task = asyncio.create_task(run.execute())

    def running() -> bool:  # 2 torchruns, 4 ranks
        return len(pids_with_env("DDPTUI_RUN_ID", run.run_id)) >= 6

    await until(running, 120)
    assert running(), "the job never started"
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await until(lambda: not pids_with_env("DDPTUI_RUN_ID", run.run_id), 30)
    assert not pids_with_env("DDPTUI_RUN_ID", run.run_id)
