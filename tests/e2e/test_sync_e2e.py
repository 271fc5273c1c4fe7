"""Code drift on real sshd test hosts: the same script path holding different code on two hosts
is warned about, naming them; `job.sync` pushes the local code, and then every host shows the
same fingerprint and the run succeeds (real torchrun, gloo).

The test hosts share one filesystem, but each has its own HOME: `workdir: ~/proj` is a
directory of each host's own, as on machines without a shared filesystem.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from e2etools import Cli, Cmd
from testhosts import REPO, TestCluster

pytestmark = pytest.mark.e2e

JOB: dict[str, Any] = {"script": "train.py", "args": ["--epochs", "1"], "master_port": 29641}


def homes(cluster: TestCluster, *nodes: int) -> list[Path]:
    return [cluster.hosts[i].home / "proj" for i in nodes]


def fresh(dirs: list[Path]) -> None:
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "data").mkdir(parents=True)
    shutil.copy(REPO / "examples" / "train.py", src / "train.py")
    (src / "data" / "shard-0.bin").write_bytes(b"\0" * 1000)  # excluded below
    return src


def check_json(inv: Path, base: Path) -> dict[str, Any]:
    cmd = Cmd(["check", "-i", str(inv), "--json"], base)
    assert cmd.wait() == 0, cmd.stderr
    return dict(json.loads(cmd.stdout))


def test_drift_is_named_then_sync_makes_every_host_the_same(
    cluster: TestCluster, tmp_path: Path
) -> None:
    dirs = homes(cluster, 0, 1, 2)
    fresh(dirs)
    for d, version in zip(dirs, ("v1", "v2", "v1"), strict=True):
        d.mkdir()
        (d / "train.py").write_text(f"print('{version}')\n")
    src = source(tmp_path)
    inv = cluster.write_inventory(src / "inv.yaml", JOB, hosts=(0, 1, 2), workdir="~/proj")
    cmd = Cmd(["check", "-i", str(inv)], tmp_path / "check")
    assert cmd.wait() == 0, cmd.stderr  # a warning: the launch is not refused for it
    warn = [ln for ln in cmd.stdout.splitlines() if ln.startswith("warn same-code:")]
    assert (
        len(warn) == 1
        and " on node0, node2; " in warn[0]
        and warn[0].endswith(" on node1 (job.sync pushes the local code to every host)")
    )

    synced = cluster.write_inventory(
        src / "inv.yaml", {**JOB, "sync": {"exclude": ["data/"]}}, hosts=(0, 1, 2), workdir="~/proj"
    )
    cli = Cli(synced, tmp_path / "run")
    assert cli.wait() == 0, cli.stderr
    assert "[r0 node0] done" in cli.stdout
    # train.py and inv.yaml; data/ excluded: one line for the three hosts
    assert "node[0-2]: code synced to ~/proj: 2 files (" in cli.stderr
    events = [json.loads(line) for line in cli.events()]
    pushed = {e["host"]: e["files"] for e in events if e["event"] == "CodeSynced"}
    assert pushed == {"node0": 2, "node1": 2, "node2": 2}  # each differed from the source
    codes = {e["host"]: e["facts"]["code"] for e in events if e["event"] == "HostChecked"}
    assert len(set(codes.values())) == 1 and len(codes) == 3, codes
    assert all(not (d / "data").exists() for d in dirs)
    assert (dirs[1] / "train.py").read_bytes() == (src / "train.py").read_bytes()

    report = check_json(synced, tmp_path / "after")  # a check alone moves nothing
    [same] = [f for f in report["findings"] if f["check"] == "same-code"]
    assert same["level"] == "ok" and same["message"].endswith(" on every host")

    again = Cli(synced, tmp_path / "again")  # nothing changed: nothing moves
    assert again.wait() == 0, again.stderr
    assert "node[0-2]: code synced to ~/proj: 0 files (0.0 kB) pushed, 2 unchanged" in again.stderr


def test_a_host_that_cannot_take_the_code_refuses_the_launch(
    cluster: TestCluster, tmp_path: Path
) -> None:
    ok, blocked = homes(cluster, 0, 1)
    fresh([ok, blocked])
    blocked.write_text("a file where the workdir should be")
    src = source(tmp_path)
    hosts: list[int | dict[str, object]] = [
        {"host": cluster.hosts[0].addr, "name": "node0"},
        {"host": cluster.hosts[1].addr, "name": "node1"},
    ]
    inv = cluster.write_inventory(
        src / "inv.yaml", {**JOB, "sync": True}, hosts=hosts, workdir="~/proj"
    )
    cli = Cli(inv, tmp_path / "run")
    assert cli.wait() == 1, cli.stderr
    assert "node1: code sync to ~/proj failed: sync-put: " in cli.stderr
    assert "not starting: the code could not be pushed to node1" in cli.stderr
    assert ": running" not in cli.stderr and cli.summary()["status"] == "failed"
    blocked.unlink()
