"""GPU leases, the long stories (-m slow_e2e, scripts/slow_e2e.sh): paths the default run takes
too (test_leases_e2e.py), told at length.

Four launches at once, two per user, each needing every GPU of two hosts, all with --wait: all
succeed, one after another, never two on one GPU (each rank notes its interval and its
CUDA_VISIBLE_DEVICES). A host cut off while a launch waits for it in the queue: the launch is
refused naming the host, and once the host is back nothing of it is held or queued anywhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import combinations
from pathlib import Path
from typing import Any

import nvidia_smi
import pytest
from e2etools import Cli, Cmd, cut_off, wait_for
from testhosts import COLLEAGUE, TestCluster

from ddptui.remote.exits import EXIT_REFUSED

pytestmark = [pytest.mark.e2e, pytest.mark.slow_e2e]

JOB = "tests/support/leasejob.py"


@pytest.fixture(scope="module")
def gpu_hosts(cluster: TestCluster) -> Iterator[TestCluster]:
    cluster.add_colleague()
    for i in (0, 1):
        cluster.put_tool(i, "nvidia-smi", nvidia_smi.stand_in(nvidia_smi.H200))
    try:
        yield cluster
    finally:
        for i in (0, 1):
            cluster.remove_tool(i, "nvidia-smi")


def job(out: Path, go: str, **more: Any) -> dict[str, Any]:
    return {"script": JOB, "args": [str(out), go], "nproc_per_node": "auto",
            "master_port": "auto", **more}  # fmt: skip


def test_four_launches_of_two_users_at_once_run_one_after_another(
    gpu_hosts: TestCluster, tmp_path: Path
) -> None:
    cluster = gpu_hosts
    out = cluster.shared_dir(tmp_path.name)
    (out / "now").touch()
    mine = cluster.write_inventory(tmp_path / "mine.yaml", job(out, "now"), hosts=[0, 1])
    theirs = cluster.write_inventory(
        tmp_path / "theirs.yaml", job(out, "now"), hosts=[0, 1], **cluster.colleague_defaults()
    )
    launches = [Cli(inv, tmp_path / f"run{i}", flags=["--wait"])
                for i, inv in enumerate([mine, theirs, mine, theirs])]  # fmt: skip
    for cli in launches:
        assert cli.wait(600) == 0, cli.stderr
    assert sum("waiting for GPUs" in cli.stderr for cli in launches) >= 3  # all but the first
    notes = [json.loads(p.read_text()) for p in out.glob("*.json")]
    assert len(notes) == 8 and {n["cvd"] for n in notes} == {"0"}
    assert {n["user"] for n in notes} == {"root", COLLEAGUE}
    for host in ("node0", "node1"):
        runs = [n for n in notes if n["host"] == host]
        for a, b in combinations(runs, 2):  # never two runs on one GPU at once
            assert a["end"] <= b["start"] or b["end"] <= a["start"], (a, b)


def test_a_host_cut_off_while_a_launch_waits_for_it_leaves_nothing_held(
    gpu_hosts: TestCluster, tmp_path: Path
) -> None:
    cluster = gpu_hosts
    out = cluster.shared_dir(tmp_path.name)
    short = {"link_timeout": 10}
    holder = cluster.write_inventory(tmp_path / "one.yaml", job(out, "never", **short), hosts=[1])
    both = cluster.write_inventory(
        tmp_path / "both.yaml", job(out, "now", **short), hosts=[0, 1],
        **cluster.colleague_defaults(),
    )  # fmt: skip
    held = Cli(holder, tmp_path / "held")
    held.wait_ranks(1)
    waiting = Cli(both, tmp_path / "waiting", flags=["--wait"])
    wait_for(lambda: "waiting for GPUs" in waiting.stderr, 120, "it to queue")
    with cut_off(cluster, 1):
        assert waiting.wait(120) == EXIT_REFUSED, waiting.stderr
        assert "node1: not heard from for" in waiting.stderr
        assert held.wait(120) != 0  # its launcher lost node1: the run is over
    wait_for(lambda: _free(both, tmp_path), 120, "every GPU free and nobody queued")


def _free(inv: Path, tmp_path: Path) -> bool:
    """Every GPU of the inventory free, and nobody queued (`who --json`)."""
    who = Cmd(["who", "-i", str(inv), "--json"], tmp_path / "who-free")
    if who.wait(120) != 0:
        return False
    found = json.loads(who.stdout)
    states = [g["state"] for h in found["hosts"] for g in h["gpus"] or ()]
    return states == ["free", "free"] and not found["queue"]
