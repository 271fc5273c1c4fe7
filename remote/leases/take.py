"""A launch's GPU leases, launcher side: every node's GPUs on every host taken at once, or none
(remote/host/leaseop.py serves each host's part).

Each node's host is asked, on a channel of its own, to take the node's GPUs now (a launch's
checks ask each host as soon as it passed its own, while the others' go on: the launch then waits
only for the last hosts' answers, not for a round trip to all of them). If one cannot,
every host lets go of what it took: the launch is refused, naming who holds what, and nothing
starts. Told to wait (`--wait`, the dashboard's answer), it joins the queue instead: one key for
it on every host (above each host's highest: first come, first served, whatever the hosts'
clocks), and each host says what it waits for, then that it could take them; once every host
could, each is told to take them, and if one was beaten to it the others let go and it waits
on. Nobody holds part of what they need while waiting, and every launch waits in one order:
no two launches wanting the same hosts in different orders can deadlock. Taken, each host's
agent holds the lease until the node's supervisor takes it over at its start (the spec says
`handoff`); a channel ended early (Ctrl-C, a failed start) gives back what it held.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ddptui.remote.agents import ops
from ddptui.remote.agents.agent import Agent, Channel
from ddptui.remote.agents.fleet import Fleet
from ddptui.remote.agents.silence import Silence
from ddptui.remote.agents.transport import HostError
from ddptui.remote.events import Event, Failure, Notice
from ddptui.remote.host import protocol
from ddptui.remote.inventory import Host, Job
from ddptui.remote.leases import words

Emit = Callable[[Event], None]
Ask = Callable[[str], Awaitable[bool]]  # the dashboard: "wait for them?" answered
BEAT_S = 1.0  # how often a host's silence is looked at while its words are awaited


def allowed(host: Host, job: Job) -> dict[str, Any]:
    """The GPUs a node's job may take on its host (remote/host/lease.py: candidates): its pins,
    else what the inventory's CUDA_VISIBLE_DEVICES names (else the host's own), and what busy
    GPUs mean to it."""
    return {"pins": list(host.pins) or None, "cvd": host.env.get("CUDA_VISIBLE_DEVICES"),
            "busy": job.busy_gpus}  # fmt: skip


def want(run_id: str, host: Host, count: int, job: Job, node: int | None = None) -> dict[str, Any]:
    """What a node asks of its host: `count` GPUs among those it is allowed."""
    return {
        **allowed(host, job), "run_id": run_id, "count": count, "launcher": launcher(),
        "node": host.node_rank if node is None else node,
    }  # fmt: skip


def launcher() -> str:
    """`user@machine`: who launched, as `ddptui who` names it."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return f"{user}@{socket.gethostname()}"


class _Node:
    """One node's `gpu-lease` channel: its host's words, in order."""

    def __init__(self, name: str, agent: Agent, asked: dict[str, Any], silence: Silence) -> None:
        self.name, self.agent, self.silence, self.asked = name, agent, silence, asked
        self.words: asyncio.Queue[ops.Leasing] = asyncio.Queue()
        self.last = ops.Leasing("wait")
        self.channel: Channel = agent.open(protocol.GPU_LEASE, {"want": asked}, self._frame,
                                           self._end)  # fmt: skip

    def _frame(self, kind: bytes, msg: Any) -> None:
        if kind != b"j":
            return
        try:
            word = ops.read_leasing(msg)
        except (TypeError, ValueError, KeyError, AttributeError):
            word = ops.Leasing("error", error="its agent's lease answer is not understood")
        self.words.put_nowait(word)

    def _end(self, why: str | None) -> None:
        if self.last.kind != "handed":  # gone before its supervisor took it over
            self.words.put_nowait(ops.Leasing("error", error=why or "its lease channel ended"))

    def silent(self) -> ops.Leasing | None:
        """An error word once its host has said nothing for link_timeout (cut off)."""
        now = time.monotonic()
        if not self.silence.silent(self.agent.heard, now):
            return None
        quiet = now - self.agent.heard
        return ops.Leasing("error", error=f"not heard from for {quiet:.0f} s (cut off?)")

    async def next(self) -> ops.Leasing:
        """Its next word (an error one if its host falls silent first)."""
        while True:
            try:
                self.last = await asyncio.wait_for(self.words.get(), BEAT_S)
                return self.last
            except TimeoutError:
                if (word := self.silent()) is not None:
                    self.last = word
                    return word

    def say(self, **msg: Any) -> None:
        self.channel.send_json(msg)


class Leases:
    """One launch's leases: `take` them (all or none), then each node's spec says `handoff`."""

    def __init__(
        self, fleet: Fleet, emit: Emit, failures: list[Failure], silence: float = 60.0
    ) -> None:
        self.fleet, self.emit, self.failures = fleet, emit, failures
        self.silence = Silence(silence)  # a host silent this long is cut off (link_timeout)
        self.nodes: dict[int, _Node] = {}
        self.held: dict[int, ops.Leasing] = {}  # node → what its host took
        self.refused = False  # the GPUs were taken: the launch's status says so

    async def take(
        self, asked: Sequence[tuple[int, dict[str, Any]]], *, wait: float | None = None,
        ask: Ask | None = None, queued: Callable[[], None] | None = None,
    ) -> bool:  # fmt: skip
        """Every node's GPUs, or none; True when the launch may start. `wait`: seconds to wait
        in the queue (inf: no limit; None: refused at once unless `ask` says wait); `queued`:
        told once it waits there (what the start needs is made meanwhile)."""
        if not await self._open(asked):
            return False
        first = await self._all()
        if (broken := self._broken(first)) is not None:
            return self._refuse(broken)
        short = {k: w for k, w in first.items() if w.kind == "short"}
        if not short:
            return self._taken(first)
        shortage = words.Shortage({self._name(k): w for k, w in short.items()})
        if shortage.never or (wait is None and not (ask and await ask(shortage.refused()))):
            return self._refuse(shortage.refused())
        key = max(w.counter for w in first.values()) + 1
        for node in self._live():
            node.say(t="queue", key=key)
        if queued is not None:
            queued()
        deadline = time.monotonic() + (wait if wait is not None else float("inf"))
        try:
            return await asyncio.wait_for(self._queue(), deadline - time.monotonic())
        except TimeoutError:
            said = words.Shortage({n.name: n.last for n in self._live() if n.last.kind == "wait"})
            return self._refuse(f"gave up waiting after {words.age(wait or 0)}: " + (
                "; ".join(said.reasons()) or "its GPUs are still taken"))  # fmt: skip

    def ask_early(self, k: int, asked: dict[str, Any]) -> None:
        """Node k's host asked now, ahead of `take` (its checks answered while others' run):
        its answer waits there. `take` decides on it with the others' as if asked then; a
        launch refused meanwhile gives it back (close)."""
        agent = self.fleet.ready(k)
        if agent is not None and k not in self.nodes:
            self.nodes[k] = _Node(agent.name, agent, asked, self.silence)

    async def _open(self, asked: Sequence[tuple[int, dict[str, Any]]]) -> bool:
        for k, args in asked:
            node = self.nodes.get(k)
            if node is not None and node.asked == args and node.agent is self.fleet.ready(k):
                continue  # asked early, as it is asked now
            if node is not None:
                node.channel.end()  # asked for something else, or of an agent gone since
            try:
                agent = await self.fleet.agent(k, self.emit)
            except HostError as exc:
                return self._refuse(f"{exc.host} cannot lease its GPUs: {exc.reason}")
            self.nodes[k] = _Node(agent.name, agent, args, self.silence)
        return True

    async def _all(self) -> dict[int, ops.Leasing]:
        nodes = list(self.nodes.items())
        answers = await asyncio.gather(*(n.next() for _, n in nodes))
        return {k: w for (k, _), w in zip(nodes, answers, strict=True)}

    @property
    def leasing(self) -> set[int]:
        """The nodes whose hosts have GPUs to lease them (held, once taken)."""
        return {k for k, n in self.nodes.items() if n.last.kind not in ("none", "handed")}

    def _live(self) -> list[_Node]:
        """The nodes whose hosts have GPUs to lease."""
        return [n for n in self.nodes.values() if n.last.kind not in ("none", "handed")]

    async def _queue(self) -> bool:
        """In the queue until every host could take its node's GPUs, and took them."""
        said = ""
        while True:
            live = self._live()
            if (broken := self._broken({k: n.last for k, n in self.nodes.items()})) is not None:
                return self._refuse(broken)
            if all(n.last.kind == "ready" for n in live):
                for n in live:
                    n.say(t="take")
                got = await asyncio.gather(*(self._took(n) for n in live))
                if all(w.kind == "held" for w in got):
                    return self._taken({k: n.last for k, n in self.nodes.items()})
                for n in live:  # one was beaten to it: the others let go, and all wait on
                    self._let_go(n)
                continue
            text = words.Shortage({n.name: n.last for n in live if n.last.kind != "ready"})
            if text.waiting() != said:
                said = text.waiting()
                self.emit(Notice("info", said))
            await self._heard(live)

    async def _heard(self, live: list[_Node]) -> None:
        """Until a host says something; then every word come meanwhile, each host's latest
        kept (a take's answer that came late is let go: it is not all of them)."""
        getters = {asyncio.create_task(n.words.get()): n for n in live}
        done: set[asyncio.Task[ops.Leasing]] = set()
        pending = set(getters)
        while not done:
            done, pending = await asyncio.wait(
                getters, timeout=BEAT_S, return_when=asyncio.FIRST_COMPLETED
            )
            for n in live:
                n.last = n.silent() or n.last
            if any(n.last.kind == "error" for n in live):
                break
        for task in pending:
            task.cancel()  # a queue's get, cancelled, leaves its word in the queue
        await asyncio.gather(*pending, return_exceptions=True)
        for task in done:
            getters[task].last = task.result()
        for n in live:
            while not n.words.empty():
                n.last = n.words.get_nowait()
            self._let_go(n)

    async def _took(self, node: _Node) -> ops.Leasing:
        """A take's answer: held, or it must wait again (a word said before it is passed)."""
        while True:
            word = await node.next()
            if word.kind != "ready":
                return word

    @staticmethod
    def _let_go(node: _Node) -> None:
        if node.last.kind == "held":
            node.say(t="release")
            node.last = ops.Leasing("wait")

    def _broken(self, found: dict[int, ops.Leasing]) -> str | None:
        errors = [f"{self._name(k)}: {w.error}" for k, w in found.items() if w.kind == "error"]
        return "cannot lease the GPUs: " + "; ".join(errors) if errors else None

    def _taken(self, found: dict[int, ops.Leasing]) -> bool:
        self.held = {k: w for k, w in found.items() if w.kind == "held"}
        for k, w in found.items():
            if w.kind == "none" and w.error:  # the checks fail such a host: --skip-checks
                text = f"no GPU leased: its GPUs cannot be listed ({w.error})"
                self.emit(Notice("warning", text, host=self._name(k)))
        named = {self._name(k): w for k, w in self.held.items()}
        for text in words.dead(named):
            self.emit(Notice("warning", text))
        if self.held:
            self.emit(Notice("info", words.leased(named)))
        return True

    def _refuse(self, why: str) -> bool:
        self.refused = True
        self.failures.append(Failure("leases", None, None, why, seen_at=time.time()))
        self.emit(Notice("error", why))
        self.close()
        return False

    def _name(self, k: int) -> str:
        return self.nodes[k].name if k in self.nodes else f"node {k}"

    def close(self) -> None:
        """Every channel ended: what a host still holds for this launch (not yet its
        supervisor's) is given back, and it leaves the queue."""
        for node in self.nodes.values():
            with contextlib.suppress(Exception):
                node.channel.end()
