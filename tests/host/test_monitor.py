"""Live GPU figures: a monitor channel on a real agent here (local transport, a recorded
nvidia-smi stand-in on PATH), each sample parsed with its processes' owners; a CPU host says so
once; the monitor ends with its channel."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import nvidia_smi
import pytest
from nvidia_smi import A100, DRIVER_ERROR, H100_BUSY

from ddptui.remote import smi
from ddptui.remote.agents import monitor
from ddptui.remote.agents.agent import Agent
from ddptui.remote.agents.transport import LocalTransport
from ddptui.remote.events import Event, GpuStats
from ddptui.remote.inventory import Host

HOST = Host(
    0, "localhost", "gpu-a", "local", None, None, None, None, sys.executable, None, {}, None
)


@pytest.fixture
def smi_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A bin dir first on PATH, for a stand-in nvidia-smi (none until installed there)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return bin_dir


def sample(machine: str, owners: dict[str, str] | None = None) -> dict[str, object]:
    queries = {"gpus": smi.GPU_QUERY[1:], "apps": smi.APPS_QUERY[1:]}
    runs = {name: nvidia_smi.run(machine, args) for name, args in queries.items()}
    return {"smi": runs, "owners": owners or {}}


def test_parse_with_owners() -> None:
    stats = monitor.parse("gpu-a", 0, sample(H100_BUSY, {"48211": "alice"}))
    assert stats is not None and len(stats.gpus) == 8
    [p2] = stats.gpus[2].processes
    assert (p2.pid, p2.name, p2.user) == (48211, "/usr/bin/python3", "alice")
    assert stats.gpus[5].processes[0].user == "?"  # not visible from the host's /proc
    assert monitor.parse("gpu-a", 0, sample(A100)) is not None
    assert monitor.parse("gpu-a", 0, sample(DRIVER_ERROR)) is None


async def test_streams_samples_until_ended(smi_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(monitor, "INTERVAL", 0.1)
    nvidia_smi.install(smi_path, H100_BUSY)
    agent = Agent(LocalTransport(HOST))
    await agent.start()
    got = asyncio.Event()
    seen: list[Event] = []

    def emit(event: Event) -> None:
        seen.append(event)
        if len(seen) == 3:
            got.set()

    m = monitor.Monitor(agent, emit)
    try:
        await asyncio.wait_for(got.wait(), 10)
        stats = seen[0]
        assert isinstance(stats, GpuStats) and stats.host == "gpu-a" and len(stats.gpus) == 8
        assert stats.gpus[2].processes[0].user == "?"  # pid 48211 does not run here
        assert m.gpus is True
        m.stop()
        await asyncio.wait_for(m.channel_closed(), 5)
        assert m.ended == "ended"
    finally:
        await agent.close()


async def test_a_cpu_host_says_so_once(smi_path: Path) -> None:
    agent = Agent(LocalTransport(HOST))
    await agent.start()
    try:
        m = monitor.Monitor(agent, lambda e: None)
        await asyncio.wait_for(m.channel_closed(), 10)
        assert m.gpus is False and m.ended == "ended"
    finally:
        await agent.close()
