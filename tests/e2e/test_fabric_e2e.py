"""The deep check through ddptui (`check --deep --json`) on 4 test hosts, gloo over their links:
one host's link throttled with tc (tbf, both directions) is named alone, with the all-reduce's
figures; on healthy links none is; a Ctrl-C leaves nothing of the test; 4 hosts well under a
minute."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from e2etools import Cmd, assert_nothing_left, wait_for
from testhosts import TestCluster, throttled

pytestmark = pytest.mark.e2e

HOSTS = (0, 1, 2, 3)
JOB = {"script": "examples/train.py", "nproc_per_node": 1, "master_port": 29761}


def deep_check(cluster: TestCluster, tmp: Path, name: str) -> tuple[dict[str, Any], float]:
    inv = cluster.write_inventory(tmp / f"{name}.yaml", JOB, hosts=HOSTS)
    args = ["check", "-i", str(inv), "--json", "--deep", "--runs-root", str(tmp / "runs")]
    t0 = time.monotonic()
    cmd = Cmd(args, tmp / name)
    code = cmd.wait(120)
    took = time.monotonic() - t0
    report = json.loads(cmd.stdout)
    assert code == (0 if report["ok"] else 1), cmd.stderr
    return report["deep"], took


def named(deep: dict[str, Any], check: str) -> list[tuple[str, str | None]]:
    return [(f["level"], f["host"]) for f in deep["findings"] if f["check"] == check]


def test_a_throttled_host_is_named_alone(cluster: TestCluster, tmp_path: Path) -> None:
    with throttled(cluster, 2):
        deep, took = deep_check(cluster, tmp_path, "throttled")
    assert named(deep, "slow-link") == [("warning", "node2")]
    [slow] = [f["message"] for f in deep["findings"] if f["check"] == "slow-link"]
    assert slow.startswith("node2: ") or "against a median of" in slow
    assert deep["figures"]["headline"]["busbw"] > 0  # the all-reduce's figures, small as they are
    assert (
        deep["figures"]["hosts"]["node2"]["link_send"]
        < deep["figures"]["hosts"]["node0"]["link_send"]
    )
    print(f"throttled: {took:.1f} s; {slow}")
    assert took < 60


@pytest.mark.slow_e2e
def test_healthy_links_name_none(cluster: TestCluster, tmp_path: Path) -> None:
    deep, took = deep_check(cluster, tmp_path, "healthy")
    assert deep["ok"] and named(deep, "slow-link") == [("ok", None)]
    assert [f["level"] for f in deep["findings"] if f["check"] == "fabric-allreduce"] == ["ok"]
    hosts = deep["figures"]["hosts"]
    assert sorted(hosts) == ["node0", "node1", "node2", "node3"]
    assert all(h["link_send"] and h["link_receive"] for h in hosts.values())
    print(f"healthy: {took:.1f} s; headline {deep['figures']['headline']}")
    assert took < 60


def test_ctrl_c_leaves_nothing_of_the_test(cluster: TestCluster, tmp_path: Path) -> None:
    inv = cluster.write_inventory(tmp_path / "inv.yaml", JOB, hosts=HOSTS[:2])
    args = ["check", "-i", str(inv), "--deep", "--runs-root", str(tmp_path / "runs")]
    cmd = Cmd(args, tmp_path / "deep")
    wait_for(lambda: "deep check: 2 hosts" in cmd.stderr, 60, "the fabric test to start")
    cmd.proc.send_signal(signal.SIGINT)
    assert cmd.wait(60) == 130, cmd.stderr
    [run] = (tmp_path / "runs").iterdir()  # the deep check is a run of its own, kept
    assert run.name.endswith("-deep")
    assert_nothing_left(cluster, run.name)
