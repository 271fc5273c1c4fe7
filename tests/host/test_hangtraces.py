"""NCCL's flight recorder at a hang the run's own watch found (remote/host/hangtraces.py): every
node's traces sent to the hub in pieces over the real hub link, put back together, kept in node
0's directory with torch's verdict, named in the hang's word and copied by a launcher."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pickle
import random
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

from ddptui.remote.host import hangtraces, protocol, state, watch
from ddptui.remote.host import stacks as host_stacks
from ddptui.remote.host.channel import node_key
from ddptui.remote.host.hangrule import Hang
from ddptui.remote.host.hub import Hub
from ddptui.remote.host.hublink import HubLink
from ddptui.remote.stalls import kept

DATA = Path(__file__).parents[1] / "data" / "flight-recorder"


def recorded() -> dict[str, Any]:
    """Two ranks' real traces (torch 2.13, gloo): rank 1 missed the barrier rank 0 waits in."""
    where = DATA / "barrier-missing-rank-1"
    return {
        p.name.removeprefix(host_stacks.TRACE): host_stacks.read_trace(str(p))
        for p in sorted(where.glob(host_stacks.TRACE + "*"))
    }


def sent(found: dict[str, Any], seq: str = "0.1") -> list[dict[str, Any]]:
    return list(hangtraces.pieces(seq, found))


def test_traces_go_in_pieces_and_come_back_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hangtraces, "PIECE", 100)
    traces = recorded()
    msgs = sent({r: {"trace": t} for r, t in traces.items()} | {"5": {"error": "no pipe"}})
    assert len(msgs) > 4 and msgs[-1] == {"seq": "0.1", "done": True, "errors": {"5": "no pipe"}}
    assert all(len(json.dumps(m)) < 200 for m in msgs)
    gather = hangtraces.Gather("0.1", 1, {"0": 0, "1": 0, "5": 0})
    for m in [{"seq": "0.0", "rank": "0", "i": 0, "n": 1, "data": "junk"}, *msgs]:
        gather.add(0, m)  # another ask's piece is not this one's
    got, missing = gather.wait(0)
    assert got == json.loads(json.dumps(traces)) and missing == {"5": "no pipe"}


def test_a_trace_in_part_too_large_or_unreadable_is_named_not_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hangtraces, "PIECE", 100)
    trace = {"entries": [random.random() for _ in range(200)]}
    gather = hangtraces.Gather("s", 2, {"0": 1, "1": 1, "2": 0})
    msgs = sent({"0": {"trace": trace}, "1": {"trace": trace}}, "s")
    for m in msgs:
        if not (m.get("rank") == "1" and m.get("i") == 1):  # a piece of rank 1's lost
            gather.add(1, m)
    gather.add(0, {"seq": "s", "rank": "2", "i": 0, "n": 1, "data": "not base64!"})
    got, missing = gather.wait(0.05)  # node 0 never said done: the deadline ends the wait
    assert list(got) == ["0"]
    assert missing["1"] == "its trace came only in part"
    assert missing["2"].startswith("its trace could not be read")
    monkeypatch.setattr(hangtraces, "GATHER_MAX", 150)
    gather = hangtraces.Gather("s", 1, {"0": 0, "1": 0})
    for m in msgs:
        gather.add(0, m)
    got, missing = gather.wait(0)
    assert got == {} and set(missing.values()) == {"its trace was more than the hub takes"}


def test_every_peer_sends_its_traces_over_the_hub_link() -> None:
    """A trace of megabytes, over the real link, whose lines are 64 KB at most."""
    big = {"entries": [{"id": i, "frames": [f"{random.random():.17f}"] * 8} for i in range(20000)]}
    assert len(json.dumps(big)) > 4 << 20
    h = Hub("s3cret", ["node0", "node1", "node2"], 5.0, 0.1, lambda *a: None, "127.0.0.1")
    h.start()
    found = {1: {"2": {"trace": big}, "3": {"error": "no pipe"}}, 2: {"4": {"trace": [1, 2]}}}
    links = [
        HubLink(node_key("s3cret", k), k, 5.0, 0.1, lambda *a: None, on_flight=lambda k=k: found[k])
        for k in (1, 2)
    ]
    for link in links:
        link.connect("127.0.0.1", h.port)
    deadline = time.monotonic() + 5
    while len(h.joined) < 2:
        assert time.monotonic() < deadline, "a peer never joined"
        time.sleep(0.02)
    gather = hangtraces.Gather("0.1", 3, {"2": 1, "3": 1, "4": 2})
    h.traced = gather.add
    h.ask_flight("0.1")
    gather.add(0, {"seq": "0.1", "done": True, "errors": {}})  # node 0's own: none
    traces, missing = gather.wait(30)
    assert traces == {"2": big, "4": [1, 2]} and missing == {"3": "no pipe"}
    for link in links:
        link.leave("done")


def test_node_0_keeps_them_with_torch_s_verdict(tmp_path: Path) -> None:
    traces = json.loads(json.dumps(recorded()))  # as they came: JSON
    found = hangtraces.keep(str(tmp_path), 3, traces, {"7": "no pipe"})
    folder = tmp_path / "flight-3"
    assert found["dir"] == str(folder) and found["ranks"] == [0, 1]
    assert found["missing"] == {"7": "no pipe"} and found["missing_ranks"] == [1]
    assert "missing ranks: {1}" in found["verdict"] and "tabulate" not in found["verdict"]
    assert sorted(p.name for p in folder.iterdir()) == [
        "analysis.txt", "nccl_trace_rank_0.json", "nccl_trace_rank_1.json"
    ]  # fmt: skip
    assert json.loads((folder / "nccl_trace_rank_1.json").read_text()) == traces["1"]
    assert all(p.stat().st_mode & 0o077 == 0 for p in [folder, *folder.iterdir()])
    said = hangtraces.summary(found)
    assert said == f"flight recorder: 2 trace(s) kept in {folder}; its verdict: rank(s) 1 " \
        "missing from a collective"  # fmt: skip
    none = hangtraces.keep(str(tmp_path), 4, {}, {"0": "the flight recorder is not on"})
    assert hangtraces.summary(none) == "no flight recorder trace (the flight recorder is not on)"


@pytest.mark.security
def test_a_node_sends_only_its_own_ranks_traces() -> None:
    """Node 2 sends traces (and words) for node 1's ranks and one no node has: each is refused,
    node 1's own kept, and node 2 named (its trace replaced node 1's, and so the verdict)."""
    gather = hangtraces.Gather("s", 3, {"0": 0, "1": 1, "2": 1, "3": 2})
    for node, found in (
        (2, {"1": {"trace": ["forged"]}, "9": {"trace": ["x"]}, "2": {"error": "forged"}}),
        (1, {"1": {"trace": ["one"]}, "2": {"trace": ["two"]}}),
        (2, {"3": {"trace": ["three"]}}),
        (0, {"0": {"trace": ["zero"]}}),
    ):
        for m in sent(found, "s"):
            gather.add(node, m)
    traces, missing = gather.wait(0)
    assert traces == {"0": ["zero"], "1": ["one"], "2": ["two"], "3": ["three"]}
    assert missing == {} and gather.refused() == {2: [1, 2, 9]}
    kept = {"ranks": [0, 1, 2, 3], "dir": "d", "missing": {}, "missing_ranks": [],
            "refused": {"node2": [1, 2, 9]}}  # fmt: skip
    assert hangtraces.summary(kept).endswith(
        "; node2 sent traces of ranks not its own (1,2,9): refused"
    )


@pytest.mark.security
def test_a_zlib_bomb_unpacks_no_further_than_the_cap_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ranks' traces each within a rank's bound, 261 KB sent, became 191 MB held: at most
    UNPACKED_MAX is ever made, whatever a piece claims, the ranks in order, the cap said.
    (Here at 1/16 of the real bounds: unpacking 200 MB takes seconds.)"""
    mib = 1 << 20
    monkeypatch.setattr(host_stacks, "TRACE_MAX", 4 * mib)
    monkeypatch.setattr(hangtraces, "UNPACKED_MAX", 8 * mib)

    def packed(size: int) -> str:  # a JSON string of `size` bytes, zlib'd
        return base64.b64encode(zlib.compress(b'"' + b"a" * (size - 2) + b'"', 9)).decode()

    bomb = packed(15 * mib // 4)
    assert len(bomb) < 8 << 10
    gather = hangtraces.Gather("s", 1, {"0": 0, "1": 0, "2": 0, "3": 0})
    for rank, data in (("0", bomb), ("1", bomb), ("2", bomb), ("3", packed(1000))):
        gather.add(0, {"seq": "s", "rank": rank, "i": 0, "n": 1, "data": data})
    made: list[int] = []  # bytes each unpacking made, at most
    real = hangtraces.unpacked
    monkeypatch.setattr(hangtraces, "unpacked", lambda p, most: made.append(most) or real(p, most))
    traces, missing = gather.wait(0)
    assert list(traces) == ["0", "1", "3"]
    assert missing == {"2": "left out: the traces came to more than 8 MiB unpacked"}
    assert sum(len(t) for t in traces.values()) <= 8 * mib
    assert made[2] == mib // 2  # the room left, never a whole trace past the cap
    gather = hangtraces.Gather("s", 1, {"0": 0})
    gather.add(0, {"seq": "s", "rank": "0", "i": 0, "n": 1, "data": packed(4 * mib + 1)})
    assert gather.wait(0) == ({}, {"0": "its trace was more than 4 MiB unpacked"})
    kept = {"ranks": [0, 1, 3], "dir": "d", "missing": missing, "missing_ranks": []}
    assert hangtraces.summary(kept).endswith(
        "; 1 more left out: the traces came to more than 8 MiB unpacked"
    )
    with pytest.raises(ValueError, match="cut short"):
        hangtraces.unpacked(zlib.compress(b"[1, 2, 3]")[:-6], mib)


class FlightHub:
    """The hub as the watch's Guard sees it: node1's traces come when asked."""

    def __init__(self, peer: dict[str, Any]) -> None:
        self.peer = peer
        self.failed: list[tuple[str, int | None]] = []
        self.traced: Any = None

    def ask_flight(self, seq: str) -> None:
        for piece in hangtraces.pieces(seq, self.peer):
            self.traced(1, piece)

    def fail(self, reason: str, node: int | None, **kw: Any) -> None:
        self.failed.append((reason, node))


class Node:
    def __init__(self, own: dict[str, Any]) -> None:
        self.own = own

    def traces(self) -> dict[str, Any]:
        return self.own


def test_at_a_hang_the_verdict_names_the_rank_no_stack_could(tmp_path: Path) -> None:
    """Both ranks wait in a collective (no stack names a culprit): the flight recorder's
    verdict does, rank 1, missing from the barrier rank 0 waits in."""
    traces = recorded()
    hub = FlightHub({"1": {"trace": traces["1"]}})
    spec = {
        "names": ["node0", "node1"], "hang_after": 600.0, "on_hang": "restart",
        "env": {hangtraces.PIPE_VAR: "@scratch@/nccl_pipe_rank_"},
    }  # fmt: skip
    said: list[str] = []
    guard = watch.Guard(hub, spec, str(tmp_path), Node({"0": {"trace": traces["0"]}}),
                        lambda *w: said.append(w[2]))  # fmt: skip
    waits = ["barrier (distributed_c10d.py:4)"] * 2
    hang = Hang([], {"barrier": [0], "all_reduce": [1]}, 70.0, dict(enumerate(waits)), "stacks")
    ranks = {0: {"frames": []}, 1: {"frames": []}}
    guard.hung(0, hang, ranks, {0: "node0", 1: "node1"})
    [word] = said
    assert "rank 1 on node1 stuck in barrier" in word
    assert "its verdict: rank(s) 1 missing from a collective" in word
    assert hub.failed[0][1] == 1  # node1's attempt fails as the culprit's
    record = json.loads((tmp_path / "hang-0.json").read_text())
    assert record["culprits"] == [1] and record["flight_recorder"]["missing_ranks"] == [1]
    assert (tmp_path / "flight-0" / "analysis.txt").exists()


def test_a_launcher_copies_the_traces_beside_the_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    where = Path(state.node_dir("r1", 0))
    os.makedirs(where)
    hangtraces.keep(str(where), 0, json.loads(json.dumps(recorded())), {})
    (where / "hang-0.json").write_text("{}")
    (where / "flight-0" / "stray.pickle").write_text("x")  # not keep()'s: never sent
    records = watch.kept({"run_id": "r1"})["records"]
    assert sorted(records) == [
        "flight-0/analysis.txt", "flight-0/nccl_trace_rank_0.json",
        "flight-0/nccl_trace_rank_1.json", "hang-0.json",
    ]  # fmt: skip
    records["flight-1/../../evil.json"] = "{}"
    records["flight-0/nccl_trace_rank_9.json"] = "{not json"

    class Agent:
        async def request(self, op: str, args: Any) -> Any:
            assert op == protocol.HANGS
            return {"records": records}

    class Fleet:
        hosts = [type("H", (), {"name": "node0", "since": 0})]

        async def agent(self, k: int, emit: Any) -> Agent:
            return Agent()

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    asyncio.run(kept.fetch(Fleet(), lambda e: None, "r1", run_dir))  # type: ignore[arg-type]
    assert sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*")) == [
        "flight-0", "flight-0/analysis.txt", "flight-0/nccl_trace_rank_0.json",
        "flight-0/nccl_trace_rank_1.json", "hang-0.json",
    ]  # fmt: skip
    assert "missing ranks: {1}" in (run_dir / "flight-0" / "analysis.txt").read_text()


def test_a_trace_torn_by_another_dump_is_read_again_once_whole(tmp_path: Path) -> None:
    """Two dumps at once (a user's `stacks` and the run's hang watch): the rank rewrites its
    file while it is read. The torn read is not the answer; the whole one that follows is."""
    scratch = tmp_path / "scratch"
    scratch.mkdir(mode=0o700)
    pipe, trace = scratch / "nccl_pipe_rank_0.pipe", scratch / "nccl_trace_rank_0"
    os.mkfifo(pipe)
    fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)  # as NCCL's watchdog holds it
    whole = pickle.dumps({"entries": list(range(1000))})

    def rank() -> None:
        trace.write_bytes(whole[:100])  # torn: the other dump's write, caught half way
        time.sleep(0.5)
        trace.write_bytes(whole)

    threading.Thread(target=rank, daemon=True).start()
    try:
        got = host_stacks.flight(str(scratch), [0], 5.0)
    finally:
        os.close(fd)
    assert got == {"0": {"file": str(trace), "trace": {"entries": list(range(1000))}}}
