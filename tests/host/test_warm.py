"""A launch's supervisors boot while its checks run (remote/host/nodes.py: warm): one waits per
agent, the start takes it, and one never used leaves with its agent, having made nothing. Given
its node's early spec, it is prepared (detached, its socket bound) and waits for the go: no job
before it, and nothing left when no go comes."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddptui.remote.agents import shipper
from ddptui.remote.host import nodes, procs, protocol, state

EARLY = {"run_id": "run-a", "node": 1, "attempt": 0, "grace": 1.0, "container": None}


@pytest.fixture
def code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The host code kept as an agent keeps it, and no warm supervisor left behind."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    kept = state.install_code(shipper.digest(), shipper.sources())
    assert kept is not None
    yield kept
    for _, proc, _ in nodes._warm:
        nodes._end(proc)
    nodes._warm.clear()


def test_one_waits_and_the_start_takes_it(code: str) -> None:
    nodes.warm(code, "run-a")
    nodes.warm(code, "run-a")  # asked twice: the one waiting serves
    assert len(nodes._warm) == 1
    ((_, proc, _),) = nodes._warm
    assert proc.poll() is None and nodes.DAEMON_BOOT in proc.args
    assert "run-a" in proc.args  # `ps` shows whose it is
    assert nodes._take_warm(code, EARLY) == (proc, False) and nodes._warm == []
    proc.kill()
    proc.wait()


def test_another_runs_is_ended_never_taken(code: str) -> None:
    nodes.warm(code, "run-a")  # its checks failed: the next launch from this agent ends it
    ((_, first, _),) = nodes._warm
    nodes.warm(code, "run-b")
    ((_, second, _),) = nodes._warm
    assert first.poll() is not None and "run-b" in second.args
    assert nodes._take_warm(code, {**EARLY, "run_id": "run-c"}) == (None, False)
    assert nodes._warm == []
    assert second.poll() is not None


def test_one_never_used_leaves_with_its_agent_and_made_nothing(code: str) -> None:
    nodes.warm(code, "run-a")
    ((_, proc, _),) = nodes._warm
    said, _ = proc.communicate(b"", timeout=30)  # the agent left: its stdin ends
    assert proc.returncode == 0 and said == b""
    assert not os.path.exists(state.runs_dir())


def test_a_dead_one_is_not_taken(code: str) -> None:
    nodes.warm(code, "run-a")
    ((_, proc, _),) = nodes._warm
    proc.kill()
    proc.wait()
    assert nodes._take_warm(code, EARLY) == (None, False) and nodes._warm == []
    assert sys.executable in proc.args


def daemons(run_id: str) -> list[int]:
    """The run's supervisors on this host: their command lines name the run."""
    found = []
    for pid in procs.all_pids():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if nodes.DAEMON_BOOT.encode() in argv and run_id.encode() in argv:
            found.append(pid)
    return found


def test_a_prepared_node_waits_for_its_go_and_leaves_without_it(code: str) -> None:
    nodes.warm(code, "run-a", EARLY)
    ((_, proc, early),) = nodes._warm
    assert early == EARLY
    ndir = state.node_dir("run-a", 1)
    deadline = time.monotonic() + 30
    while not os.path.exists(os.path.join(ndir, protocol.CTL_SOCKET)):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert proc.wait(timeout=30) == 0  # detached: its first process is gone, its daemon waits
    assert nodes._alive(proc, early) and daemons("run-a")
    assert not procs.tagged_pids({"DDPTUI_RUN_ID": "run-a"})  # no job, nor its guardian's work
    nodes.warm(code, "run-a", EARLY)  # asked again: the prepared one serves
    assert len(nodes._warm) == 1
    assert nodes._take_warm(code, {**EARLY, "node": 2}) == (None, False)  # another node's
    deadline = time.monotonic() + 30
    while daemons("run-a") or os.path.exists(os.path.dirname(ndir)):
        assert time.monotonic() < deadline, "the unused node left something"
        time.sleep(0.05)
    assert os.path.isdir(state.runs_dir())


def test_a_prepared_node_is_taken_by_its_start(code: str) -> None:
    nodes.warm(code, "run-a", EARLY)
    ((_, proc, _),) = nodes._warm
    assert nodes._take_warm(code, dict(EARLY)) == (proc, True)
    nodes._end(proc)
