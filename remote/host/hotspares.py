"""Node 0's hot spares: each spare host's standby (remote/host/standby.py), idle from the launch
until the run's hub needs a host in a lost node's place.

A standby connects to the hub as a peer in a slot of its own, numbered after the nodes, and
heartbeats. Told "take" (nobody attached, a node lost or bad), it starts that node's supervisor,
which joins the hub in the node's place, and says whether it could ("took"). One that dies,
falls silent for link_timeout or cannot take its node is named and no longer counted; the
next one takes the node instead. At the run's end each is told it is over.

The hub (remote/host/hub.py) admits the standbys at its door and keeps which nodes are lost:
this class reads that under the hub's own lock and never writes it. python3 >= 3.8, stdlib only.
"""

from __future__ import annotations

import contextlib
import time

from . import protocol
from .common import thread

TYPE_CHECKING = False  # typing's names cost import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Callable

    from .channel import Channel
    from .hub import Hub


class HotSpares:
    """names: the spare hosts' names in fleet order (their slots follow the hub's nodes);
    on_news(text): word of a standby lost or unable to take its node (the stream, job.notify)."""

    def __init__(self, hub: Hub, names: list[str], on_news: Callable[[str], None]) -> None:
        self.hub, self.cond, self.on_news = hub, hub.cond, on_news
        self.names = {len(hub.names) + i: name for i, name in enumerate(names)}  # slot -> name
        self.live: dict[int, Channel] = {}  # slot -> the channel of a standby standing by
        self.heard: dict[int, float] = {}  # slot -> when it was last heard (monotonic)
        self.taking: dict[int, int] = {}  # slot -> the node it was told to take
        self.gone: set[int] = set()  # slots given up: dead, cut off, failed to take their node
        self.over: str | None = None  # the run is over: said to every standby that comes
        hub.standbys, hub.stand_by, hub.chosen = list(names), self._serve, self._chosen

    def start(self) -> None:
        if self.names:
            thread(self._watch)

    def take(self, attempt: int) -> list[tuple[int, str]]:
        """Each lost node not yet given a standby gets the first live one: it starts that
        node's supervisor, which joins at `attempt` (Hub._join). Returns [(node, name)]."""
        with self.cond:
            todo = sorted(set(self.hub.lost) - set(self.taking.values()))
            slots = sorted(self.live)[: len(todo)]  # zip(strict=) is not python 3.8's
            given = [(k, slot, self.live.pop(slot)) for k, slot in zip(todo, slots)]  # noqa: B905
            self.taking.update((slot, k) for k, slot, _ in given)
        for k, _, chan in given:
            chan.send(t=protocol.HUB_TAKE, node=k, attempt=attempt)
        return [(k, self.names[slot]) for k, slot, _ in given]

    def _chosen(self, node: int) -> list[int]:
        """(Under the hub's lock) the standbys told to take `node`: their keys for it count."""
        return [slot for slot, k in self.taking.items() if k == node]

    def finish(self, reason: str) -> None:
        """The run is over: every standby is told, and leaves."""
        with self.cond:
            self.over = reason
            live = list(self.live.values())
        for chan in live:
            chan.send(t=protocol.HUB_OVER, reason=reason)

    def _serve(self, slot: int, chan: Channel) -> None:
        """A standby's link, until it takes a node, leaves, dies or falls silent (_watch)."""
        with self.cond:
            refused = self.over or (slot in self.gone and "given up for lost")
            if not refused and slot not in self.taking:
                self.live[slot] = chan
                self.heard[slot] = time.monotonic()
        if refused or slot in self.taking:
            chan.send(t=protocol.HUB_OVER, reason=refused or "taken")
            chan.close()
            return
        why: str | None = "it left"
        with contextlib.suppress(OSError):
            for msg in chan:
                self.heard[slot] = time.monotonic()
                if msg.get("t") == protocol.HUB_BEAT:
                    chan.send(t=protocol.HUB_BEAT)
                elif msg.get("t") == protocol.HUB_TOOK:  # its node's supervisor is up, or why not
                    why = None if msg.get("ok") is True else str(msg.get("why"))
        chan.close()
        self._left(slot, chan, why)

    def _left(self, slot: int, chan: Channel, why: str | None) -> None:
        """A standby's link closed: one still standing by is lost; one that could not take its
        node (why) passes the node on to the next."""
        with self.cond:
            live = self.live.get(slot) is chan
            if live:
                del self.live[slot]
                self.gone.add(slot)
            retake = why is not None and self.taking.get(slot) in self.hub.lost and not self.over
            if retake:  # it left before its node's supervisor joined: the next one goes
                self.gone.add(slot)
                del self.taking[slot]
        name = self.names[slot]
        if live and self.over is None:
            self.on_news(f"spare {name} no longer stands by (its standby died or was cut off): "
                         f"{len(self.live)} hot spare(s) left; an attach may still bring it "
                         "in")  # fmt: skip
        elif retake:
            self.on_news(f"spare {name} could not take the lost node's place: {why}")
            self.take(self.hub.attempt + 1)

    def _watch(self) -> None:
        """A standby not heard from for link_timeout is cut off: its link is closed, and its
        reader says it is gone."""
        while self.over is None:
            time.sleep(self.hub.beat)
            now = time.monotonic()
            for slot, heard in list(self.heard.items()):
                chan = self.live.get(slot)
                if chan is not None and now - heard > self.hub.link_timeout:
                    chan.close()
