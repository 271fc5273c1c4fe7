"""The protocol's framing and the host's spool, piece by piece (pure; no processes)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddptui.remote.host import daemon, viewers, wire
from ddptui.remote.host.spool import Spool, Trimmed


def feed_in_pieces(reader: Any, data: bytes, cuts: list[int]) -> list[Any]:
    items: list[Any] = []
    at = 0
    for cut in [*sorted(set(c % (len(data) + 1) for c in cuts)), len(data)]:
        items += reader.feed(data[at:cut])
        at = cut
    return items


@given(st.lists(st.integers(min_value=0), max_size=8))
def test_frames_survive_any_split(cuts: list[int]) -> None:
    """The agent's stdout: a banner, the mark, frames of every kind; then, inside one channel's
    data, a node's stream; inside its D frames, spool records."""
    rec = [wire.record(b"1", 5, b"a\nb\n"), wire.meta(6, t="exit", code=0)]
    node = wire.control(t="hello") + wire.data_frame(0, b"".join(rec)) + wire.control(t="eof")
    out = b"Welcome!\n" + wire.MARK + wire.jframe(0, {"t": "hello"})
    out += wire.frame(3, b"d", node[:7]) + wire.frame(3, b"d", node[7:]) + wire.frame(3, b"e")
    items = feed_in_pieces(wire.FrameReader(), out, cuts)
    noise = b"".join(i.data for i in items if isinstance(i, wire.Noise))
    frames = [i for i in items if isinstance(i, wire.Frame)]
    assert noise == b"Welcome!\n"
    assert frames[0].message() == {"t": "hello"}
    assert [(f.chan, f.kind) for f in frames[1:]] == [(3, b"d"), (3, b"d"), (3, b"e")]
    inner = feed_in_pieces(wire.WireReader(), b"".join(f.payload for f in frames[1:]), cuts)
    chunks = b"".join(i.data for i in inner if isinstance(i, wire.Data))
    assert [i for i in inner if isinstance(i, dict)] == [{"t": "hello"}, {"t": "eof"}]
    assert chunks == b"".join(rec)
    assert wire.SpoolReader().feed(chunks) == [
        (b"1", 5, b"a\nb\n", len(rec[0])),
        (b"m", 6, b'{"t": "exit", "code": 0}', len(rec[0]) + len(rec[1])),
    ]


def test_a_banner_glued_to_the_mark_and_a_need_line() -> None:
    """A python wrapper's `printf 'banner'` glues itself to the front of the mark's line; the
    boot asks for the code it lacks on a line of its own."""
    reader = wire.FrameReader()
    items = reader.feed(b"banner without a newline" + wire.NEED + b"abc123\n")
    assert [type(i).__name__ for i in items] == ["Noise", "Need"]
    assert isinstance(items[1], wire.Need) and items[1].hash == "abc123"
    items = reader.feed(b"more" + wire.MARK + wire.jframe(0, {"t": "hello"}))
    assert [type(i).__name__ for i in items] == ["Noise", "Frame"]


def test_after_the_mark_only_frames() -> None:
    reader = wire.FrameReader()
    reader.feed(wire.MARK)
    with pytest.raises(wire.Garbage, match="not a frame: b'sitecustomize says hi"):
        reader.feed(b"sitecustomize says hi\n")
    with pytest.raises(wire.Garbage, match="a frame of 999999999 bytes"):
        wire.FrameReader(marked=True).feed(b"1 d 999999999\n")
    with pytest.raises(wire.Garbage, match="not a stream frame"):
        wire.WireReader().feed(b"hello there\n")
    with pytest.raises(wire.Garbage, match="a spool record of 999999999 bytes"):
        wire.SpoolReader().feed(b"1 5 999999999\n")


def test_a_huge_line_without_newline_before_the_mark_is_passed_on_in_pieces() -> None:
    reader = wire.FrameReader()
    items = reader.feed(b"\0" * 900_000)
    assert sum(len(i.data) for i in items if isinstance(i, wire.Noise)) > 800_000
    assert all(len(i.data) <= wire.NOISE_MAX for i in items)
    assert len(reader.buf) - reader.at < wire.NOISE_MAX


def test_noise_is_scanned_once_however_it_trickles_in() -> None:
    """Linear: a long line arriving a byte at a time is not scanned again from its start."""
    reader = wire.FrameReader()
    t0 = time.perf_counter()
    for _ in range(wire.NOISE_MAX - 1):
        assert reader.feed(b"x") == []
    assert time.perf_counter() - t0 < 2.0
    assert reader.seen == wire.NOISE_MAX - 1


def test_spool_trims_whole_segments_and_says_where_it_starts(tmp_path: Path) -> None:
    spool = Spool(str(tmp_path), max_bytes=1 << 16)  # segments of 32 KiB
    rec = wire.record(b"1", 1, b"x" * 1000 + b"\n")
    trimmed = sum(spool.append(rec) for _ in range(200))
    assert trimmed > 0 and spool.start > 0
    assert spool.end - spool.start <= (1 << 16) + spool.segment_bytes
    with pytest.raises(Trimmed) as gone:
        spool.read(0, 10)
    assert gone.value.start == spool.start
    # What is left starts on a record boundary: a viewer resumes there cleanly.
    records = wire.SpoolReader().feed(spool.read(spool.start, spool.end))
    assert records and all(r[:3] == (b"1", 1, b"x" * 1000 + b"\n") for r in records)


def test_send_spool_from_an_offset_then_eof(tmp_path: Path) -> None:
    spool = Spool(str(tmp_path), max_bytes=1 << 20)
    a, b = wire.record(b"1", 1, b"one\n"), wire.record(b"2", 2, b"two\n")
    spool.append(a)
    spool.append(b)
    spool.close()
    sent: list[bytes] = []
    viewers.send_spool(sent.append, spool, len(a), {"live": False}, 0.1, threading.Event())
    items = wire.WireReader().feed(b"".join(sent))
    assert items[0] == {"t": "hello", "live": False}
    data = [i for i in items if isinstance(i, wire.Data)]
    assert [(d.offset, d.data) for d in data] == [(len(a), b)]
    assert items[-1] == {"t": "eof", "end": len(a) + len(b)}


def test_a_runaway_line_is_cut_into_tagged_pieces() -> None:
    line = b"[7]:" + b"z" * (wire.RECORD_MAX * 2 + 10)
    *pieces, rest = daemon.split_line(line)
    assert all(p.startswith(b"[7]:") and p.endswith(b"\n") for p in pieces)
    assert all(len(p) <= wire.RECORD_MAX + 1 for p in pieces)
    assert rest.startswith(b"[7]:")
    body = b"".join(p[4:-1] for p in pieces) + rest[4:]
    assert body == line[4:]


class FakeAgent:
    """Each open() is a channel; the test hands its frames over as the reader would."""

    def __init__(self) -> None:
        self.opened: list[tuple[str, dict[str, Any]]] = []
        self.sent: list[bytes] = []
        self.frame: Any = None
        self.end: Any = None

    def open(self, op: str, args: dict[str, Any], on_frame: Any, on_end: Any) -> Any:
        self.opened.append((op, args))
        self.frame, self.end = on_frame, on_end
        agent = self

        class Chan:
            open = True

            def send(self, data: bytes) -> None:
                agent.sent.append(data)

            def end(self) -> None:
                pass

        return Chan()


async def test_a_new_channel_resumes_at_the_last_whole_record() -> None:
    from ddptui.remote.agents.link import NodeLink, Record

    a, b, c = (wire.record(b"1", i, f"line {i}\n".encode()) for i in range(3))
    got: list[object] = []
    agent = FakeAgent()
    link = NodeLink("run", 0)
    link.open(agent, "start", {}, got.extend, lambda why: None)  # type: ignore[arg-type]
    # The first channel breaks in the middle of b; the host resends from where we asked,
    # and a little before (a relay's buffer): nothing twice, nothing missed.
    agent.frame(b"d", wire.data_frame(0, a + b[:5]))
    assert link.offset == 0  # line 0 waits a moment for the lines behind it: not handed on yet
    link.hand_on()
    assert link.offset == len(a)  # b is incomplete: resume at its start
    link.open(agent, "attach", {}, got.extend, lambda why: None)  # type: ignore[arg-type]
    assert agent.sent[-1] == b"hello %d\n" % len(a)
    agent.frame(b"d", wire.data_frame(0, a + b) + wire.data_frame(len(a + b), c))
    link.hand_on()  # lines close behind each other go on merged (remote/agents/link.py COALESCE_S)
    records = [r for r in got if isinstance(r, Record)]
    assert b"".join(r.data for r in records) == b"line 0\nline 1\nline 2\n"
    assert records[0].end == len(a) and records[-1].end == link.offset == len(a + b + c)
