"""Live GPU figures, launcher side: one `monitor` channel per host on its agent, a sample of its
GPUs every INTERVAL seconds (remote/host/monitor.py), each a GpuStats event on arrival.

One channel per host for as long as anyone listens, instead of one nvidia-smi exec per host and
round (~33 SSH execs/s at 100 hosts, each round waiting for the slowest host). A CPU host says so
once and its channel ends. The channel ends with the agent: whoever owns the agent
(remote/agents/fleet.py) decides what a lost host means.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ddptui.remote import smi
from ddptui.remote.agents import ops
from ddptui.remote.events import Event, Gpu, GpuStats, HostLeases, LeaseHolder
from ddptui.remote.host import protocol

if TYPE_CHECKING:
    from ddptui.remote.agents.agent import Agent

INTERVAL = 2.0  # seconds between samples

Emit = Callable[[Event], None]


class Monitor:
    """One host's stream of GPU figures, from the moment it is made."""

    def __init__(self, agent: Agent, emit: Emit) -> None:
        self.agent, self.emit = agent, emit
        self.gpus: bool | None = None  # None until the host says
        self.ended: str | None = None
        self.leases: HostLeases | None = None  # as last told
        host = agent.transport.host
        self.host, self.node_rank = host.name, host.node_rank
        spec = {
            "interval": INTERVAL,
            "smi": {"gpus": list(smi.GPU_QUERY[1:]), "apps": list(smi.APPS_QUERY[1:])},
        }
        self._closed = asyncio.Event()
        self.channel = agent.open(protocol.MONITOR, spec, self._sample, self._end)

    def _sample(self, kind: bytes, msg: Any) -> None:
        if kind != b"j" or not isinstance(msg, dict):
            return
        if msg.get("smi") is None:
            self.gpus = False  # a CPU host: its channel ends
            return
        self.gpus = True
        stats = parse(self.host, self.node_rank, msg)
        if stats is not None:
            self.emit(stats)
        leases = self._leases(msg.get("leases"))
        if leases is not None and leases != self.leases:  # told when they change
            self.leases = leases
            self.emit(leases)

    def _leases(self, found: Any) -> HostLeases | None:
        """Its GPUs' leases, read with the figures (ages rounded: a change, not the clock)."""
        if not isinstance(found, dict):
            return None
        try:
            leases = ops.read_host_leases(self.host, self.node_rank, found)
        except (TypeError, ValueError, KeyError, AttributeError):
            return None
        return _coarse(leases)

    def _end(self, why: str | None) -> None:
        self.ended = why or "ended"
        self._closed.set()

    def stop(self) -> None:
        self.channel.end()

    async def channel_closed(self) -> None:
        await self._closed.wait()


def parse(host: str, node_rank: int, msg: dict[str, Any]) -> GpuStats | None:
    """One sample → GpuStats, each GPU process with its owner; None if nvidia-smi failed."""
    runs = msg["smi"]
    if smi.smi_error(runs["gpus"]) is not None:
        return None  # the checks report a broken nvidia-smi; the figures just stay away
    rows = smi.parse_gpus(runs["gpus"]["out"])
    apps = runs.get("apps") or {}
    gpus = smi.attach_processes(rows, apps.get("out", "") if apps.get("code") == 0 else "")
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


def _coarse(leases: HostLeases) -> HostLeases:
    """Ages to the minute, so that leases that stay the same compare the same."""

    def held(h: LeaseHolder | None) -> LeaseHolder | None:
        return h and dataclasses.replace(h, age=h.age and h.age // 60 * 60)

    gpus = leases.gpus and tuple(
        dataclasses.replace(g, holder=held(g.holder), dead=held(g.dead)) for g in leases.gpus
    )
    queue = tuple(q for q in map(held, leases.queue) if q is not None)
    return dataclasses.replace(leases, gpus=gpus, queue=queue)
