"""`UserKnownHostsFile none` (or /dev/null) in ssh_config: asyncssh would then trust any host
key, where OpenSSH still refuses an unknown one. ddptui keeps verifying (default known_hosts)
and says so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from testhosts import REPO, TestCluster

from ddptui.remote import fold

pytestmark = pytest.mark.e2e

CONFIG = "Host *\n    UserKnownHostsFile {off}\n    StrictHostKeyChecking no\n"
OFF = ["none", "/dev/null"]


def check(cluster: TestCluster, tmp_path: Path, home: Path) -> subprocess.CompletedProcess[str]:
    job = {"script": "examples/train.py"}
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=(0, 1), known_hosts=None)
    argv = [sys.executable, "-m", "ddptui.tui.cli", "--headless", "check", "-i", str(inv)]
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, timeout=180)


def home_with(tmp_path: Path, known_hosts: str | None, off: str) -> Path:
    ssh = tmp_path / "home" / ".ssh"
    ssh.mkdir(parents=True)
    (ssh / "config").write_text(CONFIG.format(off=off))
    if known_hosts is not None:
        (ssh / "known_hosts").write_text(known_hosts)
    return ssh.parent


@pytest.mark.parametrize("off", OFF)
def test_unknown_host_key_still_refused(cluster: TestCluster, tmp_path: Path, off: str) -> None:
    res = check(cluster, tmp_path, home_with(tmp_path, None, off))
    assert res.returncode == 3, res.stdout + res.stderr  # unreachable: nothing trusted blindly
    assert "host key not verified" in res.stdout
    assert f"`UserKnownHostsFile {off}` in ssh_config does not turn it off" in res.stdout


@pytest.mark.parametrize("off", OFF)
def test_known_host_key_passes_with_a_warning(
    cluster: TestCluster, tmp_path: Path, off: str
) -> None:
    res = check(cluster, tmp_path, home_with(tmp_path, cluster.known_hosts.read_text(), off))
    assert res.returncode == 0, res.stdout + res.stderr
    addresses = fold.hosts([h.addr for h in cluster.hosts[:2]])  # one line for both hosts
    assert (
        f"warn node[0-1] ssh: ssh_config sets `UserKnownHostsFile {off}` for {addresses}: "
        "ddptui still verifies its host key" in res.stdout
    )
