"""How the engine reaches a host: the interface every way of reaching one gives, and the local
one (`transport: local`). Over SSH: asyncssh (remote/agents/sshtransport.py), or OpenSSH's own
client for a single login that carries everything (remote/agents/sshclient.py: a Slurm login
node), so that a run that needs no other host never loads asyncssh.

Each gives the same two things: `start` a long-lived process with pipes (the supervisor), and
`run` a short command to completion (probes). Errors come out as HostError in plain words.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import signal
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the inventory's models load pydantic: an early login does not wait for it
    from ddptui.remote.inventory import Host

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
        self.began: float | None = None  # when its login began, where before it was asked

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


class StderrTail:
    """Keeps the last lines a process wrote to stderr (a supervisor's crash explains itself)."""

    def __init__(self, reader: Any, seen: Callable[[str], None] | None = None) -> None:
        self.lines: deque[str] = deque(maxlen=20)
        self.seen = seen  # told each line as it comes
        self.task = asyncio.ensure_future(self._read(reader))

    async def _read(self, reader: Any) -> None:
        with contextlib.suppress(Exception):
            while line := await reader.readline():
                self.lines.append(line.decode("utf-8", "replace").rstrip())
                if self.seen is not None:
                    self.seen(self.lines[-1])

    def text(self) -> str:
        return "\n".join(self.lines)


class LocalProcess:
    def __init__(
        self, proc: asyncio.subprocess.Process, seen: Callable[[str], None] | None = None
    ) -> None:
        self.proc = proc
        assert proc.stdin and proc.stdout
        self._stdin, self._stdout = proc.stdin, proc.stdout
        self._err = StderrTail(proc.stderr, seen)

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
        kill_group(self.proc.pid)


async def spawn(argv: list[str]) -> asyncio.subprocess.Process:
    """A process with pipes, in a group of its own, as an ssh session's (kill_group ends it
    with its children); OSError if it cannot start."""
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=LINE_LIMIT,
        start_new_session=True,
    )


def kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class LocalTransport(Transport):
    """Runs on this machine, no SSH (the bundled inventory, laptops, tests)."""

    def __init__(self, host: Host) -> None:
        super().__init__(host)
        self.address = "127.0.0.1" if host.host in ("localhost", "127.0.0.1") else host.host

    async def connect(self) -> float:
        return 0.0

    async def start(self, argv: list[str]) -> Process:
        try:
            return LocalProcess(await spawn(argv))
        except OSError as exc:
            raise HostError(self.host.name, f"cannot run {argv[0]}: {exc.strerror}") from None

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


def routable(addr: str) -> bool:
    """An address other hosts may reach: an IP, neither loopback nor unspecified."""
    try:
        ip = ipaddress.ip_address(addr.split("%", 1)[0])
    except ValueError:
        return False
    return not (ip.is_loopback or ip.is_unspecified)
