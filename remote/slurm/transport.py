"""How the launcher reaches a node of a Slurm job: through Slurm, from the login node.

A node's agent (remote/host/agent.py, booted as over ssh: remote/agents/shipper.py) runs as
`srun --jobid J --overlap -w NODE`, started by the login node's agent (remote/host/slurmcmd.py's
relay), its stdin and stdout that agent's channel. So the nodes need no ssh, every node rides the
one login, and a node's agent lives in the job: it ends with it. Everything else of a run
(attach, stacks, sweep, the GPU monitor) goes over each node's agent as on an ssh host.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Any

from ddptui.remote.agents.agent import Channel
from ddptui.remote.agents.transport import HostError, Process, Result, Transport
from ddptui.remote.host import protocol
from ddptui.remote.inventory import Host
from ddptui.remote.slurm.login import Login

SRUN = ("srun", "--overlap", "--nodes=1", "--ntasks=1", "--unbuffered", "--quiet")


class SrunTransport(Transport):
    """Node `host.host` of job `job_id` (None: a process on the login node itself)."""

    def __init__(self, host: Host, login: Login, job_id: str | None) -> None:
        super().__init__(host)
        self.login, self.job_id = login, job_id
        self.address = ""  # the nodes' own addresses are theirs to find (remote/host/slurmjob.py)

    async def connect(self) -> float:
        await self.login.agent()
        return 0.0

    async def start(self, argv: list[str]) -> Process:
        agent = await self.login.agent()
        if self.job_id is not None:
            argv = [*SRUN, f"--jobid={self.job_id}", f"--nodelist={self.host.host}", *argv]
        proc = Relayed(self.host.name)
        proc.channel = agent.open(protocol.RELAY, {"argv": argv}, proc.on_frame, proc.on_end)
        return proc

    async def run(self, argv: list[str], input: bytes = b"", timeout: float = 30) -> Result:
        raise HostError(self.host.name, "a Slurm node runs nothing but its agent")


class Relayed:
    """A process started by the login node's relay: the channel's data are its stdout and
    stdin, its stderr and exit come as JSON."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.channel: Channel | None = None
        self.buf = bytearray()
        self.more = asyncio.Event()
        self.eof = False
        self.code: int | None = None
        self.ended = asyncio.Event()
        self.errors: deque[str] = deque(maxlen=20)

    def on_frame(self, kind: bytes, msg: Any) -> None:
        if kind == b"d":
            self.buf += msg
            self.more.set()
        elif isinstance(msg, dict) and msg.get("t") == "err":
            self.errors.append(str(msg.get("text", ""))[:1000])
        elif isinstance(msg, dict) and msg.get("t") == "exit":
            code = msg.get("code")
            self.code = code if isinstance(code, int) else None
            if msg.get("why"):
                self.errors.append(str(msg["why"])[:1000])
        elif isinstance(msg, dict) and msg.get("error"):
            self.errors.append(str(msg["error"])[:1000])

    def on_end(self, why: str | None) -> None:
        if why:  # the login node's agent is gone: so is the way to this node
            self.errors.append(f"the login node: {why}")
            self.code = None
        self.eof = True
        self.more.set()
        self.ended.set()

    async def read(self, n: int) -> bytes:
        while not self.buf and not self.eof:
            self.more.clear()
            await self.more.wait()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    async def readline(self) -> bytes:
        while b"\n" not in self.buf and not self.eof:
            self.more.clear()
            await self.more.wait()
        cut = self.buf.find(b"\n") + 1 or len(self.buf)
        out = bytes(self.buf[:cut])
        del self.buf[:cut]
        return out

    def write(self, data: bytes) -> None:
        if self.channel is not None:
            self.channel.send(data)

    async def drain(self) -> None:
        if self.channel is not None and self.channel.agent.proc is not None:
            await self.channel.agent.proc.drain()

    def close_stdin(self) -> None:
        if self.channel is not None:
            self.channel.end()

    async def wait(self) -> int | None:
        await self.ended.wait()
        return self.code

    def stderr_tail(self) -> str:
        return "\n".join(self.errors)

    def kill(self) -> None:
        if self.channel is not None:
            with contextlib.suppress(Exception):
                self.channel.send_json({"kill": True})
