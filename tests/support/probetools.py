"""The host's agent run here through the local transport: an inventory of two local nodes, one
host's probe (or any op) over a real agent, and its findings by check."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import nvidia_smi
import pytest

from ddptui.remote import inventory
from ddptui.remote.agents.agent import Agent
from ddptui.remote.agents.fleet import Fleet, fleet_for
from ddptui.remote.checks.preflight import Preflight
from ddptui.remote.events import ChecksDone, Event, HostChecked
from ddptui.remote.host.netif import free_port as free_port  # a port no outgoing connection takes

T = TypeVar("T")


def local_inventory(tmp_path: Path, job: str = "", host: str = "") -> inventory.Inventory:
    (tmp_path / "train.py").write_text("print('hi')\n")
    text = (
        f"defaults:\n  transport: local\n  workdir: {tmp_path}\n{host}"
        "hosts:\n  - host: localhost\n    name: node0\n  - host: localhost\n    name: node1\n"
        f"job:\n  script: train.py\n  master_port: {free_port()}\n{job}"
    )
    return inventory.parse(text, tmp_path / "inventory.yaml")


async def with_agent(inv: inventory.Inventory, k: int, use: Callable[[Agent], Awaitable[T]]) -> T:
    """`use(agent)` with host k's real agent (started for it, let go after)."""
    fleet = Fleet(inv.hosts)
    try:
        return await use(await fleet.agent(k, lambda event: None))
    finally:
        await fleet.close()


def preflight(
    inv: inventory.Inventory, emit: Callable[[Event], None] = lambda e: None
) -> tuple[Preflight, ChecksDone]:
    """Every host checked as `ddptui check` does it (each one's agent started, then let go)."""

    async def check() -> tuple[Preflight, ChecksDone]:
        fleet = fleet_for(inv)  # the spares' too
        pre = Preflight(inv, fleet, emit)
        try:
            return pre, await pre.check()
        finally:
            await fleet.close()

    return asyncio.run(check())


def run_probe(inv: inventory.Inventory, k: int = 0) -> HostChecked:
    """Host k's checks as `ddptui check` makes them."""
    seen: list[Event] = []
    preflight(inv, seen.append)
    return next(h for h in seen if isinstance(h, HostChecked) and h.node_rank == k)


def levels(checked: HostChecked) -> dict[str, str]:
    return {f.check: f.level for f in checked.findings}


def with_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, machine: str) -> None:
    nvidia_smi.install(tmp_path / "bin", machine)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")


def message(checked: HostChecked, check: str) -> str:
    return next(f.message for f in checked.findings if f.check == check)
