"""One host's agent, launcher side: the one SSH exec on that host, every op multiplexed over it.

`start()` opens the exec (remote/agents/shipper.py), sends the code if the host asks for it, and
waits for the agent's HELLO. Until then the host is *starting*, not silent: a login shell may take
minutes on a busy network home. That wait is bounded by `start_timeout`, and the
connection's SSH keepalives, which sshd answers even while the shell starts, tell a silent sshd
(lost) from a slow command. After HELLO, `request()` asks an op for its one answer and `open()`
follows a stream (a node's, the GPU monitor's); one reader task hands each frame to its channel
as it arrives, so a slow consumer slows the host down instead of filling memory. A ping every
few seconds keeps the agent's lease; any frame says the host is there.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from ddptui.remote.agents import pace, shipper
from ddptui.remote.agents.transport import HostError, Process, Transport
from ddptui.remote.host import protocol, wire

READ = 1 << 18
PACED_READ = 1 << 14  # a read's frames are one unit of paced line work (remote/agents/pace.py)
YIELD_EVERY = 64  # reads between giving the loop to the others (read() does not suspend)
NOISE_KEPT = 50  # lines a host printed before its agent, kept to show with its node's output
NOISE_MAX = 1 << 20  # bytes a host may print before its agent starts: more is not a login
REQUEST_TIMEOUT = 120.0
SEND_CHUNK = 1 << 20
CLOSE_S = 2.0  # how long a closed agent gets to leave before it is killed


class AgentError(HostError):
    """The host was logged into, but its agent did not start: `code` is the exec's exit status
    (127: no python), None when it never ended (a timeout, a connection gone)."""

    def __init__(self, host: str, reason: str, code: int | None = None) -> None:
        super().__init__(host, reason)
        self.code = code


OnFrame = Callable[[bytes, Any], None]  # (b"j", dict) or (b"d", bytes)
OnEnd = Callable[[str | None], None]  # None: the agent ended the channel; else why it was lost


@dataclass(frozen=True)
class Hello:
    """What a host's agent says of itself first."""

    pid: int
    hostname: str
    python: str  # the version it runs on
    exe: str
    missing_python: str | None  # the inventory's interpreter, when it was not there
    ssh_addr: str | None  # the address its sshd was reached at, as the host saw it
    code: str  # "kept": from its state dir; "memory": it could not keep the code

    @classmethod
    def parse(cls, msg: dict[str, Any]) -> Hello:
        def text(key: str) -> str | None:
            value = msg.get(key)
            return str(value)[:4096] if value is not None else None

        return cls(
            int(msg.get("pid") or 0), text("hostname") or "", text("python") or "",
            text("exe") or "", text("missing_python"), text("ssh_addr"), text("code") or "",
        )  # fmt: skip


class Channel:
    """One stream on an agent; its frames go to `on_frame`, its end to `on_end`."""

    def __init__(self, agent: Agent, chan: int, on_frame: OnFrame, on_end: OnEnd) -> None:
        self.agent, self.chan, self.on_frame, self.on_end = agent, chan, on_frame, on_end
        self.open = True

    def send(self, data: bytes) -> None:
        if self.open:
            self.agent.write(wire.frame(self.chan, b"d", data))

    def send_json(self, msg: dict[str, Any]) -> None:
        if self.open:
            self.agent.write(wire.jframe(self.chan, msg))

    def end(self) -> None:
        """Our side is done (the agent's op sees the end of its data)."""
        if self.open:
            self.agent.write(wire.frame(self.chan, b"e"))

    def _ended(self, why: str | None) -> None:
        if self.open:
            self.open = False
            self.on_end(why)


class Agent:
    def __init__(
        self, transport: Transport, *, start_timeout: float = 300.0, lease: float = 60.0,
        prefork: bool = True,
    ) -> None:  # fmt: skip
        self.transport, self.start_timeout, self.lease = transport, start_timeout, lease
        self.prefork = prefork  # whether the host's agent makes a supervisor ready to launch
        self.name = transport.host.name
        self.proc: Process | None = None
        self.hello: Hello | None = None
        self.heard = time.monotonic()  # the last frame from the host
        self.lost: str | None = None  # why the agent is gone
        self.noise: deque[str] = deque(maxlen=NOISE_KEPT)  # what the host printed first
        self.channels: dict[int, Channel] = {}
        self.on_lost: Callable[[str], None] | None = None  # told once, unless we closed it
        self._closing = False
        self._next = 1
        self._reader = wire.FrameReader()
        self._pending: list[wire.Noise | wire.Need | wire.Frame] = []  # what came with HELLO
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def ready(self) -> bool:
        return self.hello is not None and self.lost is None

    # -- starting -------------------------------------------------------------------------------

    async def start(self) -> Hello:
        """The exec, then the agent's HELLO. Raises HostError saying what it waited for."""
        python = self.transport.host.python
        self.proc = await self.transport.start(shipper.command(python, self.prefork))
        try:
            self.hello = await asyncio.wait_for(self._until_hello(), self.start_timeout)
        except TimeoutError:
            await self._reap()
            raise AgentError(
                self.name,
                f"the login shell or python did not start within {self.start_timeout:g} s "
                "(job.start_timeout)",
            ) from None
        except BaseException:
            await self._reap()
            raise
        self.heard = time.monotonic()
        self.write(wire.jframe(0, {"t": protocol.LEASE, "seconds": self.lease}))
        self._tasks = [
            asyncio.ensure_future(self._read()),
            asyncio.ensure_future(self._ping()),
        ]
        return self.hello

    async def _until_hello(self) -> Hello:
        proc = self.proc
        assert proc is not None
        while True:
            data = await proc.read(READ)
            if not data:
                why, code = await self._why_gone(starting=True), await proc.wait()
                if code is None:  # the link went, not the agent: the host is lost
                    raise HostError(self.name, why)
                raise AgentError(self.name, why, code)
            try:
                items = self._reader.feed(data)
            except wire.Garbage as exc:
                raise AgentError(self.name, f"sent what is not ddptui's agent: {exc}") from None
            for i, item in enumerate(items):
                if isinstance(item, wire.Noise):
                    self._noise(item.data)
                elif isinstance(item, wire.Need):
                    proc.write(shipper.payload())
                elif item.chan == 0 and item.kind == b"j":
                    msg = item.message()
                    if msg.get("t") == protocol.HELLO:
                        self._pending = items[i + 1 :]
                        return Hello.parse(msg)
            if self._reader.noise > NOISE_MAX:
                raise AgentError(
                    self.name, f"printed {self._reader.noise} bytes without starting ddptui's agent"
                )

    def _noise(self, data: bytes) -> None:
        for line in data.decode("utf-8", "replace").splitlines():
            if line.strip():
                self.noise.append(line[:1000])

    async def _why_gone(self, starting: bool = False) -> str:
        """Why the exec ended: the agent's own last words, or the connection's fate."""
        proc = self.proc
        code = await proc.wait() if proc is not None else None
        said = proc.stderr_tail().strip().splitlines() if proc is not None else []
        if code is None:
            when = "while its login shell started" if starting else "its agent's connection closed"
            return (
                f"lost {when}: the SSH connection went silent (no answer to keepalives), "
                "or the host went down"
            )
        if code == shipper.EXIT_NO_PYTHON and said:
            return said[-1]
        tail = f": {said[-1]}" if said else ""
        return f"ddptui's agent ended (exit {code}){tail}"

    # -- running --------------------------------------------------------------------------------

    async def _read(self) -> None:
        proc = self.proc
        assert proc is not None
        items, reads = self._pending, 0
        self._pending = []
        pacer = pace.current()  # the dashboard's: its keys go before a flood of lines
        try:
            self._take(items)
            while True:
                data = await proc.read(READ if pacer is None else PACED_READ)
                if not data:
                    break
                self.heard = time.monotonic()
                if pacer is None:
                    self._take(self._reader.feed(data))
                else:
                    await pacer.run(partial(self._feed, data))
                reads += 1
                if reads % YIELD_EVERY == 0:
                    await asyncio.sleep(0)
            why = await self._why_gone()
        except wire.Garbage as exc:
            why = f"sent what is not ddptui's protocol: {exc}"
        self._lose(why)

    def _feed(self, data: bytes) -> None:
        self._take(self._reader.feed(data))

    def _take(self, items: list[wire.Noise | wire.Need | wire.Frame]) -> None:
        for item in items:
            if isinstance(item, wire.Frame):
                self._dispatch(item)

    def _dispatch(self, f: wire.Frame) -> None:
        ch = self.channels.get(f.chan)
        if ch is None:
            return  # channel 0 (pongs), or one we gave up on
        if f.kind == b"e":
            del self.channels[f.chan]
            ch._ended(None)
            return
        try:
            ch.on_frame(f.kind, f.message() if f.kind == b"j" else f.payload)
        except wire.Garbage as exc:  # a stream that is not one: that stream is over
            self.channels.pop(f.chan, None)
            ch.end()
            ch._ended(f"sent what is not ddptui's protocol: {exc}")

    async def _ping(self) -> None:
        beat = protocol.beat_interval(self.lease)
        while True:
            await asyncio.sleep(beat)
            self.write(wire.jframe(0, {"t": protocol.PING}))

    def _lose(self, why: str) -> None:
        if self.lost is None:
            self.lost = why
            if self.on_lost is not None and not self._closing and self.hello is not None:
                self.on_lost(why)
        for ch in list(self.channels.values()):
            ch._ended(self.lost)
        self.channels.clear()
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()

    # -- ops ------------------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self.proc is not None and self.lost is None:
            self.proc.write(data)

    def open(self, op: str, args: dict[str, Any], on_frame: OnFrame, on_end: OnEnd) -> Channel:
        """Start an op that streams; its frames and end come to the callbacks."""
        chan, self._next = self._next, self._next + 1
        ch = Channel(self, chan, on_frame, on_end)
        if not self.ready:
            ch.open = False
            on_end(self.lost or "its agent is not started")
            return ch
        self.channels[chan] = ch
        self.write(wire.jframe(chan, {"op": op, **args}))
        return ch

    async def request(
        self,
        op: str,
        args: dict[str, Any] | None = None,
        *,
        data: bytes | None = None,
        timeout: float = REQUEST_TIMEOUT,
    ) -> dict[str, Any]:
        """An op's one answer (after sending it `data`, if any). Raises HostError if the agent
        is lost, answers nothing, or answers {"error": ...}."""
        answers: list[dict[str, Any]] = []
        done: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()

        def on_frame(kind: bytes, msg: Any) -> None:
            if kind == b"j":
                answers.append(msg)

        def on_end(why: str | None) -> None:
            if not done.done():
                done.set_result(why)

        ch = self.open(op, args or {}, on_frame, on_end)
        if data is not None:
            for at in range(0, len(data), SEND_CHUNK):
                ch.send(data[at : at + SEND_CHUNK])
                if self.proc is not None:
                    await self.proc.drain()
            ch.end()
        try:
            why = await asyncio.wait_for(done, timeout)
        except TimeoutError:
            self.channels.pop(ch.chan, None)
            ch.end()
            raise HostError(self.name, f"{op}: no answer in {timeout:g} s") from None
        if why is not None:
            raise HostError(self.name, why)
        if not answers:
            raise HostError(self.name, f"{op}: no answer")
        if not isinstance(answers[-1], dict):  # what a host sends is data
            raise HostError(self.name, f"{op}: its agent's answer is not understood")
        if answers[-1].get("error"):  # the op failed on the host (or refused what it was sent)
            raise HostError(self.name, f"{op}: {str(answers[-1]['error'])[:1000]}")
        return answers[-1]

    # -- ending ---------------------------------------------------------------------------------

    def _kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()

    async def _reap(self) -> None:
        """Killed, and waited for (briefly: a dead link never says)."""
        self._kill()
        if self.proc is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.proc.wait()), CLOSE_S)

    async def close(self) -> None:
        """Let the agent go (its stdin closes: it leaves; node supervisors live on)."""
        self._closing = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.proc is not None:
            with contextlib.suppress(Exception):
                self.proc.close_stdin()
            try:  # it leaves at EOF at once; a dead link never says so
                await asyncio.wait_for(self.proc.wait(), CLOSE_S)
            except TimeoutError:
                self._kill()
            except asyncio.CancelledError:
                self._kill()
                raise
        self._lose("closed")

    def drop(self) -> None:
        """Give up on it at once (its link may be dead)."""
        self._kill()
        self._lose("dropped: not heard from")
