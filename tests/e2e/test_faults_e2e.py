"""Verdicts and lines under faults, on real sshd test hosts with real torchrun (issue 19).

The faults as they come: a link cut is `ip link set <veth> down` (no FIN, no RST), a laptop's
lid is a SIGSTOP of the launcher. The run names the host and cause that were, and no line a
rank printed is lost. Each uses a short link_timeout: what waits for a lease waits seconds.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from e2etools import Cli, Cmd, assert_nothing_left, cmdline, wait_for
from testhosts import TestCluster, veth_name

from remote.host import procs

pytestmark = pytest.mark.e2e

TICK = "tests/data/tick.py"
LEASE = 4  # link_timeout of every run here


def tick_job(port: int, **job: object) -> dict[str, object]:
    """Two ranks a host, a line each 0.05 s each, for as long as the test needs."""
    return {
        "script": TICK,
        "args": ["100000", "0.05"],
        "nproc_per_node": 2,
        "master_port": port,
        "link_timeout": LEASE,
        "stop_grace": 2,
        **job,
    }


@pytest.fixture
def data_home(tmp_path: Path) -> dict[str, str]:
    """Where the CLI keeps its runs (each test its own history)."""
    return {"XDG_DATA_HOME": str(tmp_path / "data")}


@contextmanager
def cut(cluster: TestCluster, i: int) -> Iterator[None]:
    """Host i's link down (veth down: its sshd and supervisor see nothing), up again after."""
    veth = veth_name(cluster.prefix, i)
    subprocess.run(["ip", "link", "set", veth, "down"], check=True)
    try:
        yield
    finally:
        subprocess.run(["ip", "link", "set", veth, "up"], check=True)


def supervisors(run_id: str) -> list[int]:
    """The run's supervisors on any host (their command line names the run's directory)."""
    return [p for p in procs.all_pids() if run_id in cmdline(p) and "daemon" in cmdline(p)]


def node_state(cluster: TestCluster, run_id: str, k: int) -> dict[str, object]:
    path = cluster.hosts[k].home / f".local/state/ddptui/runs/{run_id}/n{k}/state.json"
    return dict(json.loads(path.read_text()))


@pytest.mark.parametrize("k", [1, 0])
def test_a_detached_run_with_a_host_cut_names_that_host(
    cluster: TestCluster, tmp_path: Path, data_home: dict[str, str], k: int
) -> None:
    """Nobody attached, host k cut off past the lease. The cut-off side blames the other
    (a peer loses its hub; the hub, every peer), so the hub's view decides, the same in
    `runs` and in an attach: node1 lost, or node 0 cut off (its hub heard from no peer)."""
    job = tick_job(29951 + k)
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1, 2])
    cli = Cli(inv, tmp_path / "run", flags=["--detach"], env=data_home)
    assert cli.wait(120) == 0, cli.stderr
    run_id = cli.stdout.splitlines()[-1]
    time.sleep(1)  # the ranks tick
    with cut(cluster, k):
        assert_nothing_left(cluster, run_id, timeout=LEASE + 15)
        wait_for(lambda: not supervisors(run_id), LEASE + 15, "the supervisors to end")
    if k == 1:
        blamed, why = "node1", "node 1 (node1) lost: its supervisor was not heard from for 4 s"
        listed = "node1 was lost"
    else:
        blamed, why = "node0", "node 0 (node0), the run's hub, heard from no peer for 4 s"
        why = listed = f"{why}: its own network was cut"
    runs = Cmd(["runs", "--json"], tmp_path / "runs", data_home)
    assert runs.wait(60) == 0, runs.stderr
    (run,) = json.loads(runs.stdout)["runs"]
    assert (run["status"], run["detail"]) == ("failed", listed)
    attach = Cmd(["attach", run_id], tmp_path / "attach", data_home)
    assert attach.wait(60) == 1, attach.stderr
    assert f"run failed: {blamed}: {why}" in attach.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["status"], summary["failing_host"]) == ("failed", blamed)
    runs = Cmd(["runs", "--json"], tmp_path / "runs2", data_home)
    assert runs.wait(60) == 0, runs.stderr
    assert json.loads(runs.stdout)["runs"][0]["status"] == "failed"  # one status, before or after
