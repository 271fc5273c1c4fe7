"""The launcher's hosts: one agent each (remote/agents/agent.py), started on first use, then shared.

The dashboard opens a Fleet on its inventory and keeps it; a run launched there borrows the same
agents, so a launch costs no login shell more than opening the dashboard did. `check`, `launch`,
`attach`, `stop`, `stacks` and `runs` each open their own: one login shell per host, at most.

Connecting a host says where it is: *connecting* (the SSH login, bounded and retried by
remote/agents/fanout.py), *starting* (from the exec until its agent's HELLO: a slow login shell is a
host starting, not a host lost), then *connected*. Each host's GPU monitor is one channel on its
agent, whoever listens (the dashboard, a run's hang guard).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from ddptui.remote.agents import fanout
from ddptui.remote.agents.agent import Agent
from ddptui.remote.agents.monitor import Monitor
from ddptui.remote.agents.transport import HostError, LocalTransport, Transport, routable
from ddptui.remote.events import Event, HostState
from ddptui.remote.inventory import Host, Inventory

Emit = Callable[[Event], None]
T = TypeVar("T")


def for_host(host: Host) -> Transport:
    if host.transport == "local":
        return LocalTransport(host)
    from ddptui.remote.agents.sshtransport import SSHTransport  # asyncssh: slow to import

    return SSHTransport(host)


class Fleet:
    def __init__(
        self,
        hosts: Sequence[Host],
        *,
        start_timeout: float = 300.0,
        lease: float = 60.0,
        transports: Sequence[Transport] | None = None,
        nnodes: int | None = None,
        prefork: bool = True,
    ) -> None:
        self.hosts = tuple(hosts)  # the run's nodes in node rank order, then any spare hosts
        self.nnodes = len(self.hosts) if nnodes is None else nnodes
        self.transports = list(transports or [for_host(h) for h in hosts])
        self.start_timeout, self.lease = start_timeout, lease
        self.prefork = prefork  # False: no launch follows on these hosts (Slurm's login node)
        self.agents: dict[int, Agent] = {}
        self.took: dict[int, float] = {}  # node rank → seconds from login to the agent's HELLO
        self.monitors: dict[int, Monitor] = {}
        self.listeners: list[Emit] = []  # who hears the GPU figures
        self.on_lost: list[Callable[[int, str], None]] = []  # told when a host's agent is lost
        self._starting: dict[int, asyncio.Task[Agent]] = {}

    def same_hosts(self, hosts: Sequence[Host]) -> bool:
        return self.hosts == tuple(hosts)

    def ready(self, k: int) -> Agent | None:
        agent = self.agents.get(k)
        return agent if agent is not None and agent.ready else None

    async def agent(self, k: int, emit: Emit) -> Agent:
        """Host k's agent, started if need be (once, however many ask). Raises HostError."""
        if (agent := self.ready(k)) is not None:
            return agent
        task = self._starting.get(k)
        if task is None or task.done():
            task = self._starting[k] = asyncio.ensure_future(self._start(k, emit))
        return await asyncio.shield(task)

    async def reconnect(self, k: int, emit: Emit) -> Agent:
        """A new login and agent for host k (its link dropped); the same bounds as the first."""
        old = self.agents.pop(k, None)
        if old is not None:
            old.drop()
        self.transports[k].drop()
        return await self.agent(k, emit)

    async def _start(self, k: int, emit: Emit) -> Agent:
        t = self.transports[k]
        h = t.host
        emit(HostState(h.name, k, "connecting"))
        t0 = time.monotonic()
        await fanout.connect(t)  # HostError when it cannot log in
        emit(HostState(h.name, k, "starting"))
        agent = Agent(t, start_timeout=self.start_timeout, lease=self.lease, prefork=self.prefork)
        agent.on_lost = lambda why: self._lost(agent, why)
        hello = await agent.start()
        t.address = own_address(t, hello.ssh_addr)
        self.agents[k] = agent
        self.took[k] = time.monotonic() - min(t0, t.began or t0)
        emit(HostState(h.name, k, "connected", f"{self.took[k]:.2f} s"))
        if self.listeners:
            self._monitor(k, agent)
        return agent

    def _lost(self, agent: Agent, why: str) -> None:
        for k, held in list(self.agents.items()):
            if held is agent:  # not one replaced on purpose (a reconnect)
                for tell in list(self.on_lost):
                    tell(k, why)

    def swap(self, k: int, j: int, host: Host) -> None:
        """Slot k takes slot j's host and connection (a spare, as `host`: in node k's rank),
        and j takes k's (the lost node's). Whatever was still starting in either goes."""
        for i in (k, j):
            task = self._starting.pop(i, None)
            if task is not None:
                task.cancel()
        hosts, t = list(self.hosts), self.transports
        hosts[k], hosts[j] = host, hosts[k]
        self.hosts = tuple(hosts)
        t[k], t[j] = t[j], t[k]
        t[k].host = host
        _swap(self.agents, k, j)
        _swap(self.took, k, j)
        for i in (k, j):  # their figures named the hosts by their old places: new ones
            self.monitors.pop(i, None)
        agent = self.agents.get(k)
        if agent is not None and self.listeners:
            self._monitor(k, agent)

    # -- GPU figures ----------------------------------------------------------------------------

    def listen(self, emit: Emit) -> None:
        """`emit` hears every host's GPU figures from now on (a monitor per ready host)."""
        if emit not in self.listeners:
            self.listeners.append(emit)
        for k, agent in self.agents.items():
            if agent.ready:
                self._monitor(k, agent)

    def unlisten(self, emit: Emit) -> None:
        with contextlib.suppress(ValueError):
            self.listeners.remove(emit)

    def _monitor(self, k: int, agent: Agent) -> None:
        current = self.monitors.get(k)
        if current is None or current.agent is not agent:
            self.monitors[k] = Monitor(agent, self._stats)

    def _stats(self, event: Event) -> None:
        for emit in list(self.listeners):
            emit(event)

    # -- ending ---------------------------------------------------------------------------------

    async def close(self) -> None:
        """Every agent let go (they leave at once; node supervisors live on), every login closed."""
        for task in self._starting.values():
            task.cancel()
        await asyncio.gather(*self._starting.values(), return_exceptions=True)
        await asyncio.gather(*(a.close() for a in self.agents.values()), return_exceptions=True)
        await asyncio.gather(*(t.close() for t in self.transports), return_exceptions=True)
        self.agents.clear()
        self.monitors.clear()


def _swap(table: dict[int, T], k: int, j: int) -> None:
    held = {i: table.pop(i) for i in (k, j) if i in table}
    table.update({k if i == j else j: v for i, v in held.items()})


def own_address(t: Transport, ssh_addr: str | None) -> str:
    """Where the peers reach a host: where we reached it, when that is an address they can use
    (remote/agents/transport.py); through a tunnel, what its sshd saw us reach ($SSH_CONNECTION, its
    agent's HELLO says); else where we reached it, whatever that is."""
    if routable(t.address):
        return t.address
    return ssh_addr or t.address or t.peer_address


async def connect_all(fleet: Fleet, emit: Emit) -> dict[int, str]:
    """Every host's agent at once; {node rank: why not} for those that could not be had."""

    async def one(k: int) -> str | None:
        try:
            await fleet.agent(k, emit)
        except HostError as exc:
            return exc.reason
        return None

    whys = await asyncio.gather(*(one(k) for k in range(len(fleet.transports))))
    return {k: why for k, why in enumerate(whys) if why is not None}


def fleet_for(inv: Inventory, transports: Sequence[Transport] | None = None) -> Fleet:
    """An agent per host: the nodes', then the spares' (those log in only when asked)."""
    job = inv.job
    return Fleet(
        inv.everyone,
        start_timeout=job.start_timeout,
        lease=job.link_timeout,
        transports=transports,
        nnodes=len(inv.hosts),
    )
