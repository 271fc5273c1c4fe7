"""The host agent for real, here (local transport): its hello, the code kept by its hash, its
lease, a slow login, and hosts that print what is not the protocol (bounded, and named)."""

from __future__ import annotations

import asyncio
import os
import resource
import sys
import time
from pathlib import Path

import pytest

from ddptui.remote.agents import shipper
from ddptui.remote.agents.agent import Agent, AgentError
from ddptui.remote.agents.transport import HostError, LocalTransport
from ddptui.remote.host import protocol, state
from ddptui.remote.inventory import Host


def host(python: str = sys.executable) -> Host:
    return Host(0, "localhost", "node0", "local", None, None, None, None, python, None, {}, None)


@pytest.fixture(autouse=True)
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A state dir of the test's own: the code is not there yet."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


def wrapper(tmp_path: Path, before: str) -> str:
    """A python that runs shell first (a greeting, a slow start), then the real one."""
    path = tmp_path / "python"
    path.write_text(f'#!/bin/sh\n{before}\nexec {sys.executable} "$@"\n')
    path.chmod(0o755)
    return str(path)


async def started(python: str = sys.executable, **kw: float) -> Agent:
    agent = Agent(LocalTransport(host(python)), **kw)
    await agent.start()
    return agent


async def test_hello_then_the_code_is_kept_by_its_hash(
    state_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[int] = []
    payload = shipper.payload
    monkeypatch.setattr(shipper, "payload", lambda: sent.append(1) or payload())
    agent = await started()
    try:
        assert agent.hello is not None
        assert agent.hello.pid > 0 and agent.hello.exe == sys.executable
        assert agent.hello.code == "kept" and agent.hello.missing_python is None
    finally:
        await agent.close()
    kept = state_home / "ddptui" / "code" / shipper.digest()
    assert (kept / "ddph" / "agent.py").read_text() == shipper.sources()["agent"]
    assert kept.stat().st_mode & 0o777 == 0o700
    assert sent == [1]
    again = await started()  # the hash alone: the code is not sent twice
    await again.close()
    assert sent == [1]


async def test_a_code_dir_others_could_write_is_not_trusted(state_home: Path) -> None:
    await (await started()).close()
    kept = state_home / "ddptui" / "code" / shipper.digest()
    (kept / "ddph").chmod(0o777)  # a neighbour could have put anything there
    (kept / "ddph" / "agent.py").write_text("raise SystemExit('planted code ran')\n")
    agent = await started()
    try:
        assert agent.hello is not None and agent.hello.code == "memory"  # not that copy
        assert (await agent.request(protocol.STATUS, {"nodes": []}))["runs"] == {}
    finally:
        await agent.close()


async def test_a_greeting_before_the_agent_is_kept_as_the_hosts_words(tmp_path: Path) -> None:
    python = wrapper(tmp_path, "echo 'Welcome to gpu01'; printf 'conda (base) no newline'")
    agent = await started(python)
    await agent.close()
    assert list(agent.noise) == ["Welcome to gpu01", "conda (base) no newline"]


async def test_a_slow_login_is_starting_not_lost(tmp_path: Path) -> None:
    python = wrapper(tmp_path, "sleep 2")
    t0 = time.monotonic()
    agent = await started(python, start_timeout=30)
    assert time.monotonic() - t0 >= 2
    await agent.close()
    with pytest.raises(AgentError, match=r"did not start within 0\.5 s \(job\.start_timeout\)"):
        await started(python, start_timeout=0.5)


async def test_the_agent_leaves_when_the_launcher_falls_silent() -> None:
    """A cut link never closes its stdin: its lease ends it."""
    agent = await started(lease=1.0)
    assert agent.proc is not None
    agent._tasks[1].cancel()  # the pings stop; stdin stays open
    t0 = time.monotonic()
    assert await asyncio.wait_for(agent.proc.wait(), 10) == 0
    assert 0.5 < time.monotonic() - t0 < 5
    await agent.close()


async def test_the_agent_leaves_at_eof() -> None:
    agent = await started()
    assert agent.proc is not None
    t0 = time.monotonic()
    await agent.close()
    assert await agent.proc.wait() == 0 and time.monotonic() - t0 < 2


async def test_ops_fail_in_words() -> None:
    agent = await started()
    try:
        with pytest.raises(HostError, match="unknown op 'nope'"):
            await agent.request("nope")
        with pytest.raises(HostError, match="sweep failed: KeyError"):
            await agent.request(protocol.SWEEP, {"no": "run id"})
        assert agent.ready  # an op that fails leaves the agent serving
    finally:
        await agent.close()


@pytest.mark.security
async def test_a_host_printing_endless_bytes_is_named_in_bounded_time(tmp_path: Path) -> None:
    """A broken interpreter that never stops printing, no newline: the launcher's memory stays
    flat, and the host fails with its name and what it sent."""
    python = wrapper(tmp_path, "yes x | tr -d '\\n'")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    with pytest.raises(AgentError, match=r"printed \d+ bytes without starting ddptui's agent"):
        await started(python)
    assert time.monotonic() - t0 < 10
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 50_000  # KiB


@pytest.mark.security
async def test_garbage_after_the_mark_is_named(tmp_path: Path) -> None:
    python = wrapper(tmp_path, "printf 'DDPTUI-AGENT-1\\n0 j 999999999999\\n'; exit 0")
    with pytest.raises(AgentError, match="sent what is not ddptui's agent: not a frame"):
        await started(python)
    huge = wrapper(tmp_path, "printf 'DDPTUI-AGENT-1\\n0 j 999999999\\n'; sleep 30")
    with pytest.raises(AgentError, match="a frame of 999999999 bytes"):
        await started(huge)


def test_the_boot_is_python38_and_the_host_code_too() -> None:
    """Hosts run python3 >= 3.8: every module shipped, and the boot, parse as 3.8."""
    import ast

    ast.parse(shipper.BOOT, feature_version=(3, 8))
    for name, text in shipper.sources().items():
        ast.parse(text, filename=f"{name}.py", feature_version=(3, 8))


def test_install_code_refuses_a_state_dir_of_others(tmp_path: Path, state_home: Path) -> None:
    root = state_home / "ddptui"
    root.mkdir(parents=True)
    os.chmod(root, 0o700)
    code = root / "code"
    code.symlink_to(tmp_path)  # not a directory of this user's own
    assert state.install_code("abc", {"agent": "x = 1\n"}) is None
