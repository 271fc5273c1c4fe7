"""Live GPU figures, launcher side: one long-lived process per host, over the open connection,
streams a sample of its GPUs every INTERVAL seconds (remote/monitor_host.py).

One exec per host for as long as we watch, instead of one nvidia-smi exec per host and round
(~33 SSH execs/s at 100 hosts, each round waiting for the slowest host). Each sample becomes a
GpuStats event on arrival. The host's process leaves when its stdin closes or when it has heard
nothing for LEASE seconds (a cut link never closes it), so we say a word every BEAT seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from . import probe
from .events import Event, Gpu, GpuStats
from .transport import HostError, Process, Transport

INTERVAL = 2.0  # seconds between samples
BEAT = 5.0  # seconds between our words to the host's process
LEASE = 20.0  # the host's process leaves after this long without one
REAP_S = 1.0  # how long a stopped monitor waits for its process to be gone (a dead link: not)
MARK = "DDPTUI-GPU "  # monitor_host.MARK

_HERE = Path(__file__).parent
_SOURCES = ((_HERE / "probe_host.py").read_text(), (_HERE / "monitor_host.py").read_text())
# python -c BOOT PROBE MONITOR SPEC: probe_host.py first, in a namespace of its own (its way of
# running nvidia-smi is reused), then the monitor. os._exit: a lease that ran out leaves the
# stdin reader blocked, and a normal exit would wait on its lock.
BOOT = (
    "import sys,os;a=sys.argv;p={'__name__':'ddptui-probe'};m={'__name__':'ddptui-monitor'};"
    "exec(compile(a[1],'ddptui-probe','exec'),p);"
    "exec(compile(a[2],'ddptui-monitor','exec'),m);"
    "c=m['main'](p,a[3]);sys.stdout.flush();os._exit(c)"
)

Emit = Callable[[Event], None]
# How a host's stream ended: no GPU there, the link went, or the process ended by itself.
Ending = Literal["no-gpu", "lost", "ended"]


def command(python: str, owner: str, paused: bool = False) -> list[str]:
    """The monitor's command (argv). owner names the launcher (pid@host): what tests look for."""
    spec = {
        "interval": INTERVAL,
        "lease": LEASE,
        "paused": paused,
        "smi": {"gpus": list(probe.GPU_QUERY[1:]), "apps": list(probe.APPS_QUERY[1:])},
        "owner": owner,
    }
    return ["sh", "-c", probe.WRAPPER, "ddptui-monitor", python, BOOT, *_SOURCES, json.dumps(spec)]


def owner_tag() -> str:
    return f"{os.getpid()}@{os.uname().nodename}"


class Monitor:
    """One host's stream of GPU figures."""

    def __init__(self, transport: Transport, emit: Emit) -> None:
        self.transport, self.emit = transport, emit
        self.proc: Process | None = None
        self.paused = False

    async def run(self) -> Ending:
        """Stream until the host has no GPU, the link goes, or this is cancelled."""
        host = self.transport.host
        try:
            argv = command(host.python, owner_tag(), self.paused)
            self.proc = proc = await self.transport.start(argv)
        except HostError:
            return "lost"
        beat = asyncio.ensure_future(self._beat(proc))
        try:
            while line := await proc.readline():
                msg = _message(line)
                if msg is None:
                    continue  # whatever else the host printed (a greeting wrapper, say)
                if msg.get("smi") is None:
                    await proc.wait()  # it leaves at once
                    return "no-gpu"
                stats = parse(host.name, host.node_rank, msg)
                if stats is not None:
                    self.emit(stats)
            # No exit status: the connection went (keepalives unanswered, sshd gone).
            return "lost" if await proc.wait() is None else "ended"
        finally:
            beat.cancel()
            proc.close_stdin()  # the host's process leaves at once
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(proc.wait(), REAP_S)

    async def _beat(self, proc: Process) -> None:
        while True:
            await asyncio.sleep(BEAT)
            proc.write(b"\n")

    def pause(self, paused: bool) -> None:
        """Stop (or restart) sampling; the process stays, so resuming costs no exec."""
        self.paused = paused
        if self.proc is not None:
            self.proc.write(b"pause\n" if paused else b"resume\n")


def _message(line: bytes) -> dict[str, Any] | None:
    return probe.marked(line, MARK)


def parse(host: str, node_rank: int, msg: dict[str, Any]) -> GpuStats | None:
    """One sample → GpuStats, each GPU process with its owner; None if nvidia-smi failed."""
    smi = msg["smi"]
    if probe.smi_error(smi["gpus"]) is not None:
        return None  # the checks report a broken nvidia-smi; the figures just stay away
    rows = probe.parse_gpus(smi["gpus"]["out"])
    apps = smi.get("apps") or {}
    gpus = probe.attach_processes(rows, apps.get("out", "") if apps.get("code") == 0 else "")
    return GpuStats(host, node_rank, _with_owners(gpus, msg.get("owners") or {}))


def _with_owners(gpus: Sequence[Gpu], owners: dict[str, str]) -> tuple[Gpu, ...]:
    return tuple(
        dataclasses.replace(
            g,
            processes=tuple(
                dataclasses.replace(p, user=owners.get(str(p.pid), "?")) for p in g.processes
            ),
        )
        for g in gpus
    )


async def watch(transports: Sequence[Transport], emit: Emit) -> None:
    """Every host's live GPU figures until cancelled (a run's, over its own connections)."""
    await asyncio.gather(*(Monitor(t, emit).run() for t in transports))
