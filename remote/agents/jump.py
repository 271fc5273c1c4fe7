"""Hosts behind a bastion (ProxyJump in ssh_config): one connection to it carries them all.

asyncssh, left to itself, opens a new connection to the jump host for every host behind it; a
bastion's sshd drops unauthenticated connections beyond `MaxStartups` (10 by default), so a
cluster of 32 loses a third of its logins. Here the jump host is connected to once per event
loop and handed to every host's connection as its `tunnel`; the last host to let go closes it.
A chain (`ProxyJump a,b`, or a hop with a ProxyJump of its own) is connected hop by hop here,
each through the last: asyncssh, left a chain, connects the earlier hops itself with their
~/.ssh/config as is, so a hop under `UserKnownHostsFile none` was trusted unverified. Every
hop is resolved like any host (`ssh -G`, remote/agents/openssh.py; asyncssh's reading of
~/.ssh/config where there is no OpenSSH client) and its host key checked like any host's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from ddptui.remote.agents import openssh
from ddptui.remote.agents.sshlib import asyncssh
from ddptui.remote.inventory import Host

# One hop, found: (the host to connect to, asyncssh's options for it, its own ProxyJump).
Hop = tuple[str, dict[str, Any], str | None]
# How a hop `user@host:port` is found; notices collects what a person should hear.
FindHop = Callable[[str | None, str, int | None, list[str]], Awaitable[Hop]]


class JumpError(Exception):
    """The jump host `spec` could not be reached or logged into; `cause` says how."""

    def __init__(self, spec: str, cause: BaseException) -> None:
        self.spec, self.cause = spec, cause
        super().__init__(f"{spec}: {cause}")


async def read_config(host: str, options: dict[str, Any]) -> asyncssh.SSHClientConnectionOptions:
    """The options asyncssh would use for host, ~/.ssh/config applied (read in a thread: it
    reads files)."""
    loop = asyncio.get_running_loop()
    # config=(): ~/.ssh/config, as asyncssh.connect reads it (the class alone reads none);
    # client_keys=None: no key files read for this look at the config
    options = {**options, "client_keys": None}
    make = partial(asyncssh.SSHClientConnectionOptions, host=host, config=(), **options)
    return await loop.run_in_executor(None, make)


def keep_verifying(
    config: asyncssh.SSHClientConnectionOptions, notices: list[str], host: str
) -> dict[str, Any]:
    """`UserKnownHostsFile none` makes asyncssh trust any host key, where OpenSSH would still
    refuse an unknown one: keep checking against the default known_hosts, and say so."""
    if config.known_hosts is not None:
        return {}
    notices.append(
        f"~/.ssh/config sets `UserKnownHostsFile none` for {host}: ddptui still verifies its "
        "host key, against ~/.ssh/known_hosts (known_hosts: in the inventory names another file)"
    )
    return {"known_hosts": []}  # [] is asyncssh's "the default file"


async def asyncssh_hop(user: str | None, host: str, port: int | None, notices: list[str]) -> Hop:
    """A hop as asyncssh reads ~/.ssh/config (no OpenSSH client here)."""
    options: dict[str, Any] = {}
    if user:
        options["username"] = user
    if port:
        options["port"] = port
    config = await read_config(host, options)
    options.update(keep_verifying(config, notices, host))
    return host, options, str(config.tunnel) if config.tunnel else None


def openssh_hop(config_file: str | None) -> FindHop:
    """Hops as `ssh -G` resolves them (with the host's `-F`, as ssh passes it on)."""

    async def find(user: str | None, host: str, port: int | None, notices: list[str]) -> Hop:
        given = openssh.Given(user, port, config_file=config_file)
        target = await openssh.resolve(host, given)
        to, options = verified(target, notices)
        return to, options, target.proxy_jump

    return find


def verified(target: openssh.Target, notices: list[str]) -> tuple[str, dict[str, Any]]:
    """asyncssh.connect's host and options for an OpenSSH target, its host key checked
    against its known_hosts files whatever the config said (a notice where it said off)."""
    options = target.client_options()
    host = options.pop("host")
    options["known_hosts"] = known_hosts(target.known_hosts)
    if target.unverified_by:
        notices.append(
            f"ssh_config sets `{target.unverified_by}` for {target.alias}: ddptui still "
            f"verifies its host key, against {' '.join(target.known_hosts)}"
        )
    return host, options


_known: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[str, ...], asyncssh.SSHKnownHosts]
] = weakref.WeakKeyDictionary()


def known_hosts(files: tuple[str, ...]) -> asyncssh.SSHKnownHosts:
    """The keys of those files that exist (none: every key is refused), read once per
    launch rather than once per host."""
    per_loop = _known.setdefault(asyncio.get_running_loop(), {})
    if files not in per_loop:
        per_loop[files] = asyncssh.read_known_hosts([f for f in files if os.path.isfile(f)])
    return per_loop[files]


@dataclass
class _Jump:
    conn: asyncio.Future[asyncssh.SSHClientConnection]
    users: int = 0

    def dead(self) -> bool:
        if not self.conn.done():
            return False
        if self.conn.cancelled() or self.conn.exception() is not None:
            return True
        return self.conn.result().is_closed()


_jumps: dict[tuple[int, str], _Jump] = {}


@dataclass
class Lease:
    """One host's hold on a shared jump connection; release() once its own connection ends."""

    key: tuple[int, str]
    jump: _Jump
    conn: asyncssh.SSHClientConnection | None = None
    released: bool = False

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        self.jump.users -= 1
        if self.jump.users > 0:
            return
        if _jumps.get(self.key) is self.jump:
            del _jumps[self.key]
        fut = self.jump.conn
        if not fut.done():
            fut.cancel()
        elif not fut.cancelled() and fut.exception() is None:
            fut.result().close()


async def lease(
    spec: str,
    notices: list[str],
    timeouts: dict[str, Any],
    find: FindHop = asyncssh_hop,
    config_file: str | None = None,
) -> Lease:
    """The connection to the jump host `spec` ([user@]host[:port], a chain a,b allowed), made
    by the first host to ask and shared with the rest; raises JumpError. timeouts: asyncssh's
    connect_timeout and keepalive options, as for the hosts; find: how a hop is resolved
    (config_file: the `-F` it resolves under, part of what makes two jumps the same)."""
    key = (id(asyncio.get_running_loop()), f"{spec} {config_file or ''}")
    jump = _jumps.get(key)
    if jump is None or jump.dead():  # a jump host whose link died is connected to afresh
        connecting = _connect(spec, notices, timeouts, find)
        jump = _jumps[key] = _Jump(asyncio.ensure_future(connecting))
    jump.users += 1
    held = Lease(key, jump)
    try:
        held.conn = await asyncio.shield(jump.conn)  # a host cancelled leaves the rest waiting
    except asyncio.CancelledError:
        held.release()
        raise
    except JumpError:
        held.release()
        raise
    except Exception as exc:
        held.release()
        raise JumpError(spec, exc) from None
    return held


MAX_NESTING = 8  # hops with ProxyJumps of their own, deeper than this: a loop in ~/.ssh/config


async def _connect(
    spec: str, notices: list[str], timeouts: dict[str, Any], find: FindHop = asyncssh_hop
) -> asyncssh.SSHClientConnection:
    """The chain `spec` (a,b,...), each hop through the one before it, each hop's host key
    verified; raises JumpError naming the hop that failed."""
    conn: asyncssh.SSHClientConnection | None = None
    try:
        for hop, host, options in await _chain(spec, notices, find):
            try:
                nxt = await asyncssh.connect(host, **timeouts, **options, tunnel=conn)
            except Exception as exc:
                raise JumpError(hop, exc) from None
            nxt.set_tunnel(conn)  # closing a hop closes those it went through, as asyncssh does
            conn = nxt
    except BaseException:
        if conn is not None:
            conn.close()
        raise
    assert conn is not None
    return conn


async def _chain(
    spec: str, notices: list[str], find: FindHop, nesting: int = 0
) -> list[tuple[str, str, dict[str, Any]]]:
    """Every hop of `spec` in order, (hop, host, asyncssh options); the first hop's own
    ProxyJump goes before it, as OpenSSH does (the others' own are the chain's to say)."""
    chain = []
    for k, hop in enumerate(spec.split(",")):
        user, host, port = split(hop)
        try:
            to, options, own = await find(user, host, port, notices)
        except openssh.OpenSSHError as exc:
            raise JumpError(hop, exc) from None
        if k == 0 and own:
            if nesting >= MAX_NESTING:
                raise JumpError(hop, ValueError("ProxyJump nested too deep (a loop?)"))
            chain += await _chain(own, notices, find, nesting + 1)
        chain.append((hop, to, options))
    return chain


def split(spec: str) -> tuple[str | None, str, int | None]:
    """`user@host:port` or `ssh://user@host:port` → (user, host, port), as OpenSSH's
    ProxyJump writes one hop."""
    spec = spec.removeprefix("ssh://").removesuffix("/")
    user, _, rest = spec.rpartition("@")
    host, port = rest, ""
    if rest.startswith("["):  # [v6] or [v6]:port
        host, _, tail = rest[1:].partition("]")
        port = tail[1:]
    elif rest.count(":") == 1:  # a bare IPv6 address has more
        host, _, port = rest.partition(":")
    return user or None, host, int(port) if port.isdigit() else None


def as_host(spec: str, behind: Host) -> Host:
    """The jump host as a Host, only to word its errors like any host's (ssh_reason): its
    connection is made by _connect, host keys verified (known_hosts=None names the default)."""
    user, host, port = split(spec.split(",")[-1])
    return dataclasses.replace(
        behind, host=host, name=host, user=user, port=port, identity_file=None, known_hosts=None
    )
