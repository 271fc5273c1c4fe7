"""Logging in to hundreds of hosts: a bounded number of logins in flight, and a dropped or
refused login tried again after a jittered pause before its host is called unreachable.

sshd's default `MaxStartups 10:30:100` drops a connection at random (30 %, rising to 100 % at
100) once 10 are unauthenticated at once: the client sees "Connection reset by peer" before the
banner. That is load, not an answer, so it is tried again (up to DROPPED_TRIES); so is a refusal
(sshd restarting), but only briefly (REFUSED_TRIES), so a host with no sshd is named at once.
Timeouts, refused keys, unknown host keys and unknown names are answers: never tried again.

At most FANOUT logins are in flight in all (pdsh's default fan-out is 32; each handshake costs
this process CPU), and at most PER_SSHD to one address and port (several nodes on one machine,
or one sshd in front of many), under sshd's 10. A pause frees its slot for others.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import weakref
from collections.abc import AsyncIterator

from ddptui.remote.agents.transport import HostError, Transport

FANOUT = 64
PER_SSHD = 8
DROPPED_TRIES = 8
REFUSED_TRIES = 3
PAUSE_S = 0.1  # the first pause's ceiling; each next one doubles it, up to MAX_PAUSE_S
MAX_PAUSE_S = 2.0

DROPPED = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)


class _Gates:
    """The loop's semaphores: all logins, and those to each sshd."""

    def __init__(self) -> None:
        self.all = asyncio.Semaphore(FANOUT)
        self.per_sshd: dict[tuple[str, int | None], asyncio.Semaphore] = {}

    @contextlib.asynccontextmanager
    async def slot(self, t: Transport) -> AsyncIterator[None]:
        key = (t.host.host, t.host.port)
        one = self.per_sshd.setdefault(key, asyncio.Semaphore(PER_SSHD))
        async with one, self.all:
            yield


_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Gates] = weakref.WeakKeyDictionary()


def _gates_here() -> _Gates:
    loop = asyncio.get_running_loop()
    gates = _gates.get(loop)
    if gates is None:
        gates = _gates[loop] = _Gates()
    return gates


def tries_for(exc: HostError) -> int:
    """How many logins a failure like this one deserves in all (1: it is an answer)."""
    cause = exc.__context__  # transport.py raises HostError from inside its except block
    if isinstance(cause, ConnectionRefusedError):
        return REFUSED_TRIES
    if isinstance(cause, (*DROPPED, _connection_lost())):
        return DROPPED_TRIES
    return 1


def _connection_lost() -> type[BaseException] | tuple[()]:
    """asyncssh's ConnectionLost, where asyncssh is loaded: only its logins raise it (a login
    through OpenSSH's client never loads it, remote/agents/sshclient.py)."""
    return getattr(sys.modules.get("asyncssh"), "ConnectionLost", ())


def pause(attempt: int) -> float:
    """Full jitter (a random pause up to a doubling ceiling): retries spread out instead of
    coming back together into the same sshd's MaxStartups."""
    return random.uniform(0, min(MAX_PAUSE_S, PAUSE_S * 2**attempt))


async def connect(t: Transport) -> float:
    """`t.connect()` within the fan-out's bounds, tried again while it is dropped or refused;
    returns the seconds the successful login took. Raises the last HostError."""
    gates = _gates_here()
    attempt = 0
    while True:
        attempt += 1
        try:
            async with gates.slot(t):
                return await t.connect()
        except HostError as exc:
            if attempt >= tries_for(exc):
                raise
        await asyncio.sleep(pause(attempt))


async def reconnect(t: Transport) -> float:
    """A fresh connection within the same bounds: after a blip, every host reconnects at once."""
    t.drop()
    return await connect(t)
