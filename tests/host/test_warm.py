"""A launch's supervisors boot while its checks run (remote/host/nodes.py: warm): one waits per
agent, the start takes it, and one never used leaves with its agent, having made nothing."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote import shipper
from remote.host import nodes, state


@pytest.fixture
def code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The host code kept as an agent keeps it, and no warm supervisor left behind."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    kept = state.install_code(shipper.digest(), shipper.sources())
    assert kept is not None
    yield kept
    for _, proc in nodes._warm:
        proc.kill()
        proc.wait()
    nodes._warm.clear()


def test_one_waits_and_the_start_takes_it(code: str) -> None:
    nodes.warm(code, "run-a")
    nodes.warm(code, "run-a")  # asked twice: the one waiting serves
    assert len(nodes._warm) == 1
    ((_, proc),) = nodes._warm
    assert proc.poll() is None and nodes.DAEMON_BOOT in proc.args
    assert "run-a" in proc.args  # `ps` shows whose it is
    assert nodes._take_warm(code, "run-a") is proc and nodes._warm == []
    proc.kill()
    proc.wait()


def test_another_runs_is_ended_never_taken(code: str) -> None:
    nodes.warm(code, "run-a")  # its checks failed: the next launch from this agent ends it
    ((_, first),) = nodes._warm
    nodes.warm(code, "run-b")
    ((_, second),) = nodes._warm
    assert first.poll() is not None and "run-b" in second.args
    assert nodes._take_warm(code, "run-c") is None and nodes._warm == []
    assert second.poll() is not None


def test_one_never_used_leaves_with_its_agent_and_made_nothing(code: str) -> None:
    nodes.warm(code, "run-a")
    ((_, proc),) = nodes._warm
    said, _ = proc.communicate(b"", timeout=30)  # the agent left: its stdin ends
    assert proc.returncode == 0 and said == b""
    assert not os.path.exists(state.runs_dir())


def test_a_dead_one_is_not_taken(code: str) -> None:
    nodes.warm(code, "run-a")
    ((_, proc),) = nodes._warm
    proc.kill()
    proc.wait()
    assert nodes._take_warm(code, "run-a") is None and nodes._warm == []
    assert sys.executable in proc.args
