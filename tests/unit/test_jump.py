"""remote/agents/jump.py and the address logic of remote/agents/transport.py, with stand-ins for
asyncssh (the real thing, a bastion and a private network: tests/e2e/test_bastion_e2e.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from ddptui.remote import inventory
from ddptui.remote.agents import jump
from ddptui.remote.agents.fleet import own_address
from ddptui.remote.agents.sshtransport import SSHTransport
from ddptui.remote.agents.transport import routable


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

    async def connect(spec: str, notices: list[str], timeouts: Any, *_: Any) -> FakeConn:
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
    async def refused(spec: str, notices: list[str], timeouts: Any, *_: Any) -> None:
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


class Config:
    """What read_config gives for a host: its ~/.ssh/config's ProxyJump and known_hosts."""

    def __init__(self, tunnel: str | None = None, known_hosts: object = ()) -> None:
        self.tunnel, self.known_hosts = tunnel, known_hosts


class ChainConn(FakeConn):
    def __init__(self, host: str, via: ChainConn | None) -> None:
        super().__init__()
        self.host, self.via = host, via

    def set_tunnel(self, via: ChainConn | None) -> None:
        self.owns = via

    def close(self) -> None:
        self.closed = True
        if self.owns is not None:
            self.owns.close()


@pytest.fixture
def chain(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """~/.ssh/config: `a` with `UserKnownHostsFile none` behind a ProxyJump `inner` of its own;
    each connection records how it was made (asyncssh.connect stood in for)."""
    configs = {
        "a": Config(tunnel="inner", known_hosts=None),
        "b": Config(tunnel="ignored"),  # as OpenSSH: in a chain, the chain says b's way in
        "loop": Config("loop"),
    }
    made: list[tuple[str, dict[str, Any]]] = []

    async def read_config(host: str, options: dict[str, Any]) -> Config:
        return configs.get(host, Config())

    async def connect(host: str, **options: Any) -> ChainConn:
        made.append((host, options))
        if host == "down":
            raise ConnectionRefusedError(111, "Connection refused")
        return ChainConn(host, options["tunnel"])

    monkeypatch.setattr(jump, "read_config", read_config)
    monkeypatch.setattr(jump.asyncssh, "connect", connect)
    return made


@pytest.mark.security
async def test_every_hop_of_a_chain_is_connected_here_and_verified(
    chain: list[tuple[str, dict[str, Any]]],
) -> None:
    """`ProxyJump a,b` with `UserKnownHostsFile none` for a: asyncssh, handed "a" as b's tunnel,
    connected a itself and trusted any host key there (issue 19, item 7)."""
    notices: list[str] = []
    held = await jump.lease("a,me@b:2222", notices, {"connect_timeout": 5})
    assert [host for host, _ in chain] == ["inner", "a", "b"]
    inner, a, b = (options for _, options in chain)
    assert inner["tunnel"] is None and "known_hosts" not in inner  # its config's, as is
    assert a["tunnel"].host == "inner" and a["known_hosts"] == []  # verified: the default file
    assert b["tunnel"].host == "a" and (b["username"], b["port"]) == ("me", 2222)
    assert all(o["connect_timeout"] == 5 for _, o in chain)
    assert notices == [
        "~/.ssh/config sets `UserKnownHostsFile none` for a: ddptui still verifies its host key, "
        "against ~/.ssh/known_hosts (known_hosts: in the inventory names another file)"
    ]
    assert held.conn is not None
    held.release()  # the last hop closes the ones it went through
    first = held.conn.via.via  # type: ignore[attr-defined]
    assert held.conn.closed and first.host == "inner" and first.closed


async def test_a_hop_that_fails_is_named_and_the_hops_before_it_closed(
    chain: list[tuple[str, dict[str, Any]]],
) -> None:
    with pytest.raises(jump.JumpError) as err:
        await jump.lease("a,down,b", [], {})
    assert err.value.spec == "down" and isinstance(err.value.cause, ConnectionRefusedError)
    assert [host for host, _ in chain] == ["inner", "a", "down"]
    assert chain[1][1]["tunnel"].closed and not jump._jumps
    with pytest.raises(jump.JumpError, match="loop: ProxyJump nested too deep"):
        await jump.lease("loop", [], {})


async def test_without_openssh_asyncssh_reads_the_config_and_a_launch_says_so_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ddptui.remote.agents import openssh, sshtransport

    async def connect(host: str, **options: Any) -> FakeConn:
        assert "config" not in options  # asyncssh's own reading of ~/.ssh/config
        return FakeConn(("10.0.0.5", 22))

    monkeypatch.setattr(openssh, "client", lambda: None)
    monkeypatch.setattr(jump, "read_config", lambda host, options: _config())
    monkeypatch.setattr(jump.asyncssh, "connect", connect)
    first, second = SSHTransport(HOST), SSHTransport(HOST)
    await first.connect()
    await second.connect()
    assert first.notices == [sshtransport.NO_OPENSSH] and second.notices == []


async def _config() -> Any:
    class Config:
        host, tunnel, known_hosts = "node0", None, ()

    return Config()
