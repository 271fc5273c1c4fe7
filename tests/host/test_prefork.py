"""The agent's prefork supervisor (remote/host/prefork.py): forked before the agent's threads, it
waits for a command line. Taken, it is the supervisor, and `ps` names its run; unused, it
leaves with its agent. Every launch of the other tests starts its supervisors this way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddptui.remote.agents import ops, shipper
from ddptui.remote.agents.agent import Agent
from ddptui.remote.agents.transport import LocalTransport
from ddptui.remote.host import nodes, procs, protocol, state
from ddptui.remote.inventory import Host

REPO = Path(__file__).resolve().parents[2]
EARLY = {"run_id": "run-s", "node": 0, "attempt": 0, "grace": 1.0, "container": None}
# A process with no thread yet, as the agent's start is: a prefork, then a prepared node taken
# from it; it says what it got and what `ps` shows, then leaves without the go.
PREPARE = """
import json, os, sys, time
from ddptui.remote.host import nodes, prefork, state
code, early = sys.argv[1], json.loads(sys.argv[2])
prefork.fork(code)
nodes.warm(code, early["run_id"], early)
((_, proc, _),) = nodes._warm
sock = os.path.join(state.node_dir(early["run_id"], 0), "ctl.sock")
while not os.path.exists(sock):
    time.sleep(0.02)
print(json.dumps([type(proc).__name__, proc.wait(timeout=30)]), flush=True)
sys.stdin.read()  # the test has looked: leave, and the node with us (no go came)
"""


@pytest.fixture
def code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    kept = state.install_code(shipper.digest(), shipper.sources())
    assert kept is not None
    return kept


def daemons(run_id: str) -> list[list[bytes]]:
    """The command lines of this run's supervisors, as `ps` reads them."""
    found = []
    for pid in procs.all_pids():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        except OSError:
            continue
        if nodes.DAEMON_BOOT.encode() in argv and run_id.encode() in argv:
            found.append(argv)
    return found


def children(pid: int) -> list[int]:
    return [p for p in procs.all_pids() if (procs.stat(p) or (0, 0))[1] == pid]


def test_a_taken_prefork_is_the_supervisor_and_ps_names_its_run(code: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", PREPARE, code, json.dumps(EARLY)], cwd=REPO,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdin is not None
    kind, first_exit = json.loads(proc.stdout.readline())
    assert (kind, first_exit) == ("Prefork", 0)  # its first process left: the daemon waits
    want = [sys.executable, "-S", "-c", nodes.DAEMON_BOOT, code, "run-s"]
    found = daemons("run-s")  # the daemon and its guardian (a fork of it)
    assert found and all(argv == [a.encode() for a in want] for argv in found)
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0
    deadline = time.monotonic() + 30
    while daemons("run-s") or Path(state.node_dir("run-s", 0)).exists():
        assert time.monotonic() < deadline, "the unused node left something"
        time.sleep(0.05)


async def started(prefork: bool = True) -> Agent:
    host = Host(0, "localhost", "node0", "local", None, None, None, None, sys.executable, None,
                {}, None)  # fmt: skip
    agent = Agent(LocalTransport(host), prefork=prefork)
    await agent.start()
    assert agent.hello is not None and agent.hello.code == "kept"
    return agent


async def test_an_op_no_launch_sends_ends_the_prefork(code: str) -> None:
    """A check, the dashboard, an attach or a stop: nothing of ours idles beside the agent."""
    agent = await started()
    try:
        assert agent.hello is not None and len(children(agent.hello.pid)) == 1
        assert (await agent.request(protocol.STATUS, {"nodes": []}))["runs"] == {}
        assert children(agent.hello.pid) == []  # gone, and reaped
    finally:
        await agent.close()


async def test_an_unused_prefork_is_no_agent_in_ps_and_leaves_with_its_agent(code: str) -> None:
    agent = await started()
    assert agent.hello is not None
    (prefork,) = children(agent.hello.pid)
    argv = Path(f"/proc/{prefork}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    assert argv == [sys.executable.encode(), b"ddptui-prefork", b"agent", b"%d" % agent.hello.pid]
    assert b"from ddph import agent" in Path(f"/proc/{agent.hello.pid}/cmdline").read_bytes()
    await agent.close()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{prefork}").exists() and (procs.stat(prefork) or ("Z",))[0] != "Z":
        assert time.monotonic() < deadline, "the prefork outlived its agent"
        time.sleep(0.05)


async def test_an_agent_no_launch_follows_makes_no_prefork(
    code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slurm's login node: its agent answers at once, and the word does not reach what it runs
    (sbatch would pass it on to the job's nodes)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\nexec env\n")
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    agent = await started(prefork=False)
    try:
        assert agent.hello is not None and children(agent.hello.pid) == []
        reply = await ops.slurm(agent, ["sbatch"])
        assert reply.code == 0 and "PATH=" in reply.out
        assert protocol.NO_PREFORK not in reply.out
    finally:
        await agent.close()
