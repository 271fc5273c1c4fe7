"""A login through OpenSSH's own client (remote/agents/sshclient.py, a Slurm login node's) against
real sshds: one login carries the agent, and each way a login fails is named as asyncssh's are:
an unknown host key, a refused key, a host that refuses; a dropped login is tried again."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest
from e2etools import dropped_once
from testhosts import TestCluster

from ddptui.remote import inventory
from ddptui.remote.agents import ops
from ddptui.remote.agents.fleet import Fleet
from ddptui.remote.agents.sshclient import ClientTransport
from ddptui.remote.agents.transport import HostError

pytestmark = pytest.mark.e2e
HOST = 3  # restarted with another MaxStartups, and back to the cluster's own afterwards
JOB = {"script": "t.py"}


def login_host(c: TestCluster, tmp_path: Path, **defaults: object) -> inventory.Host:
    path = c.write_inventory(tmp_path / "inv.yaml", JOB, hosts=[HOST], **defaults)
    return inventory.load(path).hosts[0]


async def agent_status(host: inventory.Host) -> dict[str, object]:
    """The host's agent through ssh's client, asked one thing, then closed."""
    fleet = Fleet([host], prefork=False, transports=[ClientTransport(host)])
    try:
        return await ops.status(await fleet.agent(0, lambda event: None), [])
    finally:
        await fleet.close()


def accepted(c: TestCluster) -> int:
    return c.hosts[HOST].log_file.read_text(errors="replace").count("Accepted publickey")


def test_one_login_carries_the_agent(cluster: TestCluster, tmp_path: Path) -> None:
    before = accepted(cluster)
    assert asyncio.run(agent_status(login_host(cluster, tmp_path))) == {}
    assert accepted(cluster) - before == 1


def test_an_unknown_host_key_is_named(cluster: TestCluster, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    host = login_host(cluster, tmp_path, known_hosts=str(empty))
    with pytest.raises(HostError, match=f"host key not verified for root@.*check {empty}"):
        asyncio.run(agent_status(host))


def test_a_refused_key_is_named(cluster: TestCluster, tmp_path: Path) -> None:
    key = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    host = login_host(cluster, tmp_path, identity_file=str(key))
    with pytest.raises(HostError, match=f"authentication refused for root@.*tried {key}"):
        asyncio.run(agent_status(host))


def test_a_host_that_refuses_is_named(cluster: TestCluster, tmp_path: Path) -> None:
    cluster.stop_sshd(HOST)
    try:
        with pytest.raises(HostError, match="connection refused by root@"):
            asyncio.run(agent_status(login_host(cluster, tmp_path)))
    finally:
        cluster.start_sshd(HOST)


def test_a_dropped_login_is_tried_again_until_it_gets_in(
    cluster: TestCluster, tmp_path: Path
) -> None:
    """MaxStartups 1:100:2: while another client's connection sits unauthenticated, every
    new one is dropped ("kex_exchange_identification: Connection closed by remote host");
    once it goes, the login that was being dropped gets in."""
    cluster.restart_sshd(HOST, max_startups="1:100:2")
    try:
        host = login_host(cluster, tmp_path)
        assert asyncio.run(dropped_once(cluster, HOST, agent_status(host))) == {}
    finally:
        cluster.restart_sshd(HOST)


def test_a_command_runs_to_its_end(cluster: TestCluster, tmp_path: Path) -> None:
    t = ClientTransport(login_host(cluster, tmp_path))
    done = asyncio.run(t.run(["sh", "-c", "cat; echo said >&2; exit 3"], input=b"in\n"))
    assert (done.code, done.stdout, done.stderr) == (3, b"in\n", b"said")
