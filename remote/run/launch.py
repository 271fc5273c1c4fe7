"""Launching a run, step by step: every host's agent up and checked (remote/checks/preflight.py),
the deep check if asked, the ranks per node, node 0's port, the plan, each node's spec.
remote/run/runner.py takes these steps in turn, each one able to refuse the launch, then
follows what they started; a spare in a lost node's place is planned and specified here too
(remote/run/recover.py).

The deep check is a run of its own (remote/run/checkup.py), handed in as a step: launching
knows it refuses on a failure, not how the fabric is measured.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from ddptui.remote.agents import ops
from ddptui.remote.agents.fleet import Fleet
from ddptui.remote.agents.transport import HostError
from ddptui.remote.checks.judge import master_problem
from ddptui.remote.checks.preflight import Preflight
from ddptui.remote.events import DeepChecked, Event, Failure, HostChecked, Notice
from ddptui.remote.host import channel, protocol
from ddptui.remote.inventory import Inventory, swap_in
from ddptui.remote.leases import take as leases
from ddptui.remote.run.gang import Node, Start
from ddptui.remote.run.plan import NodePlan, Plan, build, node_spec
from ddptui.remote.stalls import flight
from ddptui.remote.store import runs

Emit = Callable[[Event], None]
DeepCheck = Callable[[], Awaitable[DeepChecked]]


class Launch:
    """One run's launch: the steps that start it, and what they decided (the port, the ranks
    per node) for a spare that comes later."""

    def __init__(
        self,
        preflight: Preflight,
        emit: Emit,
        *,
        run_id: str,
        run_dir: Path,
        extra_args: Sequence[str],
        secret: str,
        deep: DeepCheck | None = None,
        wait: float | None = None,
        ask: leases.Ask | None = None,
    ) -> None:
        self.preflight, self.emit = preflight, emit
        self.run_id, self.run_dir = run_id, run_dir
        self.extra_args = tuple(extra_args)
        self._secret = secret  # the run's: node 0's hub derives from it every peer's own key
        self.deep = deep  # the deep check before the start (checkup.py's deep_first)
        job = preflight.inv.job
        # the GPUs' leases (remote/leases/take.py): `wait` seconds in the queue at most (None:
        # refused at once, unless `ask`, the dashboard's question, says wait)
        self.leases = leases.Leases(preflight.fleet, emit, preflight.failures, job.link_timeout)
        self.wait, self.ask = wait, ask
        if preflight.checks and deep is None:  # the deep check's own run would find them held
            preflight.on_checked = self._lease_early
        self.master_port: int | None = job.master_port if job.master_port != "auto" else None
        self.nprocs_planned: list[int] = []  # what a spare is planned with: as the run began
        # a queued launch's starts, made while it waits: (the nodes assumed leased, plan, starts)
        self._staged: tuple[frozenset[int], Plan, list[Start]] | None = None

    @property
    def inv(self) -> Inventory:
        return self.preflight.inv

    @property
    def fleet(self) -> Fleet:
        return self.preflight.fleet

    # -- the steps, in order (each False: the launch is refused, and says why) ------------------

    async def checks(self) -> bool:
        return await self.preflight.run()

    async def deep_check(self) -> bool:
        """The fabric measured first; a failure refuses the launch, as a failed check does."""
        if self.deep is None:
            return True
        done = await self.deep()
        failed = [f for f in done.findings if f.level == "failure"]
        for f in failed:
            message = f"deep check failed ({f.check}): {f.message}"
            self.preflight.failures.append(
                Failure(f.host or "deep check", None, None, message, seen_at=0.0)
            )
        if failed:
            self.emit(Notice("error", "not starting: the deep check failed"))
        return not failed

    async def port(self) -> bool:
        """Node 0's address usable by every peer, and a port on it (job.master_port: auto)."""
        inv = self.inv
        addrs = self.addresses()
        why = master_problem(inv.job.master_addr or addrs[0], addrs)
        if why is None and self.master_port is None:
            self.master_port = self.preflight.master_port or await self._pick_port()
            why = None if self.master_port else "node 0 could not pick a free port (master_port)"
        if why is not None:
            self.preflight.failures.append(
                Failure(inv.master.name, None, None, why, seen_at=time.time())
            )
            self.emit(Notice("error", f"not starting: {why}"))
        return why is None

    def ranks(self) -> list[int]:
        """Each node's processes, as the checks found them (nproc_per_node: auto, said)."""
        inv, nprocs = self.inv, self.nprocs()
        if inv.job.nproc_per_node == "auto":
            per_host = ", ".join(f"{n} on {h.name}" for n, h in zip(nprocs, inv.hosts, strict=True))
            self.emit(Notice("info", f"nproc_per_node auto: {per_host} (world size {sum(nprocs)})"))
        return nprocs

    async def lease(self, nprocs: list[int]) -> bool:
        """Every node's GPUs on every host, or none (held, or busy: the launch is refused, or
        waits in the queue): each node's host holds them for its supervisor. Those asked as
        each host passed its checks (`_lease_early`) are only awaited here."""
        asked = [
            (k, leases.want(self.run_id, host, n, self.inv.job))
            for k, (host, n) in enumerate(zip(self.inv.hosts, nprocs, strict=True))
        ]
        return await self.leases.take(asked, wait=self.wait, ask=self.ask,
                                      queued=lambda: self._stage(nprocs))  # fmt: skip

    def _lease_early(self, k: int, checked: HostChecked) -> None:
        """Host k passed its own checks: its node's GPUs asked for now, while the slower hosts
        are checked (the lease then costs the launch the last hosts' answers, not a round trip
        to every host). A host its checks fail is not asked: the launch is refused anyway."""
        if not any(f.level == "failure" for f in checked.findings):
            host = self.inv.hosts[k]
            self.leases.ask_early(k, leases.want(self.run_id, host, self.nprocs()[k], self.inv.job))

    def start(self, nprocs: list[int]) -> tuple[Plan, list[Start]]:
        """The plan, noted in the run dir, and each node's start (made while the launch
        waited in the queue, where its hosts hold what it assumed)."""
        staged, self._staged = self._staged, None
        held = frozenset(self.leases.held)
        planned, starts = staged[1:] if staged and staged[0] == held else self._starts(nprocs, held)
        for text in planned.notices:
            self.emit(Notice("warning", text))
        self.nprocs_planned = nprocs
        runs.write_info(
            self.run_dir, master_addr=planned.master_addr, world_size=planned.world_size,
            master_port=self.master_port, nprocs=nprocs, extra_args=list(self.extra_args),
        )  # fmt: skip
        return planned, starts

    def _stage(self, nprocs: list[int]) -> None:
        """Queued: every node's start made now, as if the hosts it waits on held their GPUs
        already, so that the GPUs freed, only its hosts are told (at 128 hosts, making them
        is the launcher's own work of a second or so, in the start's way on a busy machine)."""
        held = frozenset(self.leases.leasing)
        self._staged = (held, *self._starts(nprocs, held))

    def _starts(self, nprocs: list[int], held: frozenset[int]) -> tuple[Plan, list[Start]]:
        planned = self.plan(nprocs)
        starts = [
            (
                Node(n.host.name, n.node_rank, n.ranks),
                protocol.START,
                {"spec": self.spec(n, planned.master_addr, held=held)},
            )
            for n in planned.nodes
        ]
        return planned, starts

    # -- what the steps decided ---------------------------------------------------------------

    def resume(self, info: dict[str, Any]) -> None:
        """A run started earlier (attach): what its launch decided, from its run.json."""
        self.nprocs_planned = [int(n) for n in info.get("nprocs") or ()]
        self.extra_args = tuple(str(a) for a in info.get("extra_args") or ())
        port = info.get("master_port")
        self.master_port = port if isinstance(port, int) else self.master_port

    def nprocs(self) -> list[int]:
        return self.preflight.nprocs()

    def node_plan(self, k: int) -> NodePlan:
        """Node k as the run was planned (a spare takes its place so)."""
        return self.plan(self.nprocs_planned or self.nprocs()).nodes[k]

    def addresses(self) -> list[str]:
        """Where the peers reach each node's host."""
        return [t.address for t in self.fleet.transports[: len(self.inv.hosts)]]

    def plan(self, nprocs: Sequence[int]) -> Plan:
        return build(
            self.inv, run_id=self.run_id, nprocs=nprocs, extra_args=self.extra_args,
            addrs=self.addresses(), master_port=self.master_port,
        )  # fmt: skip

    def spec(
        self,
        node: NodePlan,
        master_addr: str,
        attempt: int = 0,
        secret: str = "",
        inv: Inventory | None = None,
        held: frozenset[int] | None = None,
    ) -> protocol.Spec:
        """Node's spec, with the key it proves to the hub (its own: remote/host/identity.py); a
        spare joins at `attempt`, proving `secret` (its ticket, its standby's key for node);
        inv: the hosts as a hot spare in node's place would have them (else the run's).
        held: the launch's nodes whose GPUs' lease their hosts' agents hold for them (handed
        over at the start; no lease for the others), else it takes its own (a spare's)."""
        inv = inv or self.inv
        k = node.node_rank
        nprocs = self.nprocs_planned or self.nprocs()
        asked = leases.want(self.run_id, node.host, nprocs[k], inv.job, k)
        lease = asked if held is None else {**asked, "handoff": True} if k in held else None
        return node_spec(
            inv, self.run_id, node, master_addr,
            env=flight.for_torch(node.env, self.preflight.torch.get(node.host.name)),
            workdir=self.preflight.workdir(node.host), secret=secret or self.key(node.node_rank),
            attempt=attempt, lease=lease,
        )  # fmt: skip

    def key(self, k: int) -> str:
        """What node (or standby slot) k proves to the hub: node 0, the hub, holds the run's
        secret; every other peer a key of its own, which proves no other's."""
        return self._secret if k == 0 else channel.node_key(self._secret, k)

    def standby(self, j: int, spare: str, master_addr: str, hub_port: int | None) -> dict[str, Any]:
        """A hot spare's standby (fleet slot j), with its own key: node k's spec as the spare in
        its place, for every k but 0, each with the key the hub takes once it chose j for k,
        and where the hub listens."""
        addrs = self.addresses()
        specs = {}
        for k in range(1, len(self.inv.hosts)):
            inv = swap_in(self.inv, k, spare, 0)
            planned = build(
                inv, run_id=self.run_id, nprocs=self.nprocs_planned, extra_args=self.extra_args,
                addrs=[*addrs[:k], self.fleet.transports[j].address, *addrs[k + 1 :]],
                master_port=self.master_port,
            )  # fmt: skip
            as_k = channel.spare_key(self.key(j), k)
            specs[str(k)] = self.spec(planned.nodes[k], master_addr, secret=as_k, inv=inv)
        link_timeout = self.inv.job.link_timeout
        return {"run_id": self.run_id, "slot": j, "specs": specs, "secret": self.key(j),
                "hub": [master_addr, hub_port], "link_timeout": link_timeout}  # fmt: skip

    async def _pick_port(self) -> int | None:
        """job.master_port: auto without the checks: node 0's agent picks one."""
        try:
            agent = await self.fleet.agent(0, self.emit)
            return await ops.port(agent)
        except HostError:
            return None

    def swap_in(self, k: int, j: int, spare: str, attempt: int) -> None:
        """The spare in fleet slot j becomes node k from `attempt` on: the inventory, the
        fleet's slots and the run dir say so; what the lost host failed is not the run's."""
        lost = self.inv.hosts[k].name
        self.preflight.swap_in(k, j, spare, attempt)
        runs.replaced(self.run_dir, k, spare, attempt, lost)
