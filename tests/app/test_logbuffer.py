"""The dashboard's log model: bounded buffers, views, errors, filters, what waits to be drawn."""

from __future__ import annotations

import gc
import re
from collections.abc import Iterable, Sequence

from ddptui.remote.events import LogBatch, Stream
from ddptui.tui.dashboard.logbuffer import ALL, KIND, TEXT, Line, Lines, LogBuffer, View, clean, tag


def batch(
    lines: Sequence[tuple[int | None, str]], node: int = 0, stream: Stream = "stdout"
) -> LogBatch:
    return LogBatch(f"node{node}", node, stream, tuple(lines))


def texts(lines: Iterable[Line]) -> list[str]:
    return [line[TEXT] for line in lines]


def test_lines_go_to_their_rank_and_to_all_in_order() -> None:
    buf = LogBuffer()
    buf.add(batch([(0, "a"), (1, "b"), (None, "launcher says")], node=0))
    buf.add(batch([(2, "c")], node=1))
    assert texts(buf.select()) == ["a", "b", "launcher says", "c"]
    buf.view = View("rank", 1)
    assert texts(buf.select()) == ["b"]
    buf.view = View("node", 0)
    assert texts(buf.select()) == ["launcher says"]
    assert buf.views() == [ALL, View("rank", 0), View("rank", 1), View("rank", 2), View("node", 0)]
    assert buf.rank_hosts == {0: 0, 1: 0, 2: 1}
    assert buf.received == 4


def test_ranks_announced_before_they_print_have_views() -> None:
    buf = LogBuffer()
    buf.add_ranks(1, "node1", (2, 3))
    assert buf.views() == [ALL, View("rank", 2), View("rank", 3)]
    buf.view = View("rank", 3)
    assert buf.select() == []


def test_buffers_are_bounded_and_keep_the_newest() -> None:
    buf = LogBuffer(per_rank=5, all_ranks=7, shown=4)
    buf.add(batch([(0, f"r0 {i}") for i in range(10)]))
    buf.add(batch([(1, f"r1 {i}") for i in range(10)]))
    # all ranks keep 7; the node 5 for each of its ranks and 5 for its own lines: 15, in the
    # chunks they came in (one over, at most)
    assert len(buf.all) == 7 and len(buf.by_node[0]) == 20
    assert texts(buf.select()) == ["r1 6", "r1 7", "r1 8", "r1 9"]  # `shown` at most
    buf.view = View("rank", 0)
    assert texts(buf.select()) == ["r0 6", "r0 7", "r0 8", "r0 9"]
    assert buf.received == 20


def test_errors_survive_a_flood_of_stdout() -> None:
    buf = LogBuffer(per_rank=10, all_ranks=10)
    buf.add(batch([(0, "boom")], stream="stderr"))
    buf.add(batch([(0, f"ok {i}") for i in range(100)]))
    buf.errors_only = True
    assert texts(buf.select()) == ["boom"]
    buf.view = View("rank", 0)
    assert texts(buf.select()) == ["boom"]


def test_traceback_lines_count_as_errors_on_stdout_too() -> None:
    buf = LogBuffer()
    tb = [
        "step 1",
        "Traceback (most recent call last):",
        '  File "train.py", line 3, in <module>',
        "    main()",
        "ValueError: bad",
        "step 2",
    ]
    buf.add(batch([(0, t) for t in tb]))
    kinds = [line[KIND] for line in buf.all]
    assert kinds == ["out", "tb", "tb", "tb", "tb", "out"]
    buf.errors_only = True
    assert texts(buf.select()) == tb[1:5]


def test_torch_rank_prefixed_traceback_is_recognised() -> None:
    buf = LogBuffer()
    lines = ["[rank1]: Traceback (most recent call last):", "[rank1]:   File 'x'", "[rank1]: E"]
    buf.add(batch([(1, t) for t in lines]))
    assert [line[KIND] for line in buf.all] == ["tb", "tb", "tb"]


def test_traceback_state_is_per_rank_and_stream() -> None:
    buf = LogBuffer()
    buf.add(batch([(0, "Traceback (most recent call last):")], stream="stderr"))
    buf.add(batch([(1, "  indented but rank 1"), (0, "  indented stdout of rank 0")]))
    assert [line[KIND] for line in buf.all] == ["tb", "out", "out"]


def test_pending_holds_only_new_lines_of_the_current_view_that_pass() -> None:
    buf = LogBuffer()
    buf.view = View("rank", 1)
    buf.pattern = re.compile("loss")
    buf.select()
    buf.add(batch([(0, "loss 1"), (1, "loss 2"), (1, "other")]))
    assert texts(buf.take()) == ["loss 2"]
    assert buf.take() == []
    buf.errors_only = True
    buf.pattern = None
    buf.select()
    buf.add(batch([(1, "out"), (1, "err")], stream="stderr"))
    buf.add(batch([(1, "plain")]))
    assert texts(buf.take()) == ["out", "err"]


def test_pending_is_bounded_by_what_a_view_shows() -> None:
    buf = LogBuffer(shown=3)
    buf.add(batch([(0, str(i)) for i in range(10)]))
    assert texts(buf.take()) == ["7", "8", "9"]


def test_filter_reaches_back_through_the_buffer() -> None:
    buf = LogBuffer(shown=2)
    buf.add(batch([(0, f"epoch {i}") if i % 10 == 0 else (0, "noise") for i in range(100)]))
    buf.pattern = re.compile(r"epoch \d")
    assert texts(buf.select()) == ["epoch 80", "epoch 90"]


def test_clean_keeps_what_a_terminal_would_show() -> None:
    assert clean("\x1b[31mred\x1b[0m text") == "red text"
    assert clean("10%\r50%\r100%") == "100%"
    assert clean("done\r") == "done"
    assert clean("a\x0cb\u2028c") == "ab c"
    assert clean("plain") == "plain"
    assert clean("a\tb") == "a       b"
    # nothing that would drive the terminal: a bell, a C1 CSI, a raw byte 0x9b, OSC 52
    assert clean("bell\x07 csi\x9b2J raw\udc9b") == "bell csi raw"
    assert clean("a\x1b]52;c;aGk=\x07b\x1bPq\x1b\\c\r") == "abc"


def test_tag_pads_rank_and_host() -> None:
    buf = LogBuffer()
    buf.add_ranks(0, "n0", range(12))
    buf.add_ranks(1, "a-very-long-hostname", (12,))
    widths = buf.tag_widths()
    assert widths == (3, 12)
    buf.add(batch([(3, "x"), (None, "y")], node=1))
    line = list(buf.all)
    assert tag(line[0], widths) == "r3  node1       "
    assert tag(line[1], widths) == "--  node1       "
    assert len(tag(line[0], widths)) == 3 + 1 + 12


def test_many_ranks_share_a_budget_of_lines() -> None:
    """Memory stays bounded by the number of lines, however many ranks: each node keeps a
    share for each of its ranks and one for its own lines, at most per_rank lines a share;
    more ranks, smaller shares (for every node's buffer at once)."""
    buf = LogBuffer(per_rank=10, budget=50)
    buf.add_ranks(0, "n0", range(4))  # 5 shares of 10
    buf.add(batch([(r, f"{r}:{i}") for i in range(30) for r in range(4)]))
    assert len(buf.by_node[0]) == 50
    buf.add_ranks(1, "n1", range(4, 8))  # 10 shares of 5
    buf.add(batch([(r, f"{r}:{i}") for i in range(10) for r in range(4, 8)], node=1))
    buf.add(batch([(r, f"{r}:{i}") for i in range(30, 40) for r in range(4)]))
    assert len(buf.by_node[0]) == len(buf.by_node[1]) == 25
    buf.view = View("rank", 0)
    assert texts(buf.select()) == [f"0:{i}" for i in range(34, 40)]


def test_lines_keep_chunks_and_the_newest_limit() -> None:
    store = Lines(limit=5)
    store.extend(((0, 0, "n", "out", "a"), (0, 0, "n", "out", "b")))
    store.extend(tuple((0, 0, "n", "out", str(i)) for i in range(4)))
    assert len(store) == 6  # one chunk over the limit at most: whole chunks are dropped
    store.extend(((0, 0, "n", "out", "x"),))
    assert [line[TEXT] for line in store] == ["0", "1", "2", "3", "x"]
    assert [line[TEXT] for line in store.newest_first()] == ["x", "3", "2", "1", "0"]
    store.extend(tuple((0, 0, "n", "out", str(i)) for i in range(9)))
    assert [line[TEXT] for line in store] == ["4", "5", "6", "7", "8"]  # a chunk over the limit


def test_buffered_lines_leave_the_cycle_collector_alone() -> None:
    """Lines are exact tuples of atoms (the collector stops tracking those) and are stored in
    chunks: a full collection then costs ~nothing however many lines are kept. Tracked lines
    (a NamedTuple) made every full collection take ~150 ms under a flood."""
    buf = LogBuffer()
    for b in range(50):
        buf.add(batch([(r, f"step {b}") for r in range(32)] * 10))
    gc.collect()
    assert not any(gc.is_tracked(line) for line in buf.all)
    chunks = sum(len(store.chunks) for store in buf.by_node.values()) + len(buf.all.chunks)
    assert chunks == 50 + 50 and len(buf.all) == 16_000  # a batch is one chunk where kept
