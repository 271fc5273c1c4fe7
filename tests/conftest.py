"""Shared pytest fixtures. The tests go by tier, each a folder:

unit/     the launcher's pure parts, with fakes
host/     the host side (remote/host/) run here, through the local transport
app/      the dashboard under Pilot: scripted fakes, the real engine, snapshots
e2e/      real sshd test hosts in network namespaces (support/testhosts.py), real torchrun
support/  what they share: the test hosts, the app's fakes, e2e helpers, nvidia-smi stand-ins
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "support"))

import containerhosts
import nvidia_smi
import pytest
import slurmhosts
from testhosts import DEFAULT_PREFIX, SUBNET, TestCluster, check_prerequisites

# DDPTUI_TESTHOSTS=PREFIX:SUBNET runs this session's hosts apart from another session's (two
# checkouts testing at once on one machine); the default is testhosts.py's.
PREFIX, _, SUBNET = os.environ.get("DDPTUI_TESTHOSTS", f"{DEFAULT_PREFIX}:{SUBNET}").partition(":")
# DDPTUI_SLURMHOSTS=PREFIX:SUBNET likewise for the Slurm test cluster (support/slurmhosts.py).
SLURM_PREFIX, _, SLURM_SUBNET = os.environ.get(
    "DDPTUI_SLURMHOSTS", f"{slurmhosts.PREFIX}:{slurmhosts.SUBNET}"
).partition(":")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: needs the ssh test-host cluster (root, sshd, netns)")


SLOW_E2E = Path(__file__).with_name("slow_e2e.txt")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: the mark must be on when it looks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long stories listed in slow_e2e.txt go behind `slow_e2e` (scripts/slow_e2e.sh)."""
    slow = {
        line.strip() for line in SLOW_E2E.read_text().splitlines() if line.strip()[:1] not in "#"
    }
    for item in items:
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow_e2e)


def _under_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def require_testhosts() -> None:
    """Skip where this machine can't run test hosts, except under CI, where that fails."""
    try:
        check_prerequisites()
    except RuntimeError as exc:
        if _under_ci():
            raise
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def cluster(
    require_testhosts: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestCluster]:
    """Four ssh test hosts node0..node3 (see testhosts.py), shared by the whole session."""
    root = tmp_path_factory.mktemp("testhosts")
    with TestCluster(n=4, root=root, prefix=PREFIX, subnet=SUBNET) as c:
        yield c


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurmhosts.SlurmCluster]:
    """A real Slurm (slurmhosts.py): a controller, its login node, three compute nodes,
    shared by the whole session; skipped where this machine lacks it, but under CI."""
    try:
        slurmhosts.check_prerequisites()
    except RuntimeError as exc:
        if _under_ci():
            raise
        pytest.skip(str(exc))
    root = tmp_path_factory.mktemp("slurmhosts")
    with slurmhosts.SlurmCluster(3, root=root, prefix=SLURM_PREFIX, subnet=SLURM_SUBNET) as c:
        yield c


# node0: 8 H100s (GPUs 2 and 5 busy), node1: 4 A100s, node2: no nvidia-smi, node3: a driver error
GPU_MACHINES = {0: nvidia_smi.H100_BUSY, 1: nvidia_smi.A100, 3: nvidia_smi.DRIVER_ERROR}


@pytest.fixture(scope="module")
def gpu_cluster(cluster: TestCluster) -> Iterator[TestCluster]:
    """The session's hosts with the stand-ins on their PATH; taken off again for other tests."""
    for i, machine in GPU_MACHINES.items():
        cluster.put_tool(i, "nvidia-smi", nvidia_smi.stand_in(machine))
    try:
        yield cluster
    finally:
        for host in cluster.hosts:
            (host.bin_dir / "nvidia-smi").unlink(missing_ok=True)


@pytest.fixture(scope="module")
def podman(cluster: TestCluster) -> Iterator[TestCluster]:
    """The session's hosts with podman (it stays on: nothing else minds it)."""
    if containerhosts.missing() and not os.environ.get("CI"):
        pytest.skip(f"podman test hosts need {containerhosts.APT}")
    cluster.enable_containers()
    yield cluster


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file of its owner's alone (0600) that an attacker's planted symlinks point at
    (the `security` tests: it must come out as it went in)."""
    path = tmp_path / "victim"
    path.write_text("precious\n")
    path.chmod(0o600)
    return path
