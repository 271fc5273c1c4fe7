"""Every node's supervisor, followed to the end: lines in, stops out, leases both ways.

One NodeLink per node (remote/agents/link.py) on its host's agent (remote/agents/fleet.py). A stream
that ends early is taken up again where it stopped, on the same agent or, if the host's link went,
on a new one; a host not heard from for `link_timeout` is lost, which fails the run and stops the
others. A node that fails stops the rest (the supervisors also tell each other through the run's
hub, so this holds with nobody attached). `detach()` leaves the run to its supervisors. What each
ending means for the run is remote/run/verdict.py's to say. With job.restarts a node's stream goes
on across attempts: each attempt's endings are judged apart (verdict.Attempts), and node 0's hub
says when the job starts again and which lost nodes a spare must take (remote/run/recover.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from ddptui.remote.agents import ops
from ddptui.remote.agents.agent import Channel
from ddptui.remote.agents.fleet import Fleet
from ddptui.remote.agents.link import Item, NodeLink, Record
from ddptui.remote.agents.silence import Silence
from ddptui.remote.agents.transport import HostError
from ddptui.remote.events import (
    Alert,
    BadHost,
    CheckpointSaved,
    Event,
    Failure,
    HostState,
    LogBatch,
    NodeExited,
    NodeRanks,
    NodeStarted,
    Notice,
    RunRestarting,
    StepsLost,
    Stopping,
    Stream,
)
from ddptui.remote.host import protocol
from ddptui.remote.run import nodemsg
from ddptui.remote.run.failures import FailureTracker
from ddptui.remote.run.hubview import HubView
from ddptui.remote.run.progress import ProgressReader
from ddptui.remote.run.ranktag import tagged, untag
from ddptui.remote.run.verdict import Attempts, Verdict

STREAMS: dict[bytes, Stream] = {b"1": "stdout", b"2": "stderr"}


@dataclass
class Node:
    """What the launcher knows of one node's part of the run."""

    name: str
    node_rank: int
    ranks: tuple[int, ...] = ()
    since: int = 0  # the attempt its supervisor started at (a spare: the one it joined)
    attempt: int = 0  # the one it runs (or ran last)
    started: bool = False
    end: nodemsg.Exit | nodemsg.StartError | None = None  # its supervisor's last word
    at: float = 0.0  # host clock of that word
    stopped_at: float | None = None  # host clock of its word that it was told to stop
    concluded: bool = False  # its ending of `attempt` is told (NodeExited)
    stored: int = 0  # its spool's offset the run dir's logs hold already (shown, not stored)
    link: NodeLink | None = None  # its stream, once followed
    task: asyncio.Future[None] | None = None  # following it, to its end
    hub_told: Channel | None = None  # the stream told where node 0's hub listens


Start = tuple[Node, str, dict[str, Any]]  # a node, the op that starts it, its arguments


@dataclass
class Gang:
    """The run's nodes, each followed to its end; each node's own state is its Node's."""

    run_id: str
    fleet: Fleet
    emit: Callable[[Event], None]
    silence: Silence  # when a host is lost, and what its stream's end means
    grace: float
    names: tuple[str, ...] = ()  # every node's host, as the run began
    tracker: FailureTracker = field(default_factory=FailureTracker)
    progress: ProgressReader | None = None  # the training's progress, read from the lines
    replayed_progress: bool = True  # False: an attach's replay is not read for it (seeded)
    attempts: Attempts = field(default_factory=Attempts)
    detached: bool = False  # this launcher let the run go (detached it, or left it as it was)
    viewer: bool = False  # it only watches: it says nothing that changes the run (NodeLink.view)
    user_stop: bool = False  # a user's stop: never followed by a restart
    stop_said: bool = False  # a stop that ends the run was said (Stopping): once, whoever's
    nodes: dict[int, Node] = field(default_factory=dict)  # node rank → the node in that place
    # Node 0's hub said a spare must take a lost node's place: told to on_replace once what
    # node 0 spooled is read (an attach replays old words first).
    on_replace: Callable[[nodemsg.Restart], None] | None = None
    hub: HubView = field(default_factory=HubView)  # node 0's hub, as heard
    running: asyncio.Event = field(default_factory=asyncio.Event)  # every node has started
    retired: list[dict[str, Any]] = field(default_factory=list)  # unread() of retired nodes
    _sweeps: list[asyncio.Future[None]] = field(default_factory=list)

    @property
    def links(self) -> dict[int, NodeLink]:
        """Each node's stream, by node rank."""
        return {k: n.link for k, n in self.nodes.items() if n.link is not None}

    @property
    def tasks(self) -> list[asyncio.Future[None]]:
        """Each node followed."""
        return [n.task for n in self.nodes.values() if n.task is not None]

    @property
    def hub_port(self) -> int | None:
        return self.hub.port

    @property
    def verdict(self) -> Verdict:
        """The current attempt's."""
        return self.attempts.verdict

    @property
    def cause(self) -> str | None:
        return "user" if self.user_stop else self.verdict.cause

    # -- asking ---------------------------------------------------------------------------------

    def stop(self, cause: str = "user") -> bool:
        """Stop every node (TERM, grace, KILL on each host). Safe to call more than once:
        True the first time. A user's stop ends the run; a failure's, this attempt (the hub
        decides what follows)."""
        first = self.verdict.stop(cause, time.time())
        self.user_stop = self.user_stop or cause == "user"
        for link in self.links.values():
            link.say(self._stop_line(cause))
        return first

    def say_stopping(self, said: Stopping) -> None:
        """A stop that ends the run, said once: this launcher's own as it sends TERM, else the
        hosts' word of it (another launcher's stop, the lease), so every viewer counts down."""
        if not self.stop_said:
            self.stop_said = True
            self.emit(said)

    def _heard_stop(self, msg: nodemsg.Stopping, at: float, replayed: bool) -> None:
        """A supervisor sent its ranks TERM: a halt's (a user's stop, the lease) is said with
        its grace; one heard in a replay, only while KILL is still to come."""
        if msg.by not in protocol.HALT_BY.values() or msg.grace is None:
            return  # a failure's stop: the attempt's, said by its failure
        left = max(0.0, msg.grace - (time.time() - at)) if replayed else None
        if left is None or left > 0:
            self.say_stopping(Stopping(msg.grace, msg.checkpoint, left))

    def _stop_line(self, cause: str) -> str:
        if cause == "user":
            return protocol.SAY_STOP
        return protocol.say(protocol.SAY_STOP, protocol.SAY_STOP_FAILURE, self.attempts.current)

    def say(self, k: int, line: str) -> None:
        """A word to node k's supervisor (node 0's: the run's hub)."""
        node = self.nodes.get(k)
        if node is not None and node.link is not None:
            node.link.say(line)

    def detach(self) -> None:
        """Leave the run to its supervisors: no launcher lease any more; they end it alone.
        A viewer's detach is a leave: the run stays as it was."""
        for link in self.links.values():
            link.say(protocol.SAY_DETACH)
        self.leave()

    def leave(self) -> None:
        """This launcher goes, saying nothing: the run stays as it is, attached (to whichever
        launcher's lease) or detached."""
        self.detached = True
        for link in self.links.values():
            link.close()  # the supervisor lets this viewer go; the stream ends

    # -- following ------------------------------------------------------------------------------

    def start(
        self,
        starts: Sequence[Start],
        master_addr: str,
        *,
        seeded: bool = False,
    ) -> None:
        """Follow every node from its start (or attach): the peers reach node 0's hub at
        master_addr; `seeded`: the progress is known, an attach's replay is not read for it."""
        self.hub.addr = master_addr
        self.replayed_progress = not seeded
        for node, op, args in starts:
            self.begin(node, op, args)

    def begin(self, node: Node, op: str, args: dict[str, Any]) -> None:
        """Follow a node from now on (start or attach), in its node rank's place: `wait`
        waits for it too."""
        self.nodes[node.node_rank] = node
        node.link = NodeLink(self.run_id, node.node_rank, view=self.viewer)
        node.task = asyncio.ensure_future(self.follow(node, node.link, op, args))

    async def wait(self) -> None:
        """Until every node followed (those begun meanwhile too) is over."""
        while pending := [t for t in self.tasks if not t.done()]:
            await asyncio.wait(pending)
        await asyncio.gather(*self.tasks)

    async def follow(self, node: Node, link: NodeLink, op: str, args: dict[str, Any]) -> None:
        """Open the node's stream (start or attach) and follow it to its end."""
        k = node.node_rank
        for text in self._agent_noise(k):  # what its login printed: the node's own output
            self.emit(LogBatch(node.name, k, "stdout", ((None, text),)))
        while True:
            why = await self._stream(node, link, op, args)
            if link.ended or self.detached or self._no_supervisor(node):
                break
            if not await self._reconnect(node, link, why):
                break
            op, args = protocol.ATTACH, {"run_id": self.run_id, "node": k, "since": node.since}
        if not node.concluded:
            self._conclude(node, link, why)

    def _no_supervisor(self, node: Node) -> bool:
        """Its supervisor could not be started (the agent said why): nothing to attach to."""
        return isinstance(node.end, nodemsg.StartError) and not node.concluded

    async def retire(self, k: int, wait: float = 0.0) -> None:
        """Node k's host is out for good (a spare takes its place): stop following it. Where
        it is still heard (a bad host: its supervisor stops its job and leaves), its stream is
        first read to its end, `wait` seconds at most: its last lines and its own word on its
        end, which a give-up would drop and call it lost."""
        node = self.nodes.get(k)
        task, link = (node.task, node.link) if node is not None else (None, None)
        if wait and task is not None and link is not None and not link.lost:
            await asyncio.wait([task], timeout=wait)
        if link is not None:
            link.give_up()
            if node is not None:
                self.retired += self._unread(node, link)
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if node is not None and link is not None and not node.concluded:
            self._conclude(node, link, "")

    def unread(self) -> list[dict[str, Any]]:
        """The streams given up on before their end (a host cut off past the lease): where the
        run's logs stop in each one's spool. What the host printed after is read later, once
        it can be reached (remote/run/late.py)."""
        if self.detached:  # an attach reads them all
            return []
        found = [e for n in self.nodes.values() if n.link for e in self._unread(n, n.link)]
        return self.retired + found

    def _unread(self, node: Node, link: NodeLink) -> list[dict[str, Any]]:
        if link.ended or not link.lost:
            return []
        return [{"node": node.node_rank, "since": node.since, "host": node.name,
                 "offset": link.offset}]  # fmt: skip

    def _agent_noise(self, k: int) -> list[str]:
        agent = self.fleet.ready(k)
        return list(agent.noise) if agent is not None else []

    async def _stream(self, node: Node, link: NodeLink, op: str, args: dict[str, Any]) -> str:
        """One channel of the node's stream, to its end; why it ended ("" if by the host)."""
        k = node.node_rank
        done: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()

        def ended(why: str | None) -> None:
            if not done.done():
                done.set_result(why)

        try:
            agent = await self.fleet.agent(k, self.emit)
        except HostError as exc:
            return exc.reason
        link.open(agent, op, args, lambda items: self._items(node, link, items), ended)
        if self.user_stop:
            link.say(protocol.SAY_STOP)
        elif self.verdict.cause and node.started and node.attempt == self.attempts.current:
            link.say(self._stop_line("failure"))
        self._tell_hub(node)
        return await done or ""

    async def keep_leases(self) -> None:
        """Ping every supervisor; a host silent for link_timeout is lost (ends by cancel).

        If the launcher itself was not running (its clock jumped: a laptop asleep, a SIGSTOP),
        the silence is its own: what the hosts sent meanwhile is read before anyone is judged."""
        last = time.monotonic()
        while True:
            await asyncio.sleep(self.silence.beat)
            now = time.monotonic()
            if (slept := self.silence.slept(last, now)) is not None:
                self.emit(Notice("warning", slept))
            last = now
            for k, link in self.links.items():
                if link.ended or link.lost or link.channel is None:
                    continue
                link.say(protocol.SAY_PING)
                if self.silence.silent(link.heard, now):
                    link.give_up()
                    agent = self.fleet.agents.get(k)
                    if agent is not None:
                        agent.drop()  # ends the stream: the link is dead

    def allocation_ended(self, why: str) -> None:
        """The nodes are gone with their allocation (a Slurm job that ended under the run):
        every stream still open ends now, `why` its node's end, not a wait for the lease."""
        self.silence.ended_by = why
        for k, link in self.links.items():
            if not link.ended and not link.lost:
                link.give_up()
                agent = self.fleet.agents.get(k)
                if agent is not None:
                    agent.drop()

    @property
    def reason(self) -> str:
        """Why a run ended lost (the hosts' lease)."""
        return self.silence.reason(self.verdict.lease)

    async def _reconnect(self, node: Node, link: NodeLink, why: str) -> bool:
        """The stream again, resumed where it stopped; False: given up (lost, or detached)."""
        k, name = node.node_rank, node.name
        gone = link.heard  # the last word from the host: the outage began after it
        agent = self.fleet.ready(k)
        if agent is not None and not why:
            return True  # the agent is fine; its supervisor's stream ended early: attach again
        self.emit(HostState(name, k, "disconnected", "reconnecting"))
        self.emit(Notice("warning", self.silence.reconnecting, host=name))
        delay = 0.5
        while not link.lost and not self.detached:
            try:
                if not await _unless(link.given_up, self.fleet.reconnect(k, self.emit)):
                    break  # lost meanwhile: no login attempt is waited out
            except HostError:
                if self.silence.silent(link.heard, time.monotonic()):
                    link.give_up()
                    break
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            took = time.monotonic() - gone
            self.emit(
                Notice("info", f"reconnected: the link was silent for {took:.1f} s", host=name)
            )
            self.emit(HostState(name, k, "running", _ranks_text(node.ranks)))
            return True
        return False

    def _items(self, node: Node, link: NodeLink, items: list[Item]) -> None:
        for item in items:
            if isinstance(item, Record):
                if item.kind == b"m":
                    self._message(node, link, nodemsg.parse(item.message()), item.at)
                else:
                    text = item.data.decode("utf-8", "surrogateescape")
                    stored = item.end <= node.stored
                    self._lines(node, STREAMS[item.kind], text, item.at, link.replaying, stored)
            else:
                msg = nodemsg.parse(item)
                if isinstance(msg, nodemsg.StartError):  # the agent's: no supervisor
                    node.end, node.at = msg, time.time()
                elif isinstance(msg, nodemsg.Trimmed) and (unread := self._missed(node, msg)):
                    self.emit(
                        Notice(
                            "warning",
                            f"{unread} bytes of output were trimmed on the host before ddptui "
                            "could read them (job.spool_max_mb)",
                            host=node.name,
                        )
                    )
        if node.node_rank == 0 and self.hub.restart is not None and link.caught_up:
            restart, self.hub.restart = self.hub.restart, None
            if self.on_replace is not None and not (self.user_stop or self.viewer):
                self.on_replace(restart)

    def _missed(self, node: Node, msg: nodemsg.Trimmed) -> int:
        """Of the bytes a replay asked for and the host had trimmed, those the run dir's logs
        do not hold already (an attach replays from the first byte, to show it)."""
        if not msg.at:
            return msg.missed
        return max(0, min(msg.missed, msg.at - node.stored))

    def _message(self, node: Node, link: NodeLink, msg: nodemsg.Message | None, at: float) -> None:
        k, name = node.node_rank, node.name
        if isinstance(msg, nodemsg.Redrawn):
            if self.progress is not None:
                self.progress.feed(tagged(msg.rank, msg.text), node.attempt, at, 1, k)
            return
        if isinstance(msg, nodemsg.Started):
            self.attempts.seen(msg.attempt, at)
            if msg.attempt > node.attempt:  # its lines of the last attempt tell nothing now
                self.tracker.forget(name)
            if self.hub.restart is not None and msg.attempt >= self.hub.restart.attempt:
                self.hub.restart = None  # done already (an attach's replay)
            node.attempt, node.started, node.end, node.concluded = msg.attempt, True, None, False
            node.stopped_at = None
            node.ranks = msg.ranks or node.ranks
            self.emit(NodeStarted(name, k, msg.pid, msg.hostname, node.ranks, msg.ifname))
            self.emit(HostState(name, k, "running", _ranks_text(node.ranks)))
            if k == 0 and msg.hub_port:
                self._hub_at(msg.hub_port)
            else:
                self._tell_hub(node)
            self._check_running()
        elif isinstance(msg, nodemsg.HubPort) and k == 0:
            self._hub_at(msg.port)
        elif isinstance(msg, nodemsg.Ranks):
            node.ranks = msg.ranks
            self.emit(NodeRanks(name, k, node.ranks, msg.world))
            self.emit(HostState(name, k, "running", _ranks_text(node.ranks)))
        elif isinstance(msg, nodemsg.Stopping):
            node.stopped_at = node.stopped_at or at  # what its ranks print now is its echo
            self._heard_stop(msg, at, link.replaying)
            if msg.by == protocol.BY_PEER:
                # The run's hub stopped it: another node failed (its own report follows).
                self.attempts.of(node.attempt).stop("failure", at)
        elif isinstance(msg, nodemsg.Trimmed):
            self.emit(
                Notice(
                    "warning",
                    f"the host trimmed {msg.bytes >> 20} MiB of old output to stay within "
                    f"{msg.max >> 20} MiB (job.spool_max_mb); lines already received are kept",
                    host=name,
                )
            )
        elif isinstance(msg, nodemsg.Exit | nodemsg.StartError):  # this attempt's end
            self.attempts.seen(msg.attempt, at)
            node.attempt, node.end, node.at = msg.attempt, msg, at
            self._conclude(node, link, "")
        elif isinstance(msg, nodemsg.RunEnd):
            self.hub.run_end = msg
        elif isinstance(msg, nodemsg.Restart | nodemsg.Notify | nodemsg.NotifyFailed):
            self._hub_said(node, msg, at)
        elif isinstance(msg, nodemsg.Health):
            self.emit(Notice("error" if msg.level == "failure" else "warning", msg.text, name))
        elif isinstance(msg, nodemsg.SpareNews):
            self.emit(Notice("warning" if msg.level == "warning" else "info", msg.text))
        elif isinstance(msg, nodemsg.PeerRefused):
            self.emit(Notice("error", msg.text))
        elif isinstance(msg, nodemsg.BadHost):
            self.emit(BadHost(msg.name, msg.node, msg.why))
        elif isinstance(msg, nodemsg.Checkpoint):
            self.emit(CheckpointSaved(msg.path, msg.step, msg.at))
        elif isinstance(msg, nodemsg.Saved):
            self.emit(StepsLost(msg.attempt, msg.path, msg.step, msg.reached, msg.lost))

    def _hub_at(self, port: int) -> None:
        """Node 0's hub listens at `port`: every other node's supervisor is told."""
        if self.hub.listens(port):
            for node in self.nodes.values():
                node.hub_told = None
        for node in self.nodes.values():
            self._tell_hub(node)

    def _tell_hub(self, node: Node) -> None:
        """Node k's supervisor hears where the hub listens, once a stream: its agent keeps
        what a stream says until the supervisor reads it, and a reconnect's new stream is told
        again. Node 0 says its port twice (as its hub starts, and in its start), and a start
        of 128 hosts is where every write waits for a core."""
        link, line = node.link, self.hub.line
        if not (line and node.node_rank) or link is None or link.channel is None:
            return
        if node.hub_told is not link.channel:
            node.hub_told = link.channel
            link.say(line)

    def _hub_said(
        self, node: Node, msg: nodemsg.Restart | nodemsg.Notify | nodemsg.NotifyFailed, at: float
    ) -> None:
        """Node 0's hub: what follows an attempt, and word of what happened (job.notify)."""
        if isinstance(msg, nodemsg.Notify):
            self.emit(Alert(msg.event, msg.status, msg.message, msg.wanted))
        elif isinstance(msg, nodemsg.NotifyFailed):
            text = f"job.notify's command for {msg.event!r} failed (nothing else changes): "
            self.emit(Notice("warning", text + msg.error, host=node.name))
        else:
            culprit = self._name(msg.node) if msg.node is not None else node.name
            self.attempts.hub_said(msg.attempt - 1, culprit, msg.after, at)
            replace = tuple(self._name(j) for j in msg.replace)
            self.emit(RunRestarting(msg.attempt, msg.of, msg.after, msg.delay, replace))
            self.hub.restart = msg if msg.replace else None

    def _name(self, k: int) -> str:
        node = self.nodes.get(k)
        if node is not None:
            return node.name
        return self.names[k] if k < len(self.names) else f"node {k}"

    def _check_running(self) -> None:
        started = sum(n.started for n in self.nodes.values())
        if started == len(self.names) and (self.hub.line or started == 1):
            self.running.set()

    def _lines(
        self, node: Node, stream: Stream, data: str, at: float, replay: bool, stored: bool
    ) -> None:
        # The supervisor sends whole lines only. No Python call per line: 1M lines must flow.
        lines = untag(data)
        if stream == "stderr":
            self.tracker.feed(node.name, lines, at)
        if self.progress is not None and (self.replayed_progress or not replay):
            self.progress.feed(data, node.attempt, at, len(lines), node.node_rank)
        self.emit(LogBatch(node.name, node.node_rank, stream, lines, replay, stored))

    # -- endings --------------------------------------------------------------------------------

    def _conclude(self, node: Node, link: NodeLink, why: str) -> None:
        """The node's attempt ended (its supervisor said so), or its stream did without a
        word (lost, dead): how, for the attempt it was in."""
        node.concluded = True
        if self.detached and node.end is None:
            return
        k, name = node.node_rank, node.name
        # Its supervisor died only where its stream says so: read to its end, with no last
        # word. A stream given up on before its end is a host lost, whatever gave up.
        dead = node.end is None and link.ended and not link.lost
        gone = self.silence.gone(link, why, node.end is not None)
        died = node.end.died if isinstance(node.end, nodemsg.Exit) else None
        ending = self.attempts.of(node.attempt).ended(
            name,
            node.end,
            node.at or time.time(),
            gone=gone,
            tracebacks=lambda host, code, at: self.tracker.node_failures(
                host, code, at=at, died=died
            ),
            peer_name=lambda j: self.nodes[j].name if j in self.nodes else None,
            stopped_at=node.stopped_at,
            hub=k == 0,
        )
        for text in ending.errors:
            self.emit(Notice("error", text, host=name))
        self.emit(HostState(name, k, ending.state, ending.detail))
        self.emit(NodeExited(name, k, ending.exit_code, ending.failures, ending.stopped))
        if ending.state == "failed" and node.attempt == self.attempts.current:
            self.stop("failure")
            if dead and not self.viewer:  # a viewer leaves the sweep to the run's own
                self._sweeps.append(asyncio.ensure_future(self._sweep(node)))
                self._gone(k, node.attempt)

    def _gone(self, k: int, attempt: int) -> None:
        """Node k's supervisor is dead: the run's hub (of node 0's, every peer) hears it now,
        instead of waiting out its silence (link_timeout) before the run can end."""
        line = protocol.say(protocol.SAY_GONE, k, attempt)
        for j in [0] if k else [j for j in self.links if j]:
            self.say(j, line)

    async def _sweep(self, node: Node) -> None:
        """Its supervisor is gone: stop what is left of the node by the run's tags."""
        with contextlib.suppress(HostError):
            for text in await self.sweep(node.node_rank):
                self.emit(Notice("error", f"{text} could not be killed", host=node.name))

    async def sweep(self, k: int) -> list[str]:
        """Stop what is left of node k on its host, by the run's tags: what could not be killed.
        Raises HostError."""
        agent = await self.fleet.agent(k, self.emit)
        return await ops.sweep(agent, self.run_id, k, self.grace)

    async def settle(self) -> None:
        """Wait for the sweeps of nodes whose supervisor died."""
        await asyncio.gather(*self._sweeps, return_exceptions=True)

    async def hang_up(self) -> None:
        """After a cancel: stop every node still running and read to each stream's end."""
        live = [link for link in self.links.values() if link.channel and not link.closed.is_set()]
        for link in live:
            link.say(protocol.SAY_STOP)
        if live:
            ends = [asyncio.ensure_future(link.closed.wait()) for link in live]
            _, pending = await asyncio.wait(ends, timeout=self.grace + 10)
            for task in pending:
                task.cancel()
        for link in self.links.values():
            link.close()

    @property
    def failures(self) -> list[Failure]:
        return self.verdict.failures


async def _unless(event: asyncio.Event, work: Coroutine[Any, Any, Any]) -> bool:
    """work to its end, unless `event` is set first (then it is cancelled): True if it ended
    (its exception raised)."""
    task, stop = asyncio.ensure_future(work), asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait([task, stop], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not task.done():
            task.cancel()
        await asyncio.gather(task, stop, return_exceptions=True)
    if task.cancelled():
        return False
    task.result()
    return True


def _ranks_text(ranks: tuple[int, ...]) -> str:
    if not ranks:
        return ""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]}"
