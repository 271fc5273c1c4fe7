"""Live GPU figures: the monitor loop run here through the local transport (a recorded
nvidia-smi stand-in on PATH), each sample parsed with its processes' owners, and the ways the
host's process ends: no GPU, stdin closed, the launcher's heartbeats gone quiet."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nvidia_smi
import pytest
from nvidia_smi import A100, DRIVER_ERROR, H100_BUSY

from remote import monitor
from remote.events import Event, GpuStats
from remote.inventory import Host
from remote.transport import LocalTransport

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
    queries = {"gpus": monitor.probe.GPU_QUERY[1:], "apps": monitor.probe.APPS_QUERY[1:]}
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


async def test_streams_samples_until_cancelled(
    smi_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(monitor, "INTERVAL", 0.1)
    nvidia_smi.install(smi_path, H100_BUSY)
    seen: list[Event] = []
    m = monitor.Monitor(LocalTransport(HOST), seen.append)
    task = asyncio.ensure_future(m.run())
    t0 = time.monotonic()
    while len(seen) < 3:
        assert time.monotonic() - t0 < 10, "no samples"
        await asyncio.sleep(0.02)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    stats = seen[0]
    assert isinstance(stats, GpuStats) and stats.host == "gpu-a" and len(stats.gpus) == 8
    assert stats.gpus[2].processes[0].user == "?"  # pid 48211 does not run here
    assert m.proc is not None and await asyncio.wait_for(m.proc.wait(), 5) == 0  # stdin closed


async def test_a_cpu_host_says_so_once(smi_path: Path) -> None:
    m = monitor.Monitor(LocalTransport(HOST), lambda e: None)
    assert await asyncio.wait_for(m.run(), 10) == "no-gpu"


async def test_pause_and_resume(smi_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(monitor, "INTERVAL", 0.05)
    nvidia_smi.install(smi_path, A100)
    seen: list[Event] = []
    m = monitor.Monitor(LocalTransport(HOST), seen.append)
    m.paused = True  # paused from the start: a run streams the figures meanwhile
    task = asyncio.ensure_future(m.run())
    await asyncio.sleep(1.0)
    assert seen == []
    m.pause(False)
    t0 = time.monotonic()
    while not seen:
        assert time.monotonic() - t0 < 10, "no sample after resume"
        await asyncio.sleep(0.02)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_the_host_process_leaves_when_the_heartbeats_stop(smi_path: Path) -> None:
    """A cut link never closes stdin (design §7): silence for `lease` seconds ends it too."""
    nvidia_smi.install(smi_path, A100)
    argv = monitor.command(sys.executable, "test")
    spec = json.loads(argv[-1])
    argv[-1] = json.dumps({**spec, "interval": 0.1, "lease": 1.0})
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().startswith(monitor.MARK.encode())
    t0 = time.monotonic()
    code = proc.wait(timeout=10)  # stdin stays open: only the lease can end it
    assert code == 0 and 0.5 < time.monotonic() - t0 < 5
    proc.stdin.close()
