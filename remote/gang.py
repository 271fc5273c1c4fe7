"""Every node's supervisor, followed to the end: lines in, stops out, leases both ways.

One NodeLink per host (remote/link.py). A dropped connection is reconnected and the node's
spool resumed at the last byte read; a host not heard from for `link_timeout` is lost, which
fails the run and stops the others. A node that fails stops the rest (its supervisors also tell
each other through the run's hub, so this holds with nobody attached). `detach()` leaves the
run to its supervisors.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter
from typing import Any

from . import fanout
from .events import (
    Event,
    Failure,
    HostState,
    LogBatch,
    NodeExited,
    NodeRanks,
    NodeStarted,
    Notice,
    Stream,
)
from .failures import FailureTracker, describe_exit
from .host.daemon import beat_interval
from .link import Item, NodeLink, Noise, Record
from .transport import HostError, Transport

STREAMS: dict[bytes, Stream] = {b"1": "stdout", b"2": "stderr"}
# A line as torchrun tees it, `[<global rank>]:text`; \d is what int() reads.
RANK_TAG = re.compile(r"^(?:\[(\d{1,9})\]:)?(.*)\n", re.MULTILINE)
# Why a node stopped that the launcher did not stop: a `ddptui stop` (another launcher), the
# run's hub (another node failed or was lost), or its lease (no launcher heard from).
STOP_CAUSES = {"launcher": "user", "peer": "failure", "lease": "lease"}
YIELD_EVERY = 64  # reads between giving the loop to the dashboard and the other nodes


@dataclass
class Node:
    """What the launcher knows of one node's part of the run."""

    name: str
    node_rank: int
    ranks: tuple[int, ...] = ()
    started: bool = False
    end: dict[str, Any] | None = None  # the supervisor's `exit` (or `error`) message
    at: float = 0.0  # host clock of that message


@dataclass
class Gang:
    run_id: str
    transports: list[Transport]
    emit: Callable[[Event], None]
    link_timeout: float
    grace: float
    master_addr: str = ""
    tracker: FailureTracker = field(default_factory=FailureTracker)
    failures: list[Failure] = field(default_factory=list)
    # Why the hub stopped nodes, for when the failing node itself can tell us nothing.
    peer_failures: list[Failure] = field(default_factory=list)
    cause: str | None = None  # "user" or "failure": why the run is ending early
    stop_sent: float = 0.0  # host clock (time.time) when the nodes were told to stop
    detached: bool = False
    links: dict[int, NodeLink] = field(default_factory=dict)
    nodes: dict[int, Node] = field(default_factory=dict)
    running: asyncio.Event = field(default_factory=asyncio.Event)  # every node has started
    stored: dict[int, int] = field(default_factory=dict)  # node → spool offset the logs hold
    _sweeps: list[asyncio.Future[None]] = field(default_factory=list)
    _hub: str | None = None

    # -- asking ---------------------------------------------------------------------------------

    def stop(self, cause: str = "user") -> None:
        """Stop every node (TERM, grace, KILL on each host). Safe to call more than once."""
        if self.cause is None:
            self.cause, self.stop_sent = cause, time.time()
            if cause == "user":
                self.emit(
                    Notice("info", f"stopping every node (TERM, then KILL after {self.grace:g} s)")
                )
        for link in self.links.values():
            link.send("stop")

    def detach(self) -> None:
        """Leave the run to its supervisors: no launcher lease any more; they end it alone."""
        self.detached = True
        for link in self.links.values():
            link.send("detach")
            if link.proc is not None:
                link.proc.close_stdin()  # the relay passes it on, then hangs up

    # -- following ------------------------------------------------------------------------------

    async def follow(self, node: Node, cmd: dict[str, Any]) -> None:
        """Open the node's stream (start or attach) and follow it to its end."""
        k = node.node_rank
        self.nodes[k] = node
        link = self.links[k] = NodeLink(self.transports[k], self.run_id, k)
        try:
            await link.open(cmd)
        except HostError as exc:
            self._failed(node, None, [self._failure(node, exc.reason)])
            return
        if self.cause:
            link.send("stop")
        await self._follow(node, link)
        self._conclude(node, link)

    async def keep_leases(self) -> None:
        """Ping every supervisor; a host silent for link_timeout is lost (ends by cancel)."""
        beat = beat_interval(self.link_timeout)
        while True:
            await asyncio.sleep(beat)
            for k, link in self.links.items():
                if link.ended or link.lost:
                    continue
                link.send("ping")
                if time.monotonic() - link.heard > self.link_timeout:
                    link.lost = True
                    link.close()
                    self.transports[k].drop()  # wakes the reader: the link is dead

    async def _follow(self, node: Node, link: NodeLink) -> None:
        reads = 0
        while True:
            items = await link.read()
            if items is None:
                if link.ended or self.detached or (node.end is not None and "error" in node.end):
                    return
                if not await self._reconnect(node, link):
                    return
                continue
            reads += 1
            if reads % YIELD_EVERY == 0:  # read() does not suspend while data is buffered
                await asyncio.sleep(0)
            for item in items:
                self._item(node, link, item)

    async def _reconnect(self, node: Node, link: NodeLink) -> bool:
        """A new connection to the host, the stream resumed where it stopped; False: lost."""
        k, name = node.node_rank, node.name
        gone = link.heard  # the last word from the host: the outage began after it
        self.emit(HostState(name, k, "disconnected", "reconnecting"))
        self.emit(
            Notice(
                "warning",
                f"connection lost; reconnecting (the job runs on; the host counts as lost "
                f"after {self.link_timeout:g} s without a word)",
                host=name,
            )
        )
        delay = 0.5
        while not link.lost and not self.detached:
            try:
                await fanout.reconnect(self.transports[k])
                await link.open({"do": "attach", "run_id": self.run_id, "node": k})
            except HostError:
                if time.monotonic() - link.heard > self.link_timeout:
                    break
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            if self.cause:
                link.send("stop")
            if self._hub and k:
                link.send(self._hub)
            took = time.monotonic() - gone
            self.emit(
                Notice("info", f"reconnected: the link was silent for {took:.1f} s", host=name)
            )
            self.emit(HostState(name, k, "running", _ranks_text(node.ranks)))
            return True
        return False

    def _item(self, node: Node, link: NodeLink, item: Item) -> None:
        if isinstance(item, Record):
            if item.kind == b"m":
                self._message(node, link, item.message(), item.at)
            else:
                text = item.data.decode("utf-8", "surrogateescape")
                stored = item.end <= self.stored.get(node.node_rank, 0)
                self._lines(node, STREAMS[item.kind], text, item.at, link.replaying, stored)
        elif isinstance(item, Noise):  # the host's own words (a banner, a greeting wrapper)
            lines = tuple((None, line) for line in item.text.splitlines() if line.strip())
            if lines:
                self.emit(LogBatch(node.name, node.node_rank, "stdout", lines))
        elif item.get("t") == "error":
            node.end, node.at = item, time.time()
        elif item.get("t") == "trimmed":
            self.emit(
                Notice(
                    "warning",
                    f"{item.get('missed', 0)} bytes of output were trimmed on the host "
                    "before ddptui could read them (job.spool_max_mb)",
                    host=node.name,
                )
            )

    def _message(self, node: Node, link: NodeLink, msg: dict[str, Any], at: float) -> None:
        kind, k, name = msg.get("t"), node.node_rank, node.name
        if kind == "started":
            node.started = True
            node.ranks = tuple(msg.get("ranks") or node.ranks)
            self.emit(
                NodeStarted(name, k, msg["pid"], msg["hostname"], node.ranks, msg.get("ifname"))
            )
            self.emit(HostState(name, k, "running", _ranks_text(node.ranks)))
            if k == 0 and msg.get("hub_port"):
                self._hub = f"hub {self.master_addr} {msg['hub_port']}"
                for j, other in self.links.items():
                    if j:
                        other.send(self._hub)
            elif self._hub:
                link.send(self._hub)
            self._check_running()
        elif kind == "ranks":
            node.ranks = tuple(msg["ranks"])
            self.emit(NodeRanks(name, k, node.ranks, msg.get("world")))
            self.emit(HostState(name, k, "running", _ranks_text(node.ranks)))
        elif kind == "stopping" and msg.get("by") == "peer" and self.cause is None:
            # The run's hub stopped it: another node failed (its own report follows).
            self.cause, self.stop_sent = "failure", at
        elif kind == "trimmed":
            self.emit(
                Notice(
                    "warning",
                    f"the host trimmed {msg.get('bytes', 0) >> 20} MiB of old output to stay "
                    f"within {msg.get('max', 0) >> 20} MiB (job.spool_max_mb); lines already "
                    "received are kept",
                    host=name,
                )
            )
        elif kind in ("exit", "error"):
            node.end, node.at = msg, at

    def _check_running(self) -> None:
        started = sum(n.started for n in self.nodes.values())
        if started == len(self.transports) and (self._hub or started == 1):
            self.running.set()

    def _lines(
        self, node: Node, stream: Stream, data: str, at: float, replay: bool, stored: bool
    ) -> None:
        # The supervisor sends whole lines only. No Python call per line: 1M lines must flow.
        lines = _untag(data)
        if stream == "stderr":
            self.tracker.feed(node.name, lines, at)
        self.emit(LogBatch(node.name, node.node_rank, stream, lines, replay, stored))

    # -- endings --------------------------------------------------------------------------------

    def _conclude(self, node: Node, link: NodeLink) -> None:
        end = node.end
        if self.detached and end is None:
            return
        if end is None:
            why = (
                f"lost: not heard from for {self.link_timeout:g} s (network cut or host down); "
                "its supervisor stops its part when no launcher is heard from for as long"
                if link.lost
                else "its supervisor died (the host's part is swept by the run's tags)"
            )
            self._failed(node, None, [self._failure(node, why)])
            if not link.lost:
                self._sweeps.append(asyncio.ensure_future(self._sweep(node)))
        elif end.get("t") == "error":
            self._failed(node, None, [self._failure(node, str(end.get("msg")))])
        else:
            self._exited(node, end)

    def _exited(self, node: Node, end: dict[str, Any]) -> None:
        name, k, code = node.name, node.node_rank, end.get("code")
        for text in end.get("survivors") or ():
            self.emit(Notice("error", f"{text} could not be killed", host=name))
        if code == 0 and not end.get("stopped"):
            self.emit(HostState(name, k, "done"))
            self.emit(NodeExited(name, k, code))
        elif end.get("stopped"):
            if self.cause is None:  # not our stop: a stop from elsewhere, or its lease
                self.cause, self.stop_sent = STOP_CAUSES.get(str(end.get("by")), "failure"), node.at
            if end.get("by") == "lease":
                self.emit(Notice("error", f"stopped: {end.get('reason')}", host=name))
            if self.cause == "failure":  # its own tracebacks from before the stop still count
                own = self.tracker.node_failures(name, code, at=node.at)
                self.failures.extend(f for f in own if f.seen_at < self.stop_sent)
                if end.get("by") == "peer":
                    self.peer_failures.append(self._peer_failure(node, end))
            self.emit(HostState(name, k, "stopped", describe_exit(code)))
            self.emit(NodeExited(name, k, code, stopped=True))
        else:
            self._failed(node, code, self.tracker.node_failures(name, code, at=node.at))

    def _failed(self, node: Node, code: int | None, failures: list[Failure]) -> None:
        # Failures after a stop are its echo (ranks dying of TERM or of a lost peer).
        if self.cause != "user":
            self.failures.extend(failures)
        detail = failures[0].message if failures else describe_exit(code)
        self.emit(HostState(node.name, node.node_rank, "failed", detail))
        self.emit(NodeExited(node.name, node.node_rank, code, tuple(failures)))
        self.stop("failure")

    def _peer_failure(self, node: Node, end: dict[str, Any]) -> Failure:
        """What the hub said of the node that made it stop the others."""
        cause = self.nodes.get(end["node"]) if isinstance(end.get("node"), int) else None
        name = cause.name if cause is not None else node.name
        return Failure(name, None, None, str(end.get("reason")), seen_at=node.at)

    def _failure(self, node: Node, message: str, code: int | None = None) -> Failure:
        return Failure(node.name, None, code, message, seen_at=node.at or time.time())

    async def _sweep(self, node: Node) -> None:
        """Its supervisor is gone: stop what is left of the node by the run's tags."""
        from . import control

        with contextlib.suppress(HostError):
            left = await control.sweep(self.transports[node.node_rank], self.run_id, node.node_rank)
            for text in left:
                self.emit(Notice("error", f"{text} could not be killed", host=node.name))

    async def settle(self) -> None:
        """Wait for the sweeps of nodes whose supervisor died."""
        await asyncio.gather(*self._sweeps, return_exceptions=True)

    async def hang_up(self) -> None:
        """After a cancel: stop every node still running and read to each stream's end."""
        live = [link for link in self.links.values() if not link.ended and link.proc is not None]
        for link in live:
            link.send("stop")

        async def drain(link: NodeLink) -> None:
            while await link.read() is not None:
                pass

        if live:
            await asyncio.wait(
                [asyncio.ensure_future(drain(link)) for link in live], timeout=self.grace + 10
            )
        for link in self.links.values():
            link.close()


def _untag(data: str) -> tuple[tuple[int | None, str], ...]:
    """Each whole line of data: `[3]:hello` → (3, "hello"); torchrun's own lines carry no tag."""
    found = RANK_TAG.findall(data)  # one pass in C over the whole chunk
    ranks = {tag: int(tag) if tag else None for tag in set(map(itemgetter(0), found))}
    if len(ranks) == 1:  # the usual chunk: one rank's lines
        return tuple(zip(repeat(ranks.popitem()[1]), map(itemgetter(1), found)))
    return tuple([(ranks[tag], text) for tag, text in found])


def _ranks_text(ranks: tuple[int, ...]) -> str:
    if not ranks:
        return ""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]}"
