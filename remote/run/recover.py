"""A lost node's place taken by a spare host (`job.restarts`, hosts with `spare: true`).

The run's hub (node 0's supervisor) decides when: once every node's job of an attempt has ended
and a node was lost, it says RESTART with the nodes to replace, and waits. Replacing needs a
login, so a launcher does it, the one attached (a detached run waits for the next `attach`):
for each lost node, the first spare that passes its checks (the code pushed first, with
`job.sync`) gets a supervisor of its own in that node's rank, so world size and ranks stay as
planned. It proves itself to the hub with a ticket of its own, which node 0 is told to expect
over this launcher's link; once it has joined, the hub restarts every node. A spare that fails
its checks is named and not used; with none left, the hub is told, and the run ends as it would
have without spares.

Hot spares: at the launch, each spare that passes its checks stands by (`stand_by`,
remote/host/standby.py): idle, holding no GPU, connected to the hub, given node k's spec for
every k it may take. With nobody attached, the hub swaps a lost or bad node for the first live
standby itself; one attached brings a spare as above, and where no standby is live the next
attach does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from typing import TYPE_CHECKING, Any

from ddptui.remote import inventory
from ddptui.remote.agents import sync
from ddptui.remote.agents.transport import HostError
from ddptui.remote.checks import probe
from ddptui.remote.events import Notice
from ddptui.remote.host import protocol
from ddptui.remote.inventory import Host
from ddptui.remote.run import plan as planner
from ddptui.remote.run.gang import Node
from ddptui.remote.store import runs

if TYPE_CHECKING:
    from ddptui.remote.run.nodemsg import Restart
    from ddptui.remote.run.runner import Run

DETACHED = (
    "no spare stands by: a lost host's place goes to a spare only while ddptui is attached (a "
    "spare needs a login): a detached run with a lost host waits for the next `ddptui attach`"
)


class Recovery:
    """Spares put in lost nodes' places, for one run, as its hub asks."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.tasks: list[asyncio.Future[None]] = []
        self.standing: asyncio.Future[None] | None = None  # the spares' standbys starting
        self.hot: list[str] = []  # the spares standing by (this launcher started them)
        self.asked: set[tuple[int, int]] = set()  # (node, attempt) seen to already
        self.refused: set[str] = set()  # spares that failed their checks: not tried again

    async def stand_by(self) -> None:
        """Each spare that passes its checks stands by, once node 0's hub listens."""
        run = self.run
        if not run.inv.job.restarts or len(run.inv.hosts) < 2:
            return
        await run.gang.hub_heard.wait()
        await asyncio.gather(*(self._stand_by(j, spare) for j, spare in self._candidates()))

    async def _stand_by(self, j: int, spare: Host) -> None:
        run = self.run
        why = await self._check(j, spare, 1)
        if why is None:
            try:
                agent = await run.fleet.agent(j, run.emit)
                await agent.request(protocol.STANDBY, self._standby(j, spare))
            except HostError as exc:
                why = exc.reason
        if why is not None:
            text = f"spare {spare.name} does not stand by ({why}): an attach may still bring it"
            run.emit(Notice("warning", text, host=spare.name))
            return
        self.hot.append(spare.name)
        text = f"spare {spare.name} stands by: it takes a lost or bad host's place, attached or not"
        run.emit(Notice("info", text, host=spare.name))

    def _standby(self, j: int, spare: Host) -> dict[str, Any]:
        """The standby's request: node k's spec as the spare in its place, for every k but 0."""
        run = self.run
        addrs = run.addresses()
        specs = {}
        for k in range(1, len(run.inv.hosts)):
            inv = inventory.swap_in(run.inv, k, spare.name, 0)
            plan = planner.build(
                inv, run_id=run.run_id, nprocs=run.nprocs_planned, extra_args=run.extra_args,
                addrs=[*addrs[:k], run.fleet.transports[j].address, *addrs[k + 1 :]],
                master_port=run.master_port,
            )  # fmt: skip
            specs[str(k)] = run.spec(plan.nodes[k], inv=inv)
        return {"run_id": run.run_id, "slot": j, "specs": specs, "secret": specs["1"]["secret"],
                "hub": [run.gang.master_addr, run.gang.hub_port],
                "link_timeout": run.inv.job.link_timeout}  # fmt: skip

    def start(self, restart: Restart) -> None:
        todo = [k for k in restart.replace if (k, restart.attempt) not in self.asked]
        self.asked.update((k, restart.attempt) for k in todo)
        if todo:
            self.tasks.append(asyncio.ensure_future(self._replace(todo, restart.attempt)))

    async def _replace(self, nodes: list[int], attempt: int) -> None:
        for k in nodes:
            if not await self._one(k, attempt):
                return

    async def _one(self, k: int, attempt: int) -> bool:
        run = self.run
        lost = run.inv.hosts[k]
        if lost.since == attempt:  # given a spare already, by a launcher that left before it ran
            if await self._check(k, lost, k) is None:
                await self._start(k, attempt, lost.name)
                return True
            lost = dataclasses.replace(lost, name=f"node {k}")
        state = "is bad for the run" if lost.name in run.bad else "was lost"
        run.emit(Notice("warning", f"{lost.name} {state}: a spare host takes node {k}'s place"))
        for j, spare in self._candidates():
            why = await self._check(j, spare, k)
            if run.gang.user_stop:  # stopped meanwhile: the hub ends the run, no spare needed
                return False
            if why is None:
                await self._take(k, j, spare, attempt)
                return True
            self.refused.add(spare.name)
            run.emit(Notice("warning", f"spare {spare.name} not used: {why}", host=spare.name))
        why = f"no spare host could take {lost.name}'s place"
        run.gang.say(0, f"{protocol.SAY_NO_SPARE} {why}")
        run.emit(Notice("error", f"{why}: the run ends"))
        return False

    def _candidates(self) -> list[tuple[int, Host]]:
        inv, n = self.run.inv, len(self.run.inv.hosts)
        return [
            (j, h)
            for j, h in enumerate(inv.everyone)
            if j >= n and h.name not in inv.retired and h.name not in self.refused
        ]

    async def _check(self, j: int, spare: Host, k: int) -> str | None:
        """Why the spare in fleet slot j cannot take node k's place; None: it can."""
        run = self.run
        job = run.inv.job
        try:
            agent = await run.fleet.agent(j, run.emit)
        except HostError as exc:
            return f"unreachable: {exc.reason}"
        workdir = run.preflight.workdir(spare)
        if job.sync is not None:
            alone = dataclasses.replace(run.inv, hosts=(spare,))
            (pushed,) = await sync.push(alone, [agent], [workdir], run.emit)
            if pushed.error:
                return pushed.text()
        checked = await probe.probe(
            agent, job, run.gang.master_addr, workdir=workdir, connect_s=run.fleet.took.get(j),
            warm=run.run_id,
        )  # fmt: skip
        failed = [f for f in checked.findings if f.level == "failure"]
        if failed:
            return f"check failed ({failed[0].check}): {failed[0].message}"
        planned = run.nprocs_planned[k] if k < len(run.nprocs_planned) else run.nprocs()[k]
        if job.nproc_per_node == "auto":
            sees = checked.facts.get("visible_gpus", len(checked.gpus)) or spare.gpus or 1
            if sees != planned:
                return f"the job would see {sees} GPU(s) there; node {k} runs {planned} ranks"
        return None

    async def _take(self, k: int, j: int, spare: Host, attempt: int) -> None:
        """The spare in slot j becomes node k from `attempt` on, then starts."""
        lost = self.run.inv.hosts[k]
        await self.run.gang.retire(k)
        self._swap(k, j, spare.name, attempt)
        await self._start(k, attempt, lost.name)

    def _swap(self, k: int, j: int, spare: str, attempt: int) -> None:
        """The spare in slot j is node k from `attempt` on (the run dir says so, for a later
        attach)."""
        run = self.run
        lost = run.inv.hosts[k]
        run.inv = run.preflight.inv = inventory.swap_in(run.inv, k, spare, attempt)
        run.fleet.swap(k, j, run.inv.hosts[k])
        run.preflight.forget(k, lost.name)
        runs.replaced(run.run_dir, k, spare, attempt)

    async def learn_swaps(self) -> None:
        """An attach: the hot spares node 0's hub put in nodes' places with nobody attached
        (its state says which), followed there as a launcher's spares are."""
        run = self.run
        try:
            agent = await run.fleet.agent(0, run.emit)
            got = await agent.request(protocol.STATUS, {"nodes": [[run.run_id, 0, 0]]})
        except HostError:
            return
        found: Any = got
        for key in ("runs", run.run_id, "0", "swapped"):  # what a host sends is data: checked
            found = found.get(key) if isinstance(found, dict) else None
        for node, said in sorted(found.items() if isinstance(found, dict) else ()):
            if not (str(node).isdigit() and isinstance(said, list) and len(said) == 2):
                continue
            k, (name, since) = int(node), said
            slot = next((j for j, h in self._candidates() if h.name == name), None)
            known = 0 < k < len(run.inv.hosts) and run.inv.hosts[k].name != name
            if known and slot is not None and isinstance(since, int):
                self._swap(k, slot, name, since)

    async def _start(self, k: int, attempt: int, lost: str) -> None:
        """Node k's supervisor on its spare, with a ticket node 0's hub is told to expect."""
        run, gang = self.run, self.run.gang
        host = run.inv.hosts[k]
        gang.stored.pop(k, None)
        if run.recorder is not None:
            run.recorder.new_stream(k, attempt)
        ticket = secrets.token_hex(16)
        gang.say(0, f"{protocol.SAY_REPLACE} {k} {ticket}")
        node = run.plan(run.nprocs_planned or run.nprocs()).nodes[k]
        # as the run is: a detached run's spare needs no launcher either
        hub = gang.links.get(0)
        detached = hub is not None and hub.hello.get("mode") == "detached"
        spec = {**run.spec(node, attempt=attempt, secret=ticket), "detached": detached}
        text = f"{host.name} takes {lost}'s place as node {k} from attempt {attempt + 1}"
        run.emit(Notice("info", text))
        gang.begin(Node(host.name, k, node.ranks, since=attempt), protocol.START, {"spec": spec})
