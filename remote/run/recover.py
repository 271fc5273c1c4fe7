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
from collections.abc import Callable
from typing import Any

from ddptui.remote.agents import ops, sync
from ddptui.remote.agents.transport import HostError
from ddptui.remote.checks import probe
from ddptui.remote.events import Notice
from ddptui.remote.host import protocol
from ddptui.remote.inventory import Host
from ddptui.remote.run.gang import Gang, Node
from ddptui.remote.run.launch import Emit, Launch
from ddptui.remote.run.nodemsg import Restart

RETIRE_S = 15.0  # beyond its grace, for a bad host's supervisor to stop its job and say so

DETACHED = (
    "no spare stands by: a lost host's place goes to a spare only while ddptui is attached (a "
    "spare needs a login): a detached run with a lost host waits for the next `ddptui attach`"
)


class Recovery:
    """Spares put in lost nodes' places, for one run, as its hub asks."""

    def __init__(
        self,
        launch: Launch,
        gang: Gang,
        emit: Emit,
        new_stream: Callable[[int, int], None],
        bad: dict[str, str],
    ) -> None:
        self.launch, self.gang, self.emit = launch, gang, emit
        self.new_stream = new_stream  # node k's logs go on from a spare's stream at attempt n
        self.bad = bad  # the run's: host -> why its hub will not use it again
        self.tasks: list[asyncio.Future[None]] = []
        self.standing: asyncio.Future[None] | None = None  # the spares' standbys starting
        self.hot: list[str] = []  # the spares standing by (this launcher started them)
        self.asked: set[tuple[int, int]] = set()  # (node, attempt) seen to already
        self.refused: set[str] = set()  # spares that failed their checks: not tried again

    async def stand_by(self) -> None:
        """Each spare that passes its checks stands by, once node 0's hub listens."""
        inv = self.launch.inv
        if not inv.job.restarts or len(inv.hosts) < 2:
            return
        await self.gang.hub.heard.wait()
        await asyncio.gather(*(self._stand_by(j, spare) for j, spare in self._candidates()))

    async def _stand_by(self, j: int, spare: Host) -> None:
        launch = self.launch
        why = await self._check(j, spare, 1)
        if why is None:
            try:
                agent = await launch.fleet.agent(j, self.emit)
                hub = (self.gang.hub.addr, self.gang.hub.port)
                await ops.standby(agent, launch.standby(j, spare.name, *hub))
            except HostError as exc:
                why = exc.reason
        if why is not None:
            text = f"spare {spare.name} does not stand by ({why}): an attach may still bring it"
            self.emit(Notice("warning", text, host=spare.name))
            return
        self.hot.append(spare.name)
        text = f"spare {spare.name} stands by: it takes a lost or bad host's place, attached or not"
        self.emit(Notice("info", text, host=spare.name))

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
        lost = self.launch.inv.hosts[k]
        if lost.since == attempt:  # given a spare already, by a launcher that left before it ran
            if await self._check(k, lost, k) is None:
                await self._start(k, attempt, lost.name)
                return True
            lost = dataclasses.replace(lost, name=f"node {k}")
        state = "is bad for the run" if lost.name in self.bad else "was lost"
        self.emit(Notice("warning", f"{lost.name} {state}: a spare host takes node {k}'s place"))
        for j, spare in self._candidates():
            why = await self._check(j, spare, k)
            if self.gang.user_stop:  # stopped meanwhile: the hub ends the run, no spare needed
                return False
            if why is None:
                await self._take(k, j, spare, attempt)
                return True
            self.refused.add(spare.name)
            self.emit(Notice("warning", f"spare {spare.name} not used: {why}", host=spare.name))
        why = f"no spare host could take {lost.name}'s place"
        self.gang.say(0, protocol.say(protocol.SAY_NO_SPARE, why))
        self.emit(Notice("error", f"{why}: the run ends"))
        return False

    def _candidates(self) -> list[tuple[int, Host]]:
        inv = self.launch.inv
        n = len(inv.hosts)
        return [
            (j, h)
            for j, h in enumerate(inv.everyone)
            if j >= n and h.name not in inv.retired and h.name not in self.refused
        ]

    async def _check(self, j: int, spare: Host, k: int) -> str | None:
        """Why the spare in fleet slot j cannot take node k's place; None: it can."""
        launch = self.launch
        inv, fleet, job = launch.inv, launch.fleet, launch.inv.job
        try:
            agent = await fleet.agent(j, self.emit)
        except HostError as exc:
            return f"unreachable: {exc.reason}"
        workdir = launch.preflight.workdir(spare)
        if job.sync is not None:
            alone = dataclasses.replace(inv, hosts=(spare,))
            (pushed,) = await sync.push(alone, [agent], [workdir], self.emit)
            if pushed.error:
                return pushed.text()
        checked = await probe.probe(
            agent, job, self.gang.hub.addr, workdir=workdir, connect_s=fleet.took.get(j),
            warm=launch.run_id,
        )  # fmt: skip
        failed = [f for f in checked.findings if f.level == "failure"]
        if failed:
            return f"check failed ({failed[0].check}): {failed[0].message}"
        nprocs = launch.nprocs_planned
        planned = nprocs[k] if k < len(nprocs) else launch.nprocs()[k]
        if job.nproc_per_node == "auto":
            sees = checked.facts.get("visible_gpus", len(checked.gpus)) or spare.gpus or 1
            if sees != planned:
                return f"the job would see {sees} GPU(s) there; node {k} runs {planned} ranks"
        return None

    async def _take(self, k: int, j: int, spare: Host, attempt: int) -> None:
        """The spare in slot j becomes node k from `attempt` on (the run dir says so, for a
        later attach), then starts."""
        lost = self.launch.inv.hosts[k]
        await self.gang.retire(k, wait=self.gang.grace + RETIRE_S)
        self.launch.swap_in(k, j, spare.name, attempt)
        await self._start(k, attempt, lost.name)

    async def learn_swaps(self) -> None:
        """An attach: the hot spares node 0's hub put in nodes' places with nobody attached
        (its state says which), followed there as a launcher's spares are."""
        launch = self.launch
        try:
            agent = await launch.fleet.agent(0, self.emit)
            found = await ops.status(agent, [(launch.run_id, 0, 0)])
        except HostError:
            return
        state: Any = (found.get(launch.run_id) or {}).get(0) or {}
        swapped = state.get("swapped") if isinstance(state, dict) else None
        for node, said in sorted(swapped.items() if isinstance(swapped, dict) else ()):
            if not (str(node).isdigit() and isinstance(said, list) and len(said) == 2):
                continue  # what a host sends is data: checked
            k, (name, since) = int(node), said
            slot = next((j for j, h in self._candidates() if h.name == name), None)
            known = 0 < k < len(launch.inv.hosts) and launch.inv.hosts[k].name != name
            if known and slot is not None and isinstance(since, int):
                launch.swap_in(k, slot, name, since)

    async def _start(self, k: int, attempt: int, lost: str) -> None:
        """Node k's supervisor on its spare, with a ticket node 0's hub is told to expect."""
        gang = self.gang
        host = self.launch.inv.hosts[k]
        self.new_stream(k, attempt)
        ticket = secrets.token_hex(16)
        gang.say(0, protocol.say(protocol.SAY_REPLACE, k, ticket))
        node = self.launch.node_plan(k)
        # as the run is: a detached run's spare needs no launcher either
        hub = gang.links.get(0)
        detached = hub is not None and hub.hello.get("mode") == "detached"
        spec = self.launch.spec(node, gang.hub.addr, attempt=attempt, secret=ticket)
        text = f"{host.name} takes {lost}'s place as node {k} from attempt {attempt + 1}"
        self.emit(Notice("info", text))
        node_start = Node(host.name, k, node.ranks, since=attempt)
        gang.begin(node_start, protocol.START, {"spec": {**spec, "detached": detached}})
