"""Before a run, and for `check` and the dashboard: every host's agent up, the code pushed, the
checks. Nothing of a job starts here.

`run()` is a launch's part: all or nothing (a host that cannot be reached, a code push or a check
that fails: the launch refuses, and says why). `check()` alone is `ddptui check` and the
dashboard's opening: each host's probe follows its own agent's HELLO, without waiting for the
slowest host's login (the master's address, which every probe needs, is known at node 0's).
Spare hosts (`spare: true`) are checked alongside: one that fails is named and will not be used,
but never stops a launch. With `job.master_port: auto`, node 0's check picks the port.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ddptui.remote import inventory
from ddptui.remote.agents import sync
from ddptui.remote.agents.agent import AgentError
from ddptui.remote.agents.fleet import Fleet
from ddptui.remote.agents.transport import HostError
from ddptui.remote.checks import checkpoint, judge, probe
from ddptui.remote.events import ChecksDone, Event, Failure, HostChecked, HostState, Notice
from ddptui.remote.inventory import Host, Inventory
from ddptui.remote.stalls import flight

Emit = Callable[[Event], None]


class Preflight:
    def __init__(
        self,
        inv: Inventory,
        fleet: Fleet,
        emit: Emit,
        *,
        checks: bool = True,
        run_id: str | None = None,
        prepare: bool = True,
    ) -> None:
        self.inv, self.fleet, self.emit, self.checks = inv, fleet, emit, checks
        self.run_id = run_id  # the run the checks are for (a container's dry run names it)
        self.prepare = prepare  # its supervisors booted during the checks (early)
        self.failures: list[Failure] = []
        self.unreachable: dict[int, str] = {}  # node rank → why it could not be logged into
        self.broken: dict[int, AgentError] = {}  # logged into, but its agent did not start
        self.gpu_counts: dict[int, int] = {}  # node rank → GPUs the job will see (`auto`)
        self.master_port: int | None = None  # the one node 0's check picked (`auto`)
        self.torch: dict[str, str] = {}  # host name → the job's torch, as its check found it
        # told each node's host's findings as they come, before the others' (a launch leases
        # its GPUs meanwhile: remote/run/launch.py)
        self.on_checked: Callable[[int, HostChecked], None] | None = None

    async def run(self) -> bool:
        """Connect, push the code, check (or count GPUs): True when the run may start."""
        done: ChecksDone | None = None
        if self.checks and self.inv.job.sync is None:
            done = await self.check()  # each host's probe right after its own HELLO
        else:
            if not await self.connect():
                return False
            if self.inv.job.sync is not None and not await self._sync():
                return False
            done = await self.check() if self.checks else None
            if not self.checks and self.inv.job.nproc_per_node == "auto":
                await self._count_gpus()
        if self.unreachable:
            self.emit(Notice("error", "not starting: every host must be reachable"))
            return False
        if self.broken and done is None:  # the checks say it otherwise, as a finding
            names = ", ".join(self.inv.hosts[k].name for k in self.broken)
            self.emit(Notice("error", f"not starting: ddptui's agent did not start on {names}"))
            return False
        if done is not None and not done.ok:
            self._checks_failed(done)
            return False
        return True

    def nprocs(self) -> list[int]:
        """Processes per host. `auto` uses the GPUs found on the host, else `gpus:`, else 1."""
        return judge.nprocs(self.inv, self.gpu_counts)

    # -- connecting -----------------------------------------------------------------------------

    async def connect(self, why: str = "not starting: every host must be reachable") -> bool:
        """Every node's agent up (one found unreachable already is not tried again)."""
        tried = [k for k in range(len(self.inv.hosts)) if k not in self.unreachable]
        ok = all(await asyncio.gather(*(self._agent(k) for k in tried))) and not self.unreachable
        if not ok:
            self.emit(Notice("error", why))
        return ok

    async def reach(self, k: int) -> bool:
        """Host k's agent up, alone (an attach asks node 0 first)."""
        return await self._agent(k)

    async def _agent(self, k: int) -> bool:
        try:
            await self.fleet.agent(k, self.emit)
        except AgentError as exc:
            self._broken(k, exc)
            return False
        except HostError as exc:
            self._unreachable(k, exc.reason)
            return False
        if not self.checks:  # else the checks say it, with the host's findings
            t = self.fleet.transports[k]
            for text in t.notices:  # e.g. an ssh config that turns host keys off
                self.emit(Notice("warning", text, t.host.name))
        return True

    def _broken(self, k: int, exc: AgentError) -> None:
        host = self.inv.everyone[k]
        self.broken[k] = exc
        self.emit(HostState(host.name, k, "failed", exc.reason))
        if k < len(self.inv.hosts):  # a spare's is a finding of its own, never the run's
            self.failures.append(Failure(host.name, None, None, exc.reason, seen_at=time.time()))

    def _unreachable(self, k: int, reason: str) -> None:
        host = self.inv.everyone[k]
        if k not in self.unreachable:
            self.unreachable[k] = reason
            self.emit(HostState(host.name, k, "unreachable", reason))
            if k < len(self.inv.hosts):
                self.failures.append(Failure(host.name, None, None, reason, seen_at=time.time()))

    def swap_in(self, k: int, j: int, spare: str, attempt: int) -> None:
        """Node k's host was lost: the spare in fleet slot j takes its place from `attempt` on
        (the inventory and the fleet say so), and what the lost host failed is not the run's."""
        lost = self.inv.hosts[k].name
        self.inv = inventory.swap_in(self.inv, k, spare, attempt)
        self.fleet.swap(k, j, self.inv.hosts[k])
        self.unreachable.pop(k, None)
        self.broken.pop(k, None)
        self.failures = [f for f in self.failures if f.host != lost]

    # -- the checks -----------------------------------------------------------------------------

    async def check(self) -> ChecksDone:
        """Probe every host (its agent started first, if need be), then judge them together."""
        master_known = asyncio.Event()  # the master's address is where its sshd answered
        folder, mark = self.inv.job.checkpoint, None  # node 0's, where job.checkpoint is

        async def one(k: int) -> HostChecked:
            nonlocal mark
            host = self.inv.everyone[k]
            try:
                up = k not in self.unreachable and await self._agent(k)
                if k == 0 and up and folder is not None:  # before any other host looks
                    mark = await checkpoint.mark(self.fleet.ready(0), folder, self.workdir(host))
            finally:
                if k == 0:
                    master_known.set()
            await master_known.wait()
            master_addr = self.inv.job.master_addr or self.fleet.transports[0].address
            agent = self.fleet.ready(k) if up else None
            if k in self.broken:
                checked = probe.broken(host, self.broken[k].reason, self.broken[k].code)
            elif agent is None:
                checked = probe.unreachable(host, self.unreachable.get(k) or "not reachable")
            else:
                checked = await probe.probe(
                    agent,
                    self.inv.job,
                    master_addr,
                    workdir=self.workdir(host),
                    connect_s=self.fleet.took.get(k),
                    run_id=self.run_id,
                    warm=self.early(k) if k < len(self.inv.hosts) else None,  # a launch's node
                    ckpt=checkpoint.asked(folder, mark, k == 0),
                )
            if checked.gpus:  # those the job may take (its leases) of those it will see
                seen = checked.facts.get("visible_gpus", len(checked.gpus))
                self.gpu_counts[k] = min(seen, checked.facts.get("lease_gpus", seen))
            if version := flight.job_torch(checked.facts):
                self.torch[host.name] = version
            if k == 0 and checked.facts.get("port_auto"):
                self.master_port = checked.facts.get("port")
            if k >= len(self.inv.hosts):
                checked = judge.as_spare(checked)
            elif self.on_checked is not None:
                self.on_checked(k, checked)
            self.emit(checked)
            return checked

        everyone = range(len(self.inv.everyone))
        done = judge.done(await asyncio.gather(*(one(k) for k in everyone)))
        if mark is not None and folder is not None:
            node0 = self.inv.hosts[0]
            await checkpoint.unmark(self.fleet.ready(0), folder, self.workdir(node0), mark)
        for k in self.unreachable.keys() - range(len(self.inv.hosts)):
            del self.unreachable[k]  # a spare: named in its findings, never the run's
        for k in self.broken.keys() - range(len(self.inv.hosts)):
            del self.broken[k]
        self.emit(done)
        return done

    def early(self, k: int) -> dict[str, Any] | None:
        """Node k's spec as known before the checks end (protocol.EARLY): its supervisor is
        prepared meanwhile, all but its job. None where this is no launch's check, or where
        another start comes first on these agents (the deep check's), which would end it."""
        if self.run_id is None or not self.prepare:
            return None
        host = self.inv.hosts[k]
        box = host.container.spec() if host.container else None
        return {"run_id": self.run_id, "node": host.node_rank, "attempt": 0,
                "grace": self.inv.job.stop_grace, "container": box}  # fmt: skip

    def _checks_failed(self, done: ChecksDone) -> None:
        failed = [f for f in done.findings if f.level == "failure"]
        for f in failed:
            message = f"check failed ({f.check}): {f.message}"
            self.failures.append(Failure(f.host or "checks", None, None, message, seen_at=0.0))
        self.emit(
            Notice(
                "error",
                f"not starting: checks failed on {len({f.host for f in failed})} host(s) "
                "(--skip-checks launches anyway)",
            )
        )

    async def _count_gpus(self) -> None:
        """`auto` without the checks: each host's agent lists its GPUs, nothing else."""
        agents = [self.fleet.ready(k) for k in range(len(self.inv.hosts))]
        job = self.inv.job
        counts = await asyncio.gather(
            *(probe.count_visible(a, job) for a in agents if a is not None)
        )
        for agent, seen in zip([a for a in agents if a is not None], counts, strict=True):
            if seen is not None:
                self.gpu_counts[agent.transport.host.node_rank] = seen

    # -- the code -------------------------------------------------------------------------------

    async def _sync(self) -> bool:
        """job.sync: the local code pushed to every host's workdir first (remote/agents/sync.py)."""
        agents = [self.fleet.ready(k) for k in range(len(self.inv.hosts))]
        dests = [self.workdir(h) for h in self.inv.hosts]
        results = await sync.push(self.inv, agents, dests, self.emit)
        failed = [r for r in results if r.error]
        for r in failed:
            self.failures.append(Failure(r.host, None, None, r.text(), seen_at=0.0))
        if failed:
            names = ", ".join(r.host for r in failed)
            self.emit(Notice("error", f"not starting: the code could not be pushed to {names}"))
        return not failed

    def workdir(self, host: Host) -> str | None:
        """A local node without workdir runs beside the inventory, where its script is."""
        if host.workdir or host.transport != "local":
            return host.workdir
        return str(Path(self.inv.path).resolve().parent)
