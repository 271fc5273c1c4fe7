"""Runs that outlive the launcher's link, on real sshd hosts with real torchrun.

A dropped session is reconnected and the host's stream resumed without a line lost or repeated;
a host whose network is cut (veth down: no FIN, no RST) is lost, and its own supervisor stops
its ranks when it hears from no launcher for link_timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from e2etools import Cli, assert_nothing_left, cmdline, ns_pids, wait_for
from testhosts import TestCluster, veth_name

pytestmark = pytest.mark.e2e

TICK = "tests/data/tick.py"


def tick_job(count: int, every: float, port: int, **job: object) -> dict[str, object]:
    return {
        "script": TICK,
        "args": [str(count), str(every)],
        "nproc_per_node": 2,
        "master_port": port,
        **job,
    }


def ticks(text: str, rank: int, prefix: str = "") -> list[str]:
    return [line for line in text.splitlines() if line.startswith(f"{prefix}tick {rank} ")]


def kill_sessions(cluster: TestCluster, i: int) -> int:
    """SIGKILL the sshd sessions on host i (not its listener): the link drops, the host stays."""
    host = cluster.hosts[i]
    sessions = [p for p in ns_pids(host.netns) if p != host.pid and cmdline(p).startswith("sshd")]
    for pid in sessions:
        os.kill(pid, signal.SIGKILL)
    return len(sessions)


def test_dropped_session_resumes_without_losing_a_line(
    cluster: TestCluster, tmp_path: Path
) -> None:
    count = 400
    job = tick_job(count, 0.02, 29631, link_timeout=60)
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1])
    cli = Cli(inv, tmp_path / "run")
    run_id = cli.run_id()
    wait_for(lambda: len(ticks(cli.stdout, 3, "[r3 node1] ")) > 40, 60, "node1's ranks to tick")
    assert kill_sessions(cluster, 1)
    assert cli.wait(120) == 0, cli.stderr
    want = [f"tick {r} {i}" for r in range(4) for i in range(count)]
    for r in range(4):
        host = f"node{r // 2}"
        expected = [line for line in want if line.startswith(f"tick {r} ")]
        assert ticks(cli.stdout, r, f"[r{r} {host}] ") == [f"[r{r} {host}] {t}" for t in expected]
        assert ticks((cli.run_dir / f"rank-{r}.log").read_text(), r) == expected
    assert "node1: warning: connection lost; reconnecting" in cli.stderr
    assert "node1: reconnected after" in cli.stderr
    assert_nothing_left(cluster, run_id)


def test_cut_host_is_lost_and_stops_its_own_ranks(cluster: TestCluster, tmp_path: Path) -> None:
    job = tick_job(100_000, 0.05, 29632, link_timeout=20, stop_grace=3)
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1, 2])
    cli = Cli(inv, tmp_path / "run")
    run_id = cli.run_id()
    wait_for(lambda: ticks(cli.stdout, 5, "[r5 node2] "), 60, "node2's ranks to tick")
    veth = veth_name(cluster.prefix, 2)
    cut = time.monotonic()
    subprocess.run(["ip", "link", "set", veth, "down"], check=True)
    try:
        assert cli.wait(120) == 1, cli.stderr
        summary = cli.summary()
        assert summary["failing_host"] == "node2"
        assert "lost" in summary["failure"]["message"]
        # The cut-off host heard from no launcher (and no hub) for link_timeout: it stopped.
        assert_nothing_left(cluster, run_id, timeout=20 + 3 + 15)
        assert time.monotonic() - cut < 20 + 3 + 15
    finally:
        subprocess.run(["ip", "link", "set", veth, "up"], check=True)
