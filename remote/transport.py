"""How the engine reaches a host: over SSH (asyncssh) or, for `transport: local`, right here.

Both give the same two things: `start` a long-lived process with pipes (the supervisor), and
`run` a short command to completion (probes). Errors come out as HostError in plain words.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import shlex
import signal
import socket
import time
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from . import jump
from .inventory import Host
from .sshlib import asyncssh

CONNECT_TIMEOUT = 10.0
KEEPALIVE = 5.0  # a silent host is declared lost after KEEPALIVE * 3 seconds
LINE_LIMIT = 1 << 24


class HostError(Exception):
    """A host could not be reached, logged into, or used; `reason` is for a person."""

    def __init__(self, host: str, reason: str) -> None:
        self.host, self.reason = host, reason
        super().__init__(f"{host}: {reason}")


@dataclass(frozen=True)
class Result:
    code: int | None
    stdout: bytes
    stderr: bytes


class Process(Protocol):
    """A running command with pipes: the supervisor's end of the conversation."""

    async def readline(self) -> bytes: ...
    async def read(self, n: int) -> bytes: ...
    def write(self, data: bytes) -> None: ...
    async def drain(self) -> None: ...
    def close_stdin(self) -> None: ...
    async def wait(self) -> int | None: ...
    def stderr_tail(self) -> str: ...
    def kill(self) -> None: ...


class Transport(ABC):
    def __init__(self, host: Host) -> None:
        self.host = host
        self.address = host.host  # as peers reach it; refined on connect
        self.peer_address = host.host  # where we reached it, whatever it is
        self.notices: list[str] = []  # for a person, once connected (run.py emits them)

    @abstractmethod
    async def connect(self) -> float:
        """Connect and log in; returns the seconds it took. Raises HostError."""

    @abstractmethod
    async def start(self, argv: list[str]) -> Process: ...

    @abstractmethod
    async def run(self, argv: list[str], input: bytes = b"", timeout: float = 30) -> Result: ...

    async def close(self) -> None:
        return None

    def drop(self) -> None:  # noqa: B027 (nothing to drop for most transports)
        """Forget the connection at once, without a goodbye (its link may be dead)."""


def for_host(host: Host) -> Transport:
    return LocalTransport(host) if host.transport == "local" else SSHTransport(host)


class _StderrTail:
    """Keeps the last lines a process wrote to stderr (a supervisor's crash explains itself)."""

    def __init__(self, reader: Any) -> None:
        self.lines: deque[str] = deque(maxlen=20)
        self.task = asyncio.ensure_future(self._read(reader))

    async def _read(self, reader: Any) -> None:
        with contextlib.suppress(Exception):
            while line := await reader.readline():
                self.lines.append(line.decode("utf-8", "replace").rstrip())

    def text(self) -> str:
        return "\n".join(self.lines)


class _LocalProcess:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        assert proc.stdin and proc.stdout
        self._stdin, self._stdout = proc.stdin, proc.stdout
        self._err = _StderrTail(proc.stderr)

    async def readline(self) -> bytes:
        return await self._stdout.readline()

    async def read(self, n: int) -> bytes:
        return await self._stdout.read(n)

    def write(self, data: bytes) -> None:
        if not self._stdin.is_closing():
            self._stdin.write(data)

    async def drain(self) -> None:
        with contextlib.suppress(ConnectionError):
            await self._stdin.drain()

    def close_stdin(self) -> None:
        if not self._stdin.is_closing():
            self._stdin.close()

    async def wait(self) -> int | None:
        code = await self.proc.wait()
        await self._err.task
        return code

    def stderr_tail(self) -> str:
        return self._err.text()

    def kill(self) -> None:
        """Its whole process group: a login wrapper's children go too (node supervisors leave
        the group at their start: they live on)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)


class LocalTransport(Transport):
    """Runs on this machine, no SSH (the bundled inventory, laptops, tests)."""

    def __init__(self, host: Host) -> None:
        super().__init__(host)
        self.address = "127.0.0.1" if host.host in ("localhost", "127.0.0.1") else host.host

    async def connect(self) -> float:
        return 0.0

    async def start(self, argv: list[str]) -> Process:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=LINE_LIMIT,
                start_new_session=True,  # a group of its own, as an ssh session's
            )
        except OSError as exc:
            raise HostError(self.host.name, f"cannot run {argv[0]}: {exc.strerror}") from None
        return _LocalProcess(proc)

    async def run(self, argv: list[str], input: bytes = b"", timeout: float = 30) -> Result:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            raise HostError(self.host.name, f"cannot run {argv[0]}: {exc.strerror}") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(input), timeout)
        except TimeoutError:
            proc.kill()
            raise HostError(self.host.name, f"{argv[0]} did not answer in {timeout:g} s") from None
        return Result(proc.returncode, out, err)


class _SSHProcess:
    def __init__(self, proc: asyncssh.SSHClientProcess[bytes]) -> None:
        self.proc = proc
        self._err = _StderrTail(proc.stderr)

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
    """One asyncssh connection per host; ~/.ssh/config, ssh-agent and known_hosts honoured.

    A host behind a ProxyJump is reached through one connection to the jump host, shared by
    every host behind it (remote/jump.py): a bastion's MaxStartups drops a login per host.
    """

    conn: asyncssh.SSHClientConnection | None = None
    _jump: jump.Lease | None = None

    async def connect(self) -> float:
        h = self.host
        t0 = time.monotonic()
        timeouts = {
            "connect_timeout": CONNECT_TIMEOUT,
            "keepalive_interval": KEEPALIVE,
            "keepalive_count_max": 3,
        }
        options: dict[str, Any] = dict(timeouts)
        if h.port:
            options["port"] = h.port
        if h.user:
            options["username"] = h.user
        if h.identity_file:
            options["client_keys"] = [str(Path(h.identity_file).expanduser())]
        if h.known_hosts:  # host keys are always checked; this only says where they are
            options["known_hosts"] = str(Path(h.known_hosts).expanduser())
        self.notices = []
        try:
            config = await jump.read_config(h.host, options)
            options.update(jump.keep_verifying(config, self.notices, h.host))
            if config.tunnel:
                self._jump = await jump.lease(str(config.tunnel), self.notices, timeouts)
                options["tunnel"] = self._jump.conn
            self.conn = await asyncssh.connect(h.host, **options)
        except jump.JumpError as exc:
            self._release()
            raise HostError(h.name, ssh_reason(exc.cause, h, via=exc.spec)) from None
        except Exception as exc:  # every way a login can fail, worded per kind below
            self._release()
            reason = ssh_reason(exc, h)
            if self.notices and isinstance(exc, asyncssh.HostKeyNotVerifiable):
                reason += " (`UserKnownHostsFile none` in ~/.ssh/config does not turn it off)"
            raise HostError(h.name, reason) from None
        self.address = self._own_address(config.host)
        return time.monotonic() - t0

    def _own_address(self, hostname: str) -> str:
        """Where the peers reach this host: the address we reached it at when that is one
        (a tunnel or a ProxyCommand has none; loopback is no good to the others), else the
        config's HostName when it is an address; else "" until its agent says what its sshd
        saw ($SSH_CONNECTION: behind a bastion, its private address; remote/fleet.py)."""
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


def routable(addr: str) -> bool:
    """An address other hosts may reach: an IP, neither loopback nor unspecified."""
    try:
        ip = ipaddress.ip_address(addr.split("%", 1)[0])
    except ValueError:
        return False
    return not (ip.is_loopback or ip.is_unspecified)


def ssh_reason(exc: BaseException, host: Host, via: str | None = None) -> str:
    """Why a login failed, in words a person acts on; via: the jump host that failed."""
    target = f"{host.user + '@' if host.user else ''}{host.host}:{host.port or 22}"
    if via is not None:
        return f"jump host {via} (ProxyJump): {ssh_reason(exc, jump.as_host(via, host))}"
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
        return f"timed out connecting to {target} after {CONNECT_TIMEOUT:g} s"
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
