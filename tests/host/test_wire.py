"""The protocol's framing and the host's spool, piece by piece (pure; no processes)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remote.host import daemon, wire
from remote.host.spool import Spool, Trimmed


def stream(*records: bytes, offset: int = 0) -> bytes:
    data = b"".join(records)
    return wire.MARK + wire.control(t="hello") + wire.data_frame(offset, data)


def feed_in_pieces(reader: wire.WireReader, data: bytes, cuts: list[int]) -> list[object]:
    items: list[object] = []
    at = 0
    for cut in [*sorted(set(c % (len(data) + 1) for c in cuts)), len(data)]:
        items += reader.feed(data[at:cut])
        at = cut
    return items


@given(st.lists(st.integers(min_value=0), max_size=8))
def test_frames_survive_any_split(cuts: list[int]) -> None:
    rec = [wire.record(b"1", 5, b"a\nb\n"), wire.meta(6, t="exit", code=0)]
    data = b"Welcome!\n" + stream(*rec) + wire.control(t="eof")
    items = feed_in_pieces(wire.WireReader(), data, cuts)
    noise = b"".join(i.data for i in items if isinstance(i, wire.Noise))
    chunks = b"".join(i.data for i in items if isinstance(i, wire.Data))
    controls = [i for i in items if isinstance(i, dict)]
    assert noise == b"Welcome!\n"
    assert chunks == b"".join(rec)
    assert controls == [{"t": "hello"}, {"t": "eof"}]
    assert wire.SpoolReader().feed(chunks) == [
        (b"1", 5, b"a\nb\n", len(rec[0])),
        (b"m", 6, b'{"t": "exit", "code": 0}', len(rec[0]) + len(rec[1])),
    ]


def test_a_stray_line_after_the_mark_is_noise_not_a_crash() -> None:
    data = wire.MARK + b"sitecustomize says hi\n" + wire.control(t="hb")
    items = wire.WireReader().feed(data)
    assert [type(i).__name__ for i in items] == ["Noise", "dict"]
    assert isinstance(items[0], wire.Noise) and items[0].data == b"sitecustomize says hi\n"


def test_a_huge_line_without_newline_before_the_mark_is_passed_on() -> None:
    reader = wire.WireReader()
    items = reader.feed(b"\0" * 900_000)
    assert sum(len(i.data) for i in items if isinstance(i, wire.Noise)) > 800_000
    assert len(reader.buf) < len(wire.MARK)


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
    daemon.send_spool(sent.append, spool, len(a), {"live": False}, 0.1, threading.Event())
    items = wire.WireReader().feed(wire.MARK + b"".join(sent))
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


class FakeProcess:
    def __init__(self, data: bytes) -> None:
        self.data, self.written = data, b""

    async def read(self, n: int) -> bytes:
        chunk, self.data = self.data[:n], self.data[n:]
        return chunk

    def write(self, data: bytes) -> None:
        self.written += data

    def kill(self) -> None:
        pass


class FakeTransport:
    """Each start() answers with the next canned stream."""

    def __init__(self, *streams: bytes) -> None:
        from remote.inventory import Host

        self.host = Host(0, "h", "h", "local", None, None, None, None, "python3", None, {}, None)
        self.streams = list(streams)
        self.procs: list[FakeProcess] = []

    async def start(self, argv: list[str]) -> FakeProcess:
        self.procs.append(FakeProcess(self.streams.pop(0)))
        return self.procs[-1]


async def test_a_new_connection_resumes_at_the_last_whole_record() -> None:
    from remote.link import NodeLink, Record

    a, b, c = (wire.record(b"1", i, f"line {i}\n".encode()) for i in range(3))
    # The first connection breaks in the middle of b; the host resends from where we asked,
    # and a little before (a relay's buffer): nothing twice, nothing missed.
    first = wire.MARK + wire.data_frame(0, a + b[:5])
    second = wire.MARK + wire.data_frame(0, a + b) + wire.data_frame(len(a + b), c)
    link = NodeLink(FakeTransport(first, second), "run", 0)  # type: ignore[arg-type]
    await link.open({"do": "start"})
    got: list[object] = []
    while (items := await link.read()) is not None:
        got += items
    assert link.offset == len(a)  # b is incomplete: resume at its start
    await link.open({"do": "attach"})
    assert link.transport.procs[-1].written.endswith(b"hello %d\n" % len(a))  # type: ignore[attr-defined]
    while (items := await link.read()) is not None:
        got += items
    records = [r for r in got if isinstance(r, Record)]
    assert [r.data for r in records] == [b"line 0\n", b"line 1\n", b"line 2\n"]
    assert [r.end for r in records] == [len(a), len(a + b), len(a + b + c)]
