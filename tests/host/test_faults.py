"""Faults on this machine (local transport): the real supervisors, hub and engine, several
nodes on one host. The verdict names the right node and cause, the run ends as soon as all is
known, and no line is lost. Faults that need a network (a cut link) are tests/e2e's.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from runtools import run_job

from remote import inventory
from remote.events import Event, LogBatch, NodeStarted
from remote.host import procs
from remote.run import Run

SLEEPER = "import os, time\nprint('up', os.environ['NODE_RANK'], flush=True)\ntime.sleep(300)\n"
LEASE = 20.0  # link_timeout: every end below must come well before it


def write(tmp: Path, nodes: int = 3, hosts: dict[int, dict[str, Any]] | None = None,
          **job: Any) -> inventory.Inventory:  # fmt: skip
    (tmp / "job.py").write_text(SLEEPER)
    doc = {
        "defaults": {"transport": "local", "workdir": str(tmp), "python": sys.executable},
        "hosts": [
            {"host": "localhost", "name": f"node{k}", **(hosts or {}).get(k, {})}
            for k in range(nodes)
        ],
        "job": {
            "script": "job.py", "launcher": "env", "master_port": "auto", "stop_grace": 1,
            "link_timeout": LEASE, "nccl": {"socket_ifname": None}, **job,
        },
    }  # fmt: skip
    (tmp / "inventory.yaml").write_text(yaml.safe_dump(doc))
    return inventory.load(tmp / "inventory.yaml")


def node_dir(run: Run, k: int) -> Path:
    return Path.home() / ".local/state/ddptui/runs" / run.run_id / f"n{k}"


def supervisors(run_id: str) -> list[int]:
    """The run's supervisors (and their guardians): their command line names its directory."""
    found = []
    for pid in procs.all_pids():
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if run_id.encode() in cmd and b"daemon" in cmd:
            found.append(pid)
    return found


def up(events: list[Event], nodes: int) -> bool:
    said = {text for e in events if isinstance(e, LogBatch) for _, text in e.lines}
    return len([e for e in events if isinstance(e, NodeStarted)]) >= nodes and all(
        f"up {k}" in said for k in range(nodes)
    )


@pytest.mark.parametrize("k", [1, 0])
async def test_a_killed_supervisor_ends_the_run_at_once(tmp_path: Path, k: int) -> None:
    """SIGKILL of node k's supervisor: the launcher finds its stream ended without a word and
    tells the hub (of the hub's own, every peer), so nobody waits out link_timeout for it."""
    inv = write(tmp_path)
    killed: list[float] = []

    def kill(run: Run, events: list[Event]) -> None:
        if not killed and up(events, 3):
            pid = json.loads((node_dir(run, k) / "state.json").read_text())["pid"]
            os.kill(pid, signal.SIGKILL)
            killed.append(time.monotonic())

    fin, _ = await run_job(inv, tmp_path, kill, timeout=LEASE)
    took = time.monotonic() - killed[0]
    print(f"node {k}'s supervisor killed: the launcher ended {took:.2f} s later")
    assert fin.status == "failed" and fin.failure is not None
    assert (fin.failure.host, fin.failure.message) == (
        f"node{k}",
        "its supervisor died (the host's part is swept by the run's tags)",
    )
    assert took < 5  # the others stopped (grace 1 s) and ended: not LEASE later
    run_id = json.loads((tmp_path / "run" / "run.json").read_text())["run_id"]
    assert not supervisors(run_id)


async def test_a_node_that_cannot_start_ends_the_run_at_once(tmp_path: Path) -> None:
    """node 0's job cannot start (no workdir there): its hub said where it listens first, so
    the others learn it, tell it their end, and leave at once (before, each waited
    link_timeout for an address that never came)."""
    inv = write(tmp_path, hosts={0: {"workdir": str(tmp_path / "nowhere")}})
    t0 = time.monotonic()
    fin, _ = await run_job(inv, tmp_path, timeout=LEASE)
    took = time.monotonic() - t0
    print(f"node 0 could not start: the run ended in {took:.2f} s")
    assert fin.failure is not None and fin.failure.host == "node0"
    assert "cannot start" in fin.failure.message
    assert took < 5
    run_id = json.loads((tmp_path / "run" / "run.json").read_text())["run_id"]
    assert not supervisors(run_id)
