"""A sick GPU on an ssh test host: its nvidia-smi stand-in answers as the recorded H100 host but
with 2 uncorrectable ECC errors on GPU 3, and its kernel log (a journalctl stand-in) holds an
Xid 79 for GPU 2. Before a launch, the host fails its checks, naming both GPUs; during a run,
the same written mid-run ends the attempt and a spare takes the host's node rank (detached, a
hot spare's standby, with nobody attached)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import nvidia_smi
import pytest
from e2etools import (
    Cli,
    Cmd,
    assert_node1_ran_on_the_spare,
    assert_nothing_left,
    standbys,
    wait_for,
)  # fmt: skip
from testhosts import REPO, TestCluster

from ddptui.remote.host import procs

pytestmark = pytest.mark.e2e

LOG = Path(__file__).parents[1] / "data" / "kernel-log" / "xid-journal.txt"


@pytest.fixture
def sick_node0(cluster: TestCluster, tmp_path: Path) -> Iterator[TestCluster]:
    machine = tmp_path / "h100-sick"
    shutil.copytree(nvidia_smi.DATA / nvidia_smi.H100_BUSY, machine)
    shutil.copy(nvidia_smi.DATA / "health" / "ecc" / "health.csv", machine / "health.csv")
    cluster.put_tool(0, "nvidia-smi", nvidia_smi.stand_in(str(machine)))
    cluster.put_tool(0, "journalctl", f"#!/bin/sh\ncat {LOG}\n")
    try:
        yield cluster
    finally:
        for tool in ("nvidia-smi", "journalctl"):
            (cluster.hosts[0].bin_dir / tool).unlink(missing_ok=True)


def test_a_sick_gpu_fails_its_hosts_checks(sick_node0: TestCluster, tmp_path: Path) -> None:
    job = {"script": "examples/train.py", "master_port": 29633}
    inv = sick_node0.write_inventory(tmp_path / "inv.yaml", job, hosts=(0, 1))
    argv = [sys.executable, "-m", "ddptui.tui.cli", "--headless", "check", "-i", str(inv)]
    res = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=180)
    assert res.returncode == 1, res.stderr
    lines = res.stdout.splitlines()
    assert "FAIL node0 gpu-health: GPU 3 (00000000:5D:00.0): 2 uncorrectable ECC errors" in lines
    assert (
        "FAIL node0 gpu-health: GPU 2 (00000000:3A:00.0): Xid 79: GPU has fallen off the bus."
        in lines
    )
    assert (
        "warn node0 gpu-health: GPU 0 (00000000:18:00.0): Xid 13: Graphics SM Warp Exception on "
        "(GPC 0, TPC 1, SM 0): Out Of Range Address" in lines
    )
    [row] = [line for line in lines if line.startswith("node0 ")]
    assert row.rstrip().endswith("FAILED")
    assert not any(line.startswith("FAIL node1") for line in lines)  # a CPU host: nothing read


@pytest.fixture
def gpu_node1(cluster: TestCluster, tmp_path: Path) -> Iterator[tuple[TestCluster, Path, Path]]:
    """node1 with a healthy H100 recording it can be made sick in, and a journal of its own."""
    machine = tmp_path / "h100"
    shutil.copytree(nvidia_smi.DATA / nvidia_smi.H100_BUSY, machine)
    journal = tmp_path / "journal.txt"
    journal.write_text("kernel: Linux version 6.8.0-49-generic\n")
    cluster.put_tool(1, "nvidia-smi", nvidia_smi.stand_in(str(machine)))
    cluster.put_tool(1, "journalctl", f"#!/bin/sh\ncat {journal}\n")
    try:
        yield cluster, machine, journal
    finally:
        for tool in ("nvidia-smi", "journalctl"):
            (cluster.hosts[1].bin_dir / tool).unlink(missing_ok=True)


def test_a_gpu_failing_mid_run_ends_the_attempt_and_a_spare_takes_its_node(
    gpu_node1: tuple[TestCluster, Path, Path], tmp_path: Path
) -> None:
    """Mid-run, node1's GPU 3 counts an uncorrectable ECC error and the kernel logs an Xid 79:
    the attempt ends within 15 s naming the GPU, node1 is bad, and spare node2 takes node 1."""
    cluster, machine, journal = gpu_node1
    job = {"script": "examples/train.py", "nproc_per_node": 2, "master_port": 29634,
           "args": ["--epochs", "40", "--step-time", "0.05"], "restarts": 1,
           "restart_delay": 0.5}  # fmt: skip
    spare = {"host": cluster.hosts[2].addr, "name": "node2", "spare": True}
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1, spare])
    cli = Cli(inv, tmp_path / "run")
    run_id = cli.run_id()
    wait_for(lambda: "[r0 node0] epoch 1:" in cli.stdout, 180, "the second epoch")
    shutil.copy(nvidia_smi.DATA / "health" / "ecc" / "health.csv", machine / "health.csv")
    with journal.open("a") as f:
        f.write("kernel: NVRM: Xid (PCI:0000:3a:00): 79, pid=4242, name=python3, "
                "GPU has fallen off the bus.\n")  # fmt: skip
    began = time.monotonic()
    cause = "GPU 3 (00000000:5D:00.0) on node1: 2 uncorrectable ECC errors"
    wait_for(lambda: cause in cli.stderr, 30, "the attempt to end for the GPU")
    took = time.monotonic() - began
    assert took < 15, f"{took:.1f} s"
    assert cli.wait(240) == 0, cli.stderr
    summary = cli.summary()
    first, second = summary["attempts"]
    assert (first["status"], first["failure"]["host"]) == ("failed", "node1")
    assert first["failure"]["message"] == cause
    assert second["status"] == "succeeded"
    assert "node1 is bad for the run: a spare host takes node 1's place" in cli.stderr
    assert "node2 takes node1's place as node 1 from attempt 2" in cli.stderr
    assert summary["bad_hosts"] == [{"host": "node1", "node": 1, "why": cause}]
    assert_nothing_left(cluster, run_id, timeout=30)


@pytest.mark.slow_e2e
def test_a_detached_run_swaps_a_gpu_failure_for_a_hot_spare_with_nobody_attached(
    gpu_node1: tuple[TestCluster, Path, Path], tmp_path: Path
) -> None:
    """Detached, nobody attached: node1's GPUs go unreadable mid-run. Its supervisor ends the
    attempt and leaves (bad for the run); spare node2's standby takes node 1 and the job
    succeeds on attempt 2 in node 1's ranks; `runs` names the bad host."""
    cluster, machine, _ = gpu_node1
    home = {"XDG_DATA_HOME": str(tmp_path / "data")}
    job = {"script": "examples/train.py", "nproc_per_node": 2, "master_port": 29635,
           "args": ["--epochs", "12", "--step-time", "0.1"], "restarts": 1,
           "restart_delay": 0.5, "stop_grace": 2}  # fmt: skip
    spare = {"host": cluster.hosts[2].addr, "name": "node2", "spare": True}
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1, spare])
    cli = Cli(inv, tmp_path / "run", flags=["--detach"], env=home)
    assert cli.wait(120) == 0, cli.stderr
    assert "spare node2 stands by" in cli.stderr
    run_id = cli.stdout.splitlines()[-1]
    wait_for(lambda: len(procs.tagged_pids({"DDPTUI_RUN_ID": run_id})) >= 6, 60, "the ranks")
    shutil.copy(nvidia_smi.DATA / "health" / "lost" / "health.csv", machine / "health.csv")
    began = time.monotonic()
    node1 = {"DDPTUI_RUN_ID": run_id, "DDPTUI_NODE": "1"}
    wait_for(lambda: not procs.tagged_pids(node1), 30, "node1's job to end")
    took = time.monotonic() - began
    assert took < 15, f"{took:.1f} s"
    assert_node1_ran_on_the_spare(cluster, run_id)
    cause = "GPU 3 (00000000:5D:00.0) on node1: cannot be read: nvidia-smi answers ERR!"
    listed = Cmd(["runs", "--json"], tmp_path / "runs", home)
    assert listed.wait(60) == 0, listed.stderr
    (row,) = json.loads(listed.stdout)["runs"]
    assert row["bad_hosts"] == [{"host": "node1", "why": cause}], row
    assert_nothing_left(cluster, run_id, timeout=30)
    wait_for(lambda: not standbys(run_id), 20, "the standby to leave")
