"""A sick GPU found by `check` on an ssh test host: its nvidia-smi stand-in answers as the
recorded H100 host but with 2 uncorrectable ECC errors on GPU 3, and its kernel log (a journalctl
stand-in) holds an Xid 79 for GPU 2. The host fails its checks, naming both GPUs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import nvidia_smi
import pytest
from testhosts import REPO, TestCluster

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
