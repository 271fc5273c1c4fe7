"""The deep check's worker on real hosts, started by hand with torchrun (gloo over eth0): one
host's link throttled with tc is named alone; healthy links name none; 4 hosts well under a
minute. ddptui's launcher does not start it yet (issue 17): this is the worker and its judging."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fabrictools import WORKER, torchrun
from testhosts import TestCluster, throttled

from remote import fabric
from remote.host.fabric import MARK

pytestmark = pytest.mark.e2e

HOSTS = (0, 1, 2, 3)
BUDGET_S = 40


def deep_check(cluster: TestCluster, out: Path, port: int) -> tuple[fabric.Report, float]:
    t0 = time.monotonic()
    runs = torchrun(cluster, HOSTS, [str(WORKER), "--seconds", str(BUDGET_S)], out, port=port)
    took = time.monotonic() - t0
    assert [r.code for r in runs] == [0] * len(HOSTS), "\n".join(r.err()[-2000:] for r in runs)
    [line] = [ln for ln in runs[0].out().splitlines() if ln.startswith(MARK)]
    return fabric.parse(line), took


def judged(cluster: TestCluster, report: fabric.Report) -> list[tuple[str, str, str | None]]:
    names = [cluster.hosts[i].name for i in HOSTS]
    return [(f.level, f.check, f.host) for f in fabric.findings(report, names)]


def test_a_throttled_host_is_named_alone(cluster: TestCluster, tmp_path: Path) -> None:
    with throttled(cluster, 2):
        report, took = deep_check(cluster, tmp_path, port=29761)
    found = judged(cluster, report)
    assert [f for f in found if f[0] != "ok"] == [("warning", "slow-link", "node2")], found
    assert report.headline is not None and report.world == len(HOSTS)
    assert took < BUDGET_S


def test_healthy_links_name_none(cluster: TestCluster, tmp_path: Path) -> None:
    report, took = deep_check(cluster, tmp_path, port=29762)
    found = judged(cluster, report)
    assert [f for f in found if f[0] != "ok"] == [], found
    assert ("ok", "fabric-allreduce", None) in found
    every_way = {(a, b) for a in range(4) for b in range(4) if a != b}
    assert {(ln.src, ln.dst) for ln in report.links} == every_way  # 4 hosts: 3 rounds, all
    assert took < BUDGET_S
