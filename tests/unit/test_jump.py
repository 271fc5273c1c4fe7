"""remote/jump.py and the address logic of remote/transport.py, with stand-ins for asyncssh
(the real thing, a bastion and a private network: tests/e2e/test_bastion_e2e.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from remote import inventory, jump
from remote.fleet import own_address
from remote.transport import SSHTransport, routable


class FakeConn:
    def __init__(self, peer: tuple[str, int] | None = ("", 0)) -> None:
        self.closed = False
        self.peer = peer

    def is_closed(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> Any:
        return self.peer if name == "peername" else None


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[FakeConn]:
    made: list[FakeConn] = []

    async def connect(spec: str, notices: list[str], timeouts: Any) -> FakeConn:
        await asyncio.sleep(0)  # the others ask while the first connects
        made.append(FakeConn())
        return made[-1]

    monkeypatch.setattr(jump, "_connect", connect)
    return made


def test_proxyjump_hops() -> None:
    assert jump.split("bastion") == (None, "bastion", None)
    assert jump.split("me@bastion:2222") == ("me", "bastion", 2222)
    assert jump.split("me@[fd00::1]:22") == ("me", "fd00::1", 22)
    assert jump.split("fd00::1") == (None, "fd00::1", None)


async def test_one_jump_connection_for_every_host(connects: list[FakeConn]) -> None:
    leases = await asyncio.gather(*(jump.lease("bastion", [], {}) for _ in range(5)))
    assert len(connects) == 1 and {id(h.conn) for h in leases} == {id(connects[0])}
    for held in leases[:-1]:
        held.release()
    assert not connects[0].closed  # one host still behind it
    leases[-1].release()
    leases[-1].release()  # twice is harmless
    assert connects[0].closed and not jump._jumps


async def test_a_dead_jump_is_replaced(connects: list[FakeConn]) -> None:
    first = await jump.lease("bastion", [], {})
    assert first.conn is not None
    first.conn.close()  # the bastion's link died: the next host connects afresh
    second = await jump.lease("bastion", [], {})
    assert len(connects) == 2 and second.conn is connects[1]
    first.release()
    assert not connects[1].closed  # the old lease leaves the new jump alone
    second.release()
    assert connects[1].closed


async def test_failure_names_the_jump_host(monkeypatch: pytest.MonkeyPatch) -> None:
    async def refused(spec: str, notices: list[str], timeouts: Any) -> None:
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(jump, "_connect", refused)
    with pytest.raises(jump.JumpError) as err:
        await jump.lease("me@bastion:2222", [], {})
    assert err.value.spec == "me@bastion:2222" and not jump._jumps


def test_routable_addresses() -> None:
    assert routable("10.1.2.3") and routable("fd00::1") and routable("fe80::1%eth0")
    for addr in ("", "127.0.0.1", "::1", "0.0.0.0", "node0", "gpu-a.internal"):
        assert not routable(addr)


HOST = inventory.parse("hosts:\n  - host: node0\njob:\n  script: t.py\n", Path("i.yaml")).hosts[0]


@pytest.mark.parametrize(
    ("peer", "hostname", "ssh_addr", "want"),
    [
        (("10.0.0.5", 22), "node0", None, "10.0.0.5"),  # a direct connection: as reached
        (("", 0), "10.1.0.7", None, "10.1.0.7"),  # tunnelled, HostName an address
        (("", 0), "node0", "10.1.0.7", "10.1.0.7"),  # what the host's sshd saw (its agent says)
        (None, "node0", "10.1.0.8", "10.1.0.8"),
        (("127.0.0.1", 22), "localhost", "172.17.0.2", "172.17.0.2"),
        (("127.0.0.1", 22), "localhost", None, "127.0.0.1"),  # nothing better is known
    ],
)
def test_own_address(
    peer: tuple[str, int] | None, hostname: str, ssh_addr: str | None, want: str
) -> None:
    t = SSHTransport(HOST)
    t.conn = FakeConn(peer)  # type: ignore[assignment]
    t.address = t._own_address(hostname)  # as connect() sets it
    assert own_address(t, ssh_addr) == want
