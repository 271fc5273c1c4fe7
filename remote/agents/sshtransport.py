"""A host over SSH through asyncssh: one connection per host, to the host `ssh HOST` reaches.

Errors come out as HostError in words a person acts on (ssh_reason).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shlex
import socket
import time
import weakref
from pathlib import Path
from typing import Any

from ddptui.remote.agents import jump, openssh, transport
from ddptui.remote.agents.sshlib import asyncssh
from ddptui.remote.agents.transport import (
    HostError,
    Process,
    Result,
    StderrTail,
    Transport,
    routable,
)
from ddptui.remote.inventory import Host


class _SSHProcess:
    def __init__(self, proc: asyncssh.SSHClientProcess[bytes]) -> None:
        self.proc = proc
        self._err = StderrTail(proc.stderr)

    async def readline(self) -> bytes:
        try:
            return await self.proc.stdout.readline()
        except (asyncssh.Error, OSError):
            return b""  # the connection is gone: same as EOF for the caller

    async def read(self, n: int) -> bytes:
        try:
            return await self.proc.stdout.read(n)
        except (asyncssh.Error, OSError):
            return b""  # the connection is gone: same as EOF for the caller

    def write(self, data: bytes) -> None:
        with contextlib.suppress(asyncssh.Error, OSError, BrokenPipeError):
            self.proc.stdin.write(data)

    async def drain(self) -> None:
        with contextlib.suppress(asyncssh.Error, OSError, BrokenPipeError):
            await self.proc.stdin.drain()

    def close_stdin(self) -> None:
        with contextlib.suppress(asyncssh.Error, OSError, BrokenPipeError):
            self.proc.stdin.write_eof()

    async def wait(self) -> int | None:
        with contextlib.suppress(asyncssh.Error, OSError):
            await self.proc.wait()
        await self._err.task
        return self.proc.exit_status

    def stderr_tail(self) -> str:
        return self._err.text()

    def kill(self) -> None:
        self.proc.close()


class SSHTransport(Transport):
    """One asyncssh connection per host, to the host `ssh HOST` reaches: OpenSSH resolves it
    (`ssh -G`, remote/agents/openssh.py) and asyncssh is handed every value; ssh-agent and
    known_hosts honoured, host keys always verified.

    A host behind a ProxyJump is reached through one connection to the jump host, shared by
    every host behind it (remote/agents/jump.py): a bastion's MaxStartups drops a login per host.
    """

    conn: asyncssh.SSHClientConnection | None = None
    _jump: jump.Lease | None = None
    _unverified_by: str | None = None  # the config's setting that would have turned checks off
    _resolved_as: Host | None = None  # the host as OpenSSH resolved it, for the errors' words

    async def connect(self) -> float:
        h = self.host
        t0 = time.monotonic()
        timeouts = {
            "connect_timeout": transport.CONNECT_TIMEOUT,
            "keepalive_interval": transport.KEEPALIVE,
            "keepalive_count_max": 3,
        }
        self.notices = []
        self._forget_resolution()
        try:
            find = self._resolved if openssh.client() else self._from_asyncssh_config
            hostname, options, via = await find()
            if via:
                self._jump = await jump.lease(
                    via, self.notices, timeouts, self._find_hop(), h.ssh_config
                )
                options["tunnel"] = self._jump.conn
            self.conn = await asyncssh.connect(hostname, **timeouts, **options)
        except jump.JumpError as exc:
            self._release()
            raise HostError(h.name, ssh_reason(exc.cause, h, via=exc.spec)) from None
        except Exception as exc:  # every way a login can fail, worded per kind below
            self._release()
            reason = ssh_reason(exc, self._resolved_as or h)
            if self._unverified_by and isinstance(exc, asyncssh.HostKeyNotVerifiable):
                reason += f" (`{self._unverified_by}` in ssh_config does not turn it off)"
            raise HostError(h.name, reason) from None
        self.address = self._own_address(hostname)
        return time.monotonic() - t0

    def _forget_resolution(self) -> None:
        """A reconnect says its own (a method: mypy would take them for None after it)."""
        self._resolved_as = self._unverified_by = None

    async def _resolved(self) -> tuple[str, dict[str, Any], str | None]:
        """OpenSSH's answer for this host, the inventory's keys as ssh's -l, -p, -i, -F."""
        h = self.host
        keys = (str(Path(h.identity_file).expanduser()),) if h.identity_file else ()
        known = str(Path(h.known_hosts).expanduser()) if h.known_hosts else None
        given = openssh.Given(h.user, h.port, keys, h.ssh_config, known)
        target = await openssh.resolve(h.host, given)
        self._unverified_by = target.unverified_by
        self._resolved_as = dataclasses.replace(
            h,
            host=target.host,
            user=target.user,
            port=target.port,
            known_hosts=target.known_hosts[0] if target.known_hosts else None,
        )
        hostname, options = jump.verified(target, self.notices)
        return hostname, options, target.proxy_jump

    async def _from_asyncssh_config(self) -> tuple[str, dict[str, Any], str | None]:
        """No OpenSSH client: asyncssh reads ~/.ssh/config (no /etc/ssh, Match or tokens of
        its own), as ddptui did before it asked OpenSSH; said once per launch."""
        h = self.host
        options: dict[str, Any] = {}
        if h.port:
            options["port"] = h.port
        if h.user:
            options["username"] = h.user
        if h.identity_file:
            options["client_keys"] = [str(Path(h.identity_file).expanduser())]
        if h.known_hosts:  # host keys are always checked; this only says where they are
            options["known_hosts"] = str(Path(h.known_hosts).expanduser())
        if say_once(asyncio.get_running_loop()):
            self.notices.append(NO_OPENSSH)
        config = await jump.read_config(h.host, options)
        kept = jump.keep_verifying(config, self.notices, h.host)
        self._unverified_by = "UserKnownHostsFile none" if kept else None
        return config.host, {**options, **kept}, str(config.tunnel) if config.tunnel else None

    def _find_hop(self) -> jump.FindHop:
        return jump.openssh_hop(self.host.ssh_config) if openssh.client() else jump.asyncssh_hop

    def _own_address(self, hostname: str) -> str:
        """Where the peers reach this host: the address we reached it at when that is one
        (a tunnel or a ProxyCommand has none; loopback is no good to the others), else the
        config's HostName when it is an address; else "" until its agent says what its sshd
        saw ($SSH_CONNECTION: behind a bastion, its private address; remote/agents/fleet.py)."""
        peer = self._conn().get_extra_info("peername")
        self.peer_address = str(peer[0]) if peer else ""
        for addr in (self.peer_address, hostname):
            if routable(addr):
                return str(addr)
        return ""

    def _conn(self) -> asyncssh.SSHClientConnection:
        if self.conn is None:
            raise HostError(self.host.name, "not connected")
        return self.conn

    async def start(self, argv: list[str]) -> Process:
        try:
            proc = await self._conn().create_process(shlex.join(argv), encoding=None)
        except (asyncssh.Error, OSError) as exc:
            raise HostError(self.host.name, f"cannot start a session: {exc}") from None
        return _SSHProcess(proc)

    async def run(self, argv: list[str], input: bytes = b"", timeout: float = 30) -> Result:
        try:
            res = await self._conn().run(
                shlex.join(argv), input=input, encoding=None, timeout=timeout, check=False
            )
        except asyncssh.TimeoutError:
            raise HostError(self.host.name, f"{argv[0]} did not answer in {timeout:g} s") from None
        except (asyncssh.Error, OSError) as exc:
            raise HostError(self.host.name, f"command failed: {exc}") from None
        out, err = res.stdout or b"", res.stderr or b""
        assert isinstance(out, bytes) and isinstance(err, bytes)  # encoding=None
        return Result(res.exit_status, out, err)

    def drop(self) -> None:
        if self.conn is not None:
            self.conn.abort()
            self.conn = None
        self._release()

    async def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            with contextlib.suppress(Exception):
                await self.conn.wait_closed()
        self._release()

    def _release(self) -> None:
        if self._jump is not None:
            self._jump.release()
            self._jump = None


NO_OPENSSH = (
    "no OpenSSH client (ssh) here: ssh_config is read by asyncssh, ~/.ssh/config alone "
    "(no /etc/ssh/ssh_config, and some rules read otherwise than by ssh)"
)
_said: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def say_once(loop: asyncio.AbstractEventLoop) -> bool:
    """True the first time a launch (its event loop) asks."""
    if loop in _said:
        return False
    _said.add(loop)
    return True


def ssh_reason(exc: BaseException, host: Host, via: str | None = None) -> str:
    """Why a login failed, in words a person acts on; via: the jump host that failed."""
    target = f"{host.user + '@' if host.user else ''}{host.host}:{host.port or 22}"
    if via is not None:
        return f"jump host {via} (ProxyJump): {ssh_reason(exc, jump.as_host(via, host))}"
    if isinstance(exc, openssh.OpenSSHError):
        return f"ssh_config, as `ssh -G` reads it: {exc}"
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        where = host.known_hosts or "~/.ssh/known_hosts"
        return (
            f"host key not verified for {target} ({exc.reason}); "
            f"check {where} (ssh-keyscan, or ssh once by hand)"
        )
    if isinstance(exc, asyncssh.PermissionDenied):
        key = host.identity_file or "ssh-agent / default keys"
        return f"authentication refused for {target} (tried {key})"
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return f"timed out connecting to {target} after {transport.CONNECT_TIMEOUT:g} s"
    if isinstance(exc, ConnectionRefusedError):
        return f"connection refused by {target} (is sshd running on that port?)"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve host name {host.host!r}"
    if isinstance(exc, asyncssh.KeyImportError | FileNotFoundError | PermissionError):
        return f"cannot read SSH key or config: {exc}"
    if isinstance(exc, OSError):
        return f"cannot connect to {target}: {exc.strerror or exc}"
    if isinstance(exc, asyncssh.Error):
        return f"SSH error from {target}: {exc.reason}"
    return f"cannot connect to {target}: {exc}"
