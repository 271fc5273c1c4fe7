"""A host through OpenSSH's own client: one `ssh` process per command, for a login that carries a
whole run over one agent (a Slurm login node, remote/slurm/login.py).

ssh reads ssh_config and known_hosts itself (ProxyJump, Match, certificates: the host `ssh HOST`
reaches, as it reaches it), the inventory's values on its command line as `ssh -G` is asked them
(remote/agents/openssh.py). Host keys are always verified (StrictHostKeyChecking on the command
line wins over the config's), no prompt is ever waited on (BatchMode), and the connection is its
own (never a user's ControlMaster's, which our exit would take down). The login runs in ssh's
process, beside the launcher's own work, and asyncssh (~0.2 s to import) is never loaded for it.

A login sshd drops (MaxStartups) or refuses is tried again as remote/agents/fanout.py tries
asyncssh's; every other failure is an answer, named from ssh's own words (reason).

A login may be begun before its host is known for sure (`begin`: a Slurm launch logs in while
its inventory is still being checked, remote/slurm/early.py): the transport takes it on when it
asks for the very same command line, and nothing else does.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ddptui.remote.agents import fanout, openssh, transport
from ddptui.remote.agents.transport import HostError, LocalProcess, Process, Result, Transport

if TYPE_CHECKING:  # the inventory's models load pydantic: an early login does not wait for it
    from ddptui.remote.inventory import Host

AUTHENTICATED = "Authenticated to "  # LogLevel VERBOSE's line once the login is done
# ssh's own lines at LogLevel VERBOSE: not the host's words, nor why it failed
CHATTER = re.compile(r"^(Authenticated to |Transferred: |Bytes per second: )")
# The key exchange asyncssh makes, first: OpenSSH 9's own first choice (sntrup761x25519) costs
# ~0.13 s more CPU a login; the rest of ssh's defaults stay offered after it
KEX = "curve25519-sha256,curve25519-sha256@libssh.org"
EXIT_SSH = 255  # ssh's own failure (the link, the login), never the command's
SAID_MAX = 300  # of ssh's last line, in a reason (the host's words are bounded)
LOGIN_S = 3.0  # logging in, in CONNECT_TIMEOUTs (connecting is one of them)


def options() -> list[str]:
    return [
        "-T", "-x", "-a",
        "-o", "BatchMode=yes",
        "-o", "StrictHostKeyChecking=yes",
        "-o", "ControlPath=none",
        "-o", "ClearAllForwardings=yes",
        "-o", f"KexAlgorithms=^{KEX}",
        "-o", f"ConnectTimeout={transport.CONNECT_TIMEOUT:g}",
        "-o", f"ServerAliveInterval={transport.KEEPALIVE:g}",
        "-o", "ServerAliveCountMax=3",
        "-o", "LogLevel=VERBOSE",
    ]  # fmt: skip


class Reach(NamedTuple):
    """What ssh is told of a host: its name, and the inventory's keys for it."""

    host: str
    user: str | None = None
    port: int | str | None = None
    identity_file: str | None = None
    known_hosts: str | None = None
    ssh_config: str | None = None

    @classmethod
    def of(cls, host: Host) -> Reach:
        return cls(host.host, host.user, host.port, host.identity_file, host.known_hosts,
                   host.ssh_config)  # fmt: skip


def argv_for(reach: Reach, command: list[str]) -> list[str]:
    """The whole ssh command line that runs `command` on a host (one shell word each)."""
    keys = (str(Path(reach.identity_file).expanduser()),) if reach.identity_file else ()
    ssh = openssh.command(
        reach.host,
        options(),
        user=reach.user,
        port=int(reach.port) if reach.port else None,
        identity_files=keys,
        config_file=reach.ssh_config or openssh.home_config(),
        known_hosts=str(Path(reach.known_hosts).expanduser()) if reach.known_hosts else None,
    )
    return [*ssh, shlex.join(command)]


_begun: dict[tuple[str, ...], tuple[asyncio.subprocess.Process, float]] = {}  # and when


class Begun:
    """A login begun early, until a transport takes it on (or it is dropped)."""

    def __init__(self, ssh: list[str]) -> None:
        self.key = tuple(ssh)

    def drop(self) -> None:
        """Killed unless taken on: a guess the checked inventory did not bear out, or a launch
        that ended before its login was needed."""
        begun = _begun.pop(self.key, None)
        if begun is not None:
            transport.kill_group(begun[0].pid)


async def begin(reach: Reach, command: list[str]) -> Begun | None:
    """Start logging in to run `command` now; None where ssh cannot be run."""
    try:
        ssh = argv_for(reach, command)
        _begun[tuple(ssh)] = (await transport.spawn(ssh), time.monotonic())
    except (OSError, ValueError):  # no ssh here; a port that is no number: the check says so
        return None
    return Begun(ssh)


class _ClientProcess(LocalProcess):
    """ssh's process: its stdin and stdout the command's; exit 255 is the link's, not the
    command's (None, as asyncssh says a lost connection); its stderr carries ssh's own words."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.authenticated = asyncio.Event()
        super().__init__(proc, self._seen)

    def _seen(self, line: str) -> None:
        if line.startswith(AUTHENTICATED):
            self.authenticated.set()

    async def logged_in(self, within: float) -> str | None:
        """None once ssh has logged in; else what ssh said as it ended (or that it did not
        finish logging in within `within` seconds, killed)."""
        ended = asyncio.ensure_future(self.proc.wait())
        authenticated = asyncio.ensure_future(self.authenticated.wait())
        await asyncio.wait({ended, authenticated}, timeout=within, return_when="FIRST_COMPLETED")
        for task in (ended, authenticated):
            task.cancel()
        await asyncio.gather(ended, authenticated, return_exceptions=True)
        if self.authenticated.is_set():
            return None
        if self.proc.returncode is None:
            self.kill()
            await self.proc.wait()
            return f"timed out logging in after {within:g} s"
        await self._err.task
        return self.stderr_tail() or f"ssh ended (exit {self.proc.returncode})"

    async def wait(self) -> int | None:
        code = await super().wait()
        return None if code == EXIT_SSH else code

    def stderr_tail(self) -> str:
        return "\n".join(line for line in self._err.lines if not CHATTER.match(line))


class ClientTransport(Transport):
    """A host through the installed `ssh` (openssh.client()): the login is the command's own."""

    def __init__(self, host: Host) -> None:
        super().__init__(host)
        self.address = ""  # where its peers reach it: its agent's HELLO says (fleet.own_address)

    async def connect(self) -> float:
        return 0.0  # each command logs in itself: start() and run()

    async def start(self, argv: list[str]) -> Process:
        within = transport.CONNECT_TIMEOUT * LOGIN_S
        attempt = 0
        while True:
            attempt += 1
            proc = _ClientProcess(await self._ssh(argv))
            said = await proc.logged_in(within)
            if said is None:
                return proc
            if attempt >= tries(said):
                raise HostError(self.host.name, reason(said, self.host))
            await asyncio.sleep(fanout.pause(attempt))

    async def _ssh(self, argv: list[str]) -> asyncio.subprocess.Process:
        """ssh running argv: the login begun early for it, or a new one."""
        ssh = argv_for(Reach.of(self.host), argv)
        begun = _begun.pop(tuple(ssh), None)
        self.began = begun[1] if begun is not None else None
        if begun is not None:
            return begun[0]
        try:
            return await transport.spawn(ssh)
        except OSError as exc:
            raise HostError(self.host.name, f"cannot run {ssh[0]}: {exc.strerror}") from None

    async def run(self, argv: list[str], input: bytes = b"", timeout: float = 30) -> Result:
        proc = await self.start(argv)  # its stderr is already read (StderrTail): stdout here
        try:
            out = await asyncio.wait_for(_output(proc, input), timeout)
        except TimeoutError:
            proc.kill()
            raise HostError(self.host.name, f"{argv[0]} did not answer in {timeout:g} s") from None
        return Result(await proc.wait(), out, proc.stderr_tail().encode())


async def _output(proc: Process, input: bytes) -> bytes:
    proc.write(input)
    proc.close_stdin()
    chunks = []
    while chunk := await proc.read(1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def tries(said: str) -> int:
    """How many logins a failure like this one deserves in all, as fanout.tries_for says
    for asyncssh's: a dropped login (sshd's MaxStartups) or a refused one (sshd restarting)
    is load, not an answer."""
    last = said.strip().splitlines()[-1] if said.strip() else ""
    if "Connection refused" in last:
        return fanout.REFUSED_TRIES
    dropped = ("Connection reset", "Connection closed by", "kex_exchange_identification")
    if any(word in last for word in dropped):
        return fanout.DROPPED_TRIES
    return 1


def reason(said: str, host: Host) -> str:
    """Why the login failed, in the words ssh_reason gives asyncssh's failures."""
    target = f"{host.user + '@' if host.user else ''}{host.host}:{host.port or 22}"
    last = said.strip().splitlines()[-1].removeprefix("ssh: ")[:SAID_MAX] if said.strip() else ""
    if "Host key verification failed" in said or "IDENTIFICATION HAS CHANGED" in said:
        where = host.known_hosts or "~/.ssh/known_hosts"
        return (
            f"host key not verified for {target}; check {where} (ssh-keyscan, or ssh once by hand)"
        )
    if "Permission denied" in last:
        key = host.identity_file or "ssh-agent / default keys"
        return f"authentication refused for {target} (tried {key})"
    if "Connection refused" in last:
        return f"connection refused by {target} (is sshd running on that port?)"
    if "Could not resolve hostname" in last:
        return f"cannot resolve host name {host.host!r}"
    if "timed out" in last:
        return f"timed out connecting to {target}: {last}"
    return f"cannot connect to {target}: {last}"
