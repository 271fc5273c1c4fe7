"""Runs that outlive the launcher's link, on real sshd hosts with real torchrun.

A dropped session is reconnected and the host's stream resumed without a line lost or repeated;
a host whose network is cut (veth down: no FIN, no RST) is lost, and its own supervisor stops
its ranks when it hears from no launcher for link_timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from e2etools import Cli, Cmd, assert_nothing_left, cmdline, ns_pids, wait_for
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
    assert "node1: reconnected: the link was silent for" in cli.stderr
    assert_nothing_left(cluster, run_id)


@pytest.mark.slow_e2e
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


def alive(cluster: TestCluster, run_id: str) -> int:
    return len(cluster.pids_with_env("DDPTUI_RUN_ID", run_id))


@pytest.fixture
def data_home(tmp_path: Path) -> dict[str, str]:
    """Where the CLI keeps its runs (each test its own history)."""
    return {"XDG_DATA_HOME": str(tmp_path / "data")}


def test_attach_within_link_timeout_keeps_a_run_whose_launcher_died(
    cluster: TestCluster, tmp_path: Path, data_home: dict[str, str]
) -> None:
    job = tick_job(100_000, 0.05, 29633, link_timeout=8, stop_grace=2)
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1])
    cli = Cli(inv, tmp_path / "run", env=data_home)
    run_id = cli.run_id()
    wait_for(lambda: ticks(cli.stdout, 3, "[r3 node1] "), 60, "the ranks to tick")
    cli.proc.kill()
    attach = Cmd(["attach", run_id[:-2]], tmp_path / "attach", data_home)
    wait_for(lambda: "tick 3 " in attach.stdout, 30, "the attach to replay")
    time.sleep(8 + 4)  # past link_timeout: the attach holds the lease now
    assert alive(cluster, run_id) >= 6 and attach.proc.poll() is None, attach.stderr
    attach.proc.send_signal(signal.SIGINT)  # Ctrl-C detaches: the run goes on
    assert attach.wait(30) == 130
    assert "detaching" in attach.stderr
    assert alive(cluster, run_id) >= 6
    stop = Cmd(["stop", run_id], tmp_path / "stop", data_home)
    assert stop.wait(60) == 0, stop.stderr
    assert_nothing_left(cluster, run_id, timeout=5)


def test_detach_attach_kill_stop_history(
    cluster: TestCluster, tmp_path: Path, data_home: dict[str, str]
) -> None:
    job = tick_job(100_000, 0.05, 29634, link_timeout=5, stop_grace=2)
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1])
    cli = Cli(inv, tmp_path / "run", flags=["--detach"], env=data_home)
    assert cli.wait(120) == 0, cli.stderr
    run_id = cli.stdout.splitlines()[-1]  # the run id alone on the last line
    assert run_id == cli.run_id()
    time.sleep(5 + 3)  # nobody attached for longer than link_timeout: it runs on
    assert alive(cluster, run_id) >= 6
    attach = Cmd(["attach", str(tmp_path / "run")], tmp_path / "attach", data_home)
    tagged = [(r, f"[r{r} node{r // 2}] ") for r in range(4)]
    wait_for(lambda: all(ticks(attach.stdout, r, t)[20:] for r, t in tagged), 30, "the replay")
    for r in range(4):  # replayed from the very first line, in order
        got = ticks(attach.stdout, r, f"[r{r} node{r // 2}] ")
        assert got[:20] == [f"[r{r} node{r // 2}] tick {r} {i}" for i in range(20)]
    attach.proc.kill()
    time.sleep(5 + 3)
    assert alive(cluster, run_id) >= 6  # an attach to a detached run holds no lease
    listed = Cmd(["runs", "--json"], tmp_path / "runs", data_home)
    assert listed.wait(60) == 0, listed.stderr
    assert json.loads(listed.stdout)["runs"][0]["status"] == "running"
    stop = Cmd(["stop", run_id[:12]], tmp_path / "stop", data_home)
    assert stop.wait(60) == 0, stop.stderr
    assert_nothing_left(cluster, run_id, timeout=5)
    listed = Cmd(["runs", "--json"], tmp_path / "runs2", data_home)
    assert listed.wait(60) == 0, listed.stderr
    (run,) = json.loads(listed.stdout)["runs"]
    assert (run["id"], run["status"], run["hosts"]) == (run_id, "stopped", ["node0", "node1"])


def test_detached_failure_stops_every_host_and_attach_names_it(
    cluster: TestCluster, tmp_path: Path, data_home: dict[str, str]
) -> None:
    job = tick_job(100_000, 0.05, 29635, link_timeout=30, stop_grace=2)
    job["args"] = ["400", "0.05", "3"]  # rank 3 (node1) raises at tick 200, ~10 s in
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1, 2])
    cli = Cli(inv, tmp_path / "run", flags=["--detach"], env=data_home)
    assert cli.wait(120) == 0, cli.stderr
    run_id = cli.stdout.splitlines()[-1]
    # Nobody attached: the supervisors tell each other, well before gloo's 30 min timeout.
    assert_nothing_left(cluster, run_id, timeout=60)
    attach = Cmd(["attach", run_id], tmp_path / "attach", data_home)
    assert attach.wait(60) == 1, attach.stderr
    assert "run failed: rank 3 on node1" in attach.stderr
    assert "RuntimeError: rank 3 failed on purpose at tick 200" in attach.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["failing_rank"], summary["failing_host"]) == (3, "node1")
    assert any("raise RuntimeError" in line for line in summary["failure"]["traceback"])
    # From disk. torchrun tees a rank's stdout and stderr from two files polled apart, so the
    # traceback may land a few stdout lines before the last tick: a tail with room for that.
    again = Cmd(["attach", run_id, "--tail", "40"], tmp_path / "again", data_home)
    assert again.wait(30) == 1, again.stderr
    assert "run failed: rank 3 on node1" in again.stderr
    assert "[r3 node1] RuntimeError: rank 3 failed on purpose at tick 200" in again.stdout
    assert sum(line.startswith("[r3 node1]") for line in again.stdout.splitlines()) == 40
