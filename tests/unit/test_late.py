"""Lines that came late (remote/run/late.py): where they go in the run's logs, and what of the
summary's list is taken for a stream to read. The hosts are tests/e2e's."""

from __future__ import annotations

from pathlib import Path

from ddptui.remote.run.late import Unread, _store
from ddptui.remote.store.record import Recorder


def test_each_log_gets_one_line_saying_its_lines_came_late(tmp_path: Path) -> None:
    rec = Recorder(tmp_path)
    u = Unread(node=1, since=0, host="node1", offset=4096)
    batches = [
        (b"1", ((2, "tick 2 21"), (3, "tick 3 21"))),
        (b"2", ((2, "warning 2"), (None, "torchrun's own"))),
        (b"1", ((3, "tick 3 22"),)),
    ]
    assert _store(rec, u, batches) == 5
    rec.close()
    logs = {name: (tmp_path / name).read_text().splitlines() for name in
            ("rank-2.log", "rank-3.log", "node-1.log")}  # fmt: skip
    mark = "ddptui: the lines below came late: node1 printed them while cut off from the launcher"
    assert [line.startswith(mark) for line in logs["rank-2.log"]] == [True, False, False]
    assert logs["rank-2.log"][1:] == ["tick 2 21", "warning 2"]
    assert logs["rank-3.log"][1:] == ["tick 3 21", "tick 3 22"]
    assert logs["node-1.log"][1:] == ["torchrun's own"] and logs["node-1.log"][0].startswith(mark)


def test_what_is_not_an_unread_stream_is_passed_over() -> None:
    good = {"node": 1, "since": 2, "host": "node1", "offset": 10}
    assert Unread.parse(good) == Unread(1, 2, "node1", 10)
    assert Unread.parse({"node": 1, "host": "node1", "offset": 10}) == Unread(1, 0, "node1", 10)
    for bad in ({"node": "x", "host": "h", "offset": 1}, {"node": 1}, "node1", None, [1]):
        assert Unread.parse(bad) is None
