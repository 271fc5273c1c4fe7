"""Logins against real sshds that drop them: sshd's default `MaxStartups 10:30:100` and many
logins at once to it; a login dropped while another client's are pending; a host that refuses."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2etools import dropped_once
from probetools import preflight
from testhosts import TestCluster

from ddptui.remote import inventory
from ddptui.remote.agents import fanout
from ddptui.remote.agents.sshtransport import SSHTransport
from ddptui.remote.events import Event, HostState

pytestmark = pytest.mark.e2e
HOST = 3  # restarted with another MaxStartups, and back to the cluster's own afterwards
JOB = {"script": "t.py"}


@pytest.fixture
def strict_sshd(cluster: TestCluster) -> Iterator[TestCluster]:
    """Host 3 with sshd's default MaxStartups."""
    cluster.restart_sshd(HOST, max_startups="10:30:100")
    try:
        yield cluster
    finally:
        cluster.restart_sshd(HOST)


def same_host(c: TestCluster, tmp_path: Path, names: str) -> inventory.Inventory:
    entry = {"host": c.hosts[HOST].addr, "name": names}
    return inventory.load(c.write_inventory(tmp_path / "inv.yaml", JOB, hosts=[entry]))


async def connect_all(inv: inventory.Inventory) -> list[BaseException | float]:
    transports = [SSHTransport(h) for h in inv.hosts]
    try:
        return await asyncio.gather(
            *(fanout.connect(t) for t in transports), return_exceptions=True
        )
    finally:
        await asyncio.gather(*(t.close() for t in transports))


def test_sixty_logins_at_once_to_a_default_sshd_all_succeed(
    strict_sshd: TestCluster, tmp_path: Path
) -> None:
    inv = same_host(strict_sshd, tmp_path, "m[1-60]")
    results = asyncio.run(connect_all(inv))
    failed = [r for r in results if isinstance(r, BaseException)]
    assert not failed, failed[:3]


def test_a_dropped_login_is_tried_again_until_it_gets_in(
    cluster: TestCluster, tmp_path: Path
) -> None:
    """MaxStartups 1:100:2: while another client's connection sits unauthenticated, every
    new one is dropped; once it goes, the login that was being dropped gets in."""
    cluster.restart_sshd(HOST, max_startups="1:100:2")
    try:
        inv = same_host(cluster, tmp_path, "solo")
        took = asyncio.run(dropped_once(cluster, HOST, connect_all(inv)))
        assert isinstance(took[0], float), took
    finally:
        cluster.restart_sshd(HOST)


def test_a_host_that_refuses_is_unreachable_with_its_reason(
    cluster: TestCluster, tmp_path: Path
) -> None:
    cluster.stop_sshd(HOST)
    try:
        inv = inventory.load(cluster.write_inventory(tmp_path / "inv.yaml", JOB, hosts=[0, HOST]))
        events: list[Event] = []
        done = preflight(inv, events.append)[1]
    finally:
        cluster.start_sshd(HOST)
    assert not done.ok
    why = [e.detail for e in events if isinstance(e, HostState) and e.state == "unreachable"]
    assert len(why) == 1 and "connection refused" in why[0]
