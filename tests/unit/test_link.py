"""A node's link: small batches of lines go on together, anything else at once, none held
past the channel's end, and the offset a checkpoint notes never counts lines still held."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ddptui.remote.agents import link as link_mod
from ddptui.remote.agents.link import Item, NodeLink, Record
from ddptui.remote.host import wire


class FakeAgent:
    """Hands the link's frame and end callbacks to the test."""

    def open(self, op: str, args: dict[str, Any], on_frame: Any, on_end: Any) -> FakeAgent:
        self.frame, self.end = on_frame, on_end
        return self

    def send(self, data: bytes) -> None:
        pass


class Stream:
    """A supervisor's stream: spool records in data frames, offsets counted."""

    def __init__(self) -> None:
        self.offset = 0

    def frame(self, *records: tuple[bytes, bytes]) -> bytes:
        spool = b"".join(wire.record(kind, 1000, data) for kind, data in records)
        data = wire.data_frame(self.offset, spool)
        self.offset += len(spool)
        return data


async def test_small_batches_of_lines_go_on_together() -> None:
    got: list[list[Item]] = []
    ended: list[str | None] = []
    link, agent, stream = NodeLink("r1", 0), FakeAgent(), Stream()
    link.open(agent, "start", {}, got.append, ended.append)  # type: ignore[arg-type]
    agent.frame(b"d", wire.control(t="hello", live=True, spool_end=0))
    assert got == [[{"t": "hello", "live": True, "spool_end": 0}]]  # at once
    got.clear()
    agent.frame(b"d", stream.frame((b"1", b"[0]:a\n")))
    agent.frame(b"d", stream.frame((b"1", b"[1]:b\n"), (b"2", b"[1]:warn\n")))
    agent.frame(b"d", stream.frame((b"2", b"[0]:warn\n")))
    assert got == [] and link.offset == 0  # held: the logs do not have them yet
    await asyncio.sleep(link_mod.COALESCE_S * 2)
    assert [(r.kind, r.data) for r in got[0] if isinstance(r, Record)] == [
        (b"1", b"[0]:a\n[1]:b\n"),
        (b"2", b"[1]:warn\n[0]:warn\n"),
    ]
    assert link.offset == stream.offset and len(got) == 1

    agent.frame(b"d", stream.frame((b"1", b"[0]:c\n")))
    agent.frame(b"d", stream.frame((b"m", b'{"t": "exit", "code": 0}')))  # at once, after c
    assert [[r.kind for r in batch if isinstance(r, Record)] for batch in got[1:]] == [
        [b"1"],
        [b"m"],
    ]
    agent.frame(b"d", stream.frame((b"1", b"x" * link_mod.COALESCE_MAX + b"\n")))
    assert len(got) == 4  # a big batch is worth its cost alone

    agent.frame(b"d", stream.frame((b"1", b"[0]:last\n")))
    agent.end(None)  # the end hands on what waits first
    assert [r.data for r in got[-1] if isinstance(r, Record)] == [b"[0]:last\n"]
    assert ended == [None] and link.offset == stream.offset


class Said(FakeAgent):
    """Keeps what the link sends its supervisor."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, data: bytes) -> None:
        self.sent.append(data)


@pytest.mark.security
def test_a_viewer_s_link_says_only_its_hello_and_pings() -> None:
    """A read-only dashboard's link: whatever its run asks (a stop, a detach, a hub word), the
    supervisor hears a viewer's hello and its pings, nothing that changes the run."""
    link, agent = NodeLink("r1", 0, offset=7, view=True), Said()
    link.open(agent, "attach", {}, lambda items: None, lambda why: None)  # type: ignore[arg-type]
    for line in ("stop", "stop failure 1", "detach", "hub 10.0.0.1 29400", "ping"):
        link.say(line)
    assert agent.sent == [b"hello 7 view\n", b"ping\n"]
