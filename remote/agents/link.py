"""One node's supervisor as the launcher sees it: its spool, read across agents and connections.

A link remembers how far into the node's spool it has read (complete records only), so a new
channel, on the same agent or on a new one after a reconnect, asks for exactly the next byte: no
record twice, none missed. Frames come in as the agent's reader hands them over; `on_items`
gets each batch of Records and control messages, `on_end` the channel's end.

Small batches of lines wait up to COALESCE_S to go on together: with thousands of ranks a
node's frame holds a line or two, and every batch handed on costs its untagging, its event,
its log write and its place in the dashboard's buffers (at 4,096 ranks, 25,000 a second). Any
other item, a big batch, a replay or the channel's end takes what waits along at once.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ddptui.remote.agents import pace
from ddptui.remote.agents.agent import Agent, Channel
from ddptui.remote.host import protocol, wire

# How long lines may wait for the node's next ones: half the dashboard's frame (it draws at
# 5 Hz). Half of that again made so many batches at thousands of ranks that they alone kept the
# dashboard's process busy (bench_dashboard.py; the figures are in docs/benchmarks.md).
COALESCE_S = 0.10
COALESCE_MAX = 16 << 10  # bytes of lines that may wait: a bigger batch is worth its cost alone


@dataclass(frozen=True, slots=True)
class Record:
    """One spool record: a batch of whole lines (stream 1 or 2), or a message (meta)."""

    kind: bytes  # b"1" stdout, b"2" stderr, b"m" meta
    at: float  # host clock, seconds
    data: bytes
    end: int  # spool offset just past this record

    def message(self) -> dict[str, Any]:
        try:
            msg = json.loads(self.data)
        except ValueError:
            msg = None
        if not isinstance(msg, dict):
            raise wire.Garbage("a meta record that is not an object", self.data)
        return msg


Item = Record | dict[str, Any]  # a dict: an out-of-band control message
OnItems = Callable[[list[Item]], None]
OnEnd = Callable[[str | None], None]


class NodeLink:
    def __init__(self, run_id: str, node: int, offset: int = 0, view: bool = False) -> None:
        """offset: where in the spool to begin (what the run's logs already hold). view: only
        watch (a read-only dashboard): the supervisor takes none of its words for a lease or
        a command, and it says none but its pings (which keep it connected)."""
        self.run_id, self.node, self.view = run_id, node, view
        self.channel: Channel | None = None
        self.closed = asyncio.Event()  # the current channel has ended
        self.heard = time.monotonic()  # the last byte from the host
        self.ended = False  # the supervisor said the stream is complete
        self.lost = False  # given up on: not heard from for link_timeout
        self.given_up = asyncio.Event()  # set with `lost`: a reconnect under way stops
        self.hello: dict[str, Any] = {}
        self._fed = offset  # spool offset of the next byte for the reader
        self._history = False  # this link attached to a run already going (or gone)
        self._wire = wire.WireReader()
        self._spool = wire.SpoolReader()
        self._held: list[Record] = []  # lines waiting to go on together (see COALESCE_S)
        self._held_from = 0  # the offset where they begin
        self._held_bytes = 0
        self._timer: asyncio.TimerHandle | None = None
        self._on_items: OnItems | None = None

    @property
    def replaying(self) -> bool:
        """Reading what was spooled before this connection began (an attach's history)."""
        return self._history and self.offset <= int(self.hello.get("spool_end", 0))

    @property
    def caught_up(self) -> bool:
        """Everything the node had spooled when this channel opened has been read."""
        return bool(self.hello) and self.offset >= int(self.hello.get("spool_end", 0))

    @property
    def offset(self) -> int:
        """Where a new channel resumes: the end of the last complete record handed on (the
        run's checkpoint notes it: lines still held are not in the logs yet)."""
        return self._held_from if self._held else self._fed - len(self._spool.buf)

    def open(
        self, agent: Agent, op: str, args: dict[str, Any], on_items: OnItems, on_end: OnEnd
    ) -> None:
        """A new channel (start the supervisor, or attach to it), resuming at `offset`."""
        self.hand_on()  # the last channel's
        offset = self.offset
        self._history = self._history or (op == protocol.ATTACH and offset == 0)
        self.close()
        self._fed, self._wire, self._spool = offset, wire.WireReader(), wire.SpoolReader()
        self.heard = time.monotonic()

        def frame(kind: bytes, payload: Any) -> None:
            self.heard = time.monotonic()
            start, replaying = self.offset, self.replaying
            items = self._parse(payload) if kind == b"d" else [payload]
            if items:
                self._hold(start, items, replaying or self.replaying)

        def end(why: str | None) -> None:
            self.hand_on()
            self.closed.set()
            on_end(why)

        self._on_items = on_items
        self.closed = asyncio.Event()
        self.channel = agent.open(op, args, frame, end)
        hello = protocol.say(protocol.SAY_HELLO, offset, *[protocol.SAY_VIEW] * self.view)
        self._send(hello)

    def _hold(self, start: int, items: list[Item], replaying: bool) -> None:
        """Small batches of lines wait (merged per stream) for the next ones; the rest goes on
        at once, with what waits first. A replay is never merged: part of it may be in the
        run's logs already (Gang.stored), judged record by record."""
        now, size = replaying, 0
        for it in items:  # a loop, not all(): this runs for every frame of every node
            if not isinstance(it, Record) or it.kind == b"m":  # a message goes on at once
                now = True
                break
            size += len(it.data)
        if now or self._held_bytes + size >= COALESCE_MAX:
            self.hand_on()
            assert self._on_items is not None
            self._on_items(items)
            return
        held = self._held
        if not held:
            self._held_from = start
            self._timer = asyncio.get_running_loop().call_later(COALESCE_S, self._held_due)
        self._held_bytes += size
        for it in items:
            assert isinstance(it, Record)
            last = held[-1] if held else None
            if last is not None and last.kind == it.kind:
                held[-1] = Record(it.kind, last.at, last.data + it.data, it.end)
            else:
                held.append(it)

    def _held_due(self) -> None:
        """The timer: what waits goes on, in the loop's next slice of line work if it is paced."""
        self._timer = None
        pacer = pace.current()
        if pacer is None:
            self.hand_on()
        else:
            pacer.call(self.hand_on)

    def hand_on(self) -> None:
        """The lines waiting, handed on now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._held:
            held, self._held, self._held_bytes = self._held, [], 0
            assert self._on_items is not None
            self._on_items(list[Item](held))

    def give_up(self) -> None:
        """Not heard from for link_timeout (or its host's place went to a spare): lost."""
        self.hand_on()  # read already: what the run's logs hold goes up to here
        self.lost = True
        self.given_up.set()

    def say(self, line: str) -> None:
        """A word to the supervisor; a viewer's, only its pings."""
        if not self.view or line == protocol.SAY_PING:
            self._send(line)

    def _send(self, line: str) -> None:
        if self.channel is not None:
            self.channel.send(line.encode() + b"\n")

    def close(self) -> None:
        """Our side of the stream is over (the supervisor lets this viewer go)."""
        self.hand_on()
        if self.channel is not None:
            self.channel.end()
            self.channel = None

    def _parse(self, data: bytes) -> list[Item]:
        items: list[Item] = []
        for it in self._wire.feed(data):
            if isinstance(it, wire.Data):
                items += self._records(it.offset, it.data)
            else:
                items.append(it)
                self._control(it)
        return items

    def _records(self, offset: int, data: bytes) -> list[Item]:
        skip = self._fed - offset  # already read over an earlier channel
        if skip >= len(data):
            return []
        if skip > 0:
            data = data[skip:]
        base = self._fed - len(self._spool.buf) - self._spool.done  # where this reader began
        self._fed += len(data)
        return [
            Record(kind, ts / 1000.0, payload, base + end)
            for kind, ts, payload, end in self._spool.feed(data)
        ]

    def _control(self, msg: dict[str, Any]) -> None:
        kind = msg.get("t")
        if kind == protocol.STREAM_HELLO:
            self.hello = msg
        elif kind == protocol.EOF:
            self.ended = True
        elif kind == protocol.TRIMMED:  # gone from the host before we read it: on from there
            self._fed, self._spool = int(msg["at"]), wire.SpoolReader()
