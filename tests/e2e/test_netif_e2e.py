"""The route check and the interface variables on real namespaces, beyond one primary IPv4
address per interface: a route through a secondary address, and an IPv6 master."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from e2etools import Cli
from testhosts import REPO, TestCluster

pytestmark = pytest.mark.e2e


def ip(cluster: TestCluster, i: int, *args: str, check: bool = True) -> None:
    res = cluster.netns_exec(i, ["ip", *args])
    assert res.returncode == 0 or not check, res.stderr


@contextmanager
def addresses(cluster: TestCluster, adds: dict[int, list[str]]) -> Iterator[None]:
    """Extra addresses on hosts' eth0 (`ip addr add ... dev eth0 ARGS`), removed after."""
    try:
        for i, addrs in adds.items():
            for a in addrs:
                ip(cluster, i, "addr", "add", *a.split(), "dev", "eth0")
        yield
    finally:
        for i, addrs in adds.items():
            for a in addrs:
                ip(cluster, i, "addr", "del", a.split()[0], "dev", "eth0", check=False)


def check(inv: Path) -> dict[str, dict[str, object]]:
    argv = [sys.executable, "-m", "ddptui.tui.cli", "--headless", "check", "-i", str(inv), "--json"]
    res = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    return {h["host"]: h["facts"] for h in json.loads(res.stdout)["hosts"]}


def v6(cluster: TestCluster, i: int) -> str:
    return f"fd42:213:{cluster.subnet.split('.')[2]}::{11 + i}"


def test_route_through_a_secondary_address(cluster: TestCluster, tmp_path: Path) -> None:
    secondary = f"{cluster.subnet}.201"
    master = cluster.hosts[0].addr
    inv = cluster.write_inventory(tmp_path / "inv.yaml", {"script": "examples/train.py"}, (0, 1))
    with addresses(cluster, {1: [f"{secondary}/24"]}):
        ip(cluster, 1, "route", "add", f"{master}/32", "dev", "eth0", "src", secondary)
        try:
            facts = check(inv)  # the route's source is node1's secondary address
        finally:
            ip(cluster, 1, "route", "del", f"{master}/32", check=False)
    assert facts["node1"]["ifname"] == "eth0"


def test_ipv6_master(cluster: TestCluster, tmp_path: Path) -> None:
    job = {
        "script": "examples/train.py",
        "args": ["--epochs", "1"],
        "nproc_per_node": 1,
        "master_port": 29651,
        "master_addr": v6(cluster, 0),
    }
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, (0, 1))
    with addresses(cluster, {i: [f"{v6(cluster, i)}/64 nodad"] for i in (0, 1)}):
        facts = check(inv)
        assert [facts[n]["ifname"] for n in ("node0", "node1")] == ["eth0", "eth0"]
        cli = Cli(inv, tmp_path / "run")
        assert cli.wait() == 0, cli.stderr
    assert "done" in (cli.run_dir / "rank-0.log").read_text()
