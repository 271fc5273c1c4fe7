"""The run's hang rule (remote/host/hangrule.py) on recorded and synthesised sample streams: every
scenario of tests/support/hangscenarios.py, hung or silent but alive, and the rule's parts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hangscenarios import (
    ALL_REDUCE,
    BARRIER,
    DDP_BACKWARD,
    SCENARIOS,
    STUCK_BEFORE,
    Scenario,
    run_rule,
)

from ddptui.remote.host import hangrule
from ddptui.remote.host.hangrule import HangRule
from ddptui.remote.host.watch import POLL_S, Guard, HangWatch, keep, merge

TARGET_S = 120.0  # a hang named within this of the last progress, with default settings


@pytest.mark.parametrize("sc", SCENARIOS, ids=lambda sc: sc.name)
def test_every_scenario(sc: Scenario) -> None:
    out = run_rule(sc)
    assert not out.false_alarm, f"{sc.name}: said hang at {out.named_at} s"
    if sc.hang_at is None:
        assert out.named_at is None
        return
    took = out.detection()
    assert took is not None, f"{sc.name}: never named"
    bound = min(TARGET_S, sc.hang_after) if sc.hang_after else TARGET_S
    if sc.culprits:  # a hang with no rank to blame waits for job.hang_after
        assert took <= bound
    assert out.culprits == sc.culprits


def rank(frames: list[list[Any]] | None, cpu: float = 0.0, io: int = 0) -> dict[str, Any]:
    return {"cpu": cpu, "io": io, "frames": frames}


def test_recorded_stacks_are_read_as_py_spy_showed_them() -> None:
    assert hangrule.collective(ALL_REDUCE) == "all_reduce"
    assert hangrule.collective(DDP_BACKWARD) == "DDP's gradient all-reduce (backward)"
    assert hangrule.collective(STUCK_BEFORE) is None  # a loop at the script's top level
    assert hangrule.frame_text(STUCK_BEFORE) == "<module> (job.py:20)"


def test_a_rank_is_moving_stuck_or_waiting() -> None:
    gap = 15.0
    assert hangrule.classify(rank(ALL_REDUCE), rank(ALL_REDUCE, cpu=15.0), gap) == "waiting"
    assert hangrule.classify(rank(STUCK_BEFORE), rank(STUCK_BEFORE), gap) == "stuck"
    assert hangrule.classify(rank(STUCK_BEFORE), rank(STUCK_BEFORE, cpu=1.0), gap) == "moving"
    assert hangrule.classify(rank(STUCK_BEFORE), rank(STUCK_BEFORE, io=1 << 20), gap) == "moving"
    assert hangrule.classify(rank(STUCK_BEFORE), rank(ALL_REDUCE), gap) == "moving"
    blocked = {**rank(STUCK_BEFORE), "in_io": True}
    assert hangrule.classify(rank(STUCK_BEFORE), blocked, gap) == "moving"
    assert hangrule.classify(rank(None), rank(None), gap) == "unread"
    assert hangrule.classify(rank(None), rank(None, cpu=1.0), gap) == "moving"


def hung(cpu: float = 0.0) -> dict[int, dict[str, Any]]:
    return {0: rank(ALL_REDUCE), 1: rank(STUCK_BEFORE, cpu=cpu), 2: rank(BARRIER)}


def test_named_on_the_third_still_sample_with_culprit_host_and_stack() -> None:
    rule = HangRule()
    assert not rule.due(0, 29.0)
    assert rule.due(0, 30.0)
    assert rule.feed(0, 30.0, hung()) is None
    assert not rule.due(10, 40.0)  # the gap: 15 s
    assert rule.feed(15, 45.0, hung()) is None
    hang = rule.feed(30, 60.0, hung())
    assert hang is not None and hang.culprits == [1]
    assert hang.waiting == {"all_reduce": [0], "barrier": [2]}
    text = hang.text({0: "node0", 1: "node1", 2: "node2"})
    assert text == ("hung 60 s: rank 1 on node1 stuck in <module> (job.py:20), while rank 0 "
                    "waits in all_reduce; rank 2 waits in barrier")  # fmt: skip
    assert rule.feed(45, 75.0, hung()) is None  # said once


def test_a_line_between_samples_starts_afresh() -> None:
    rule = HangRule()
    rule.feed(0, 30.0, hung())
    rule.feed(15, 45.0, hung())
    assert rule.feed(30, 31.0, hung()) is None  # a line came 29 s ago: silent 31 s, not 60
    assert rule.feed(45, 46.0, hung()) is None
    assert rule.feed(60, 61.0, hung()) is not None


def test_a_rank_that_moves_clears_the_watch_until_it_stops_again() -> None:
    rule = HangRule()
    rule.feed(0, 30.0, hung())
    rule.feed(15, 45.0, hung())
    assert rule.feed(30, 60.0, hung(cpu=5.0)) is None  # rank 1 used 5 s of CPU: it works
    assert rule.feed(45, 75.0, hung(cpu=5.0)) is None
    assert rule.feed(60, 90.0, hung(cpu=5.0)) is not None


def test_no_stack_readable_falls_back_to_hang_after_with_no_cpu_or_io() -> None:
    rule = HangRule(hang_after=120)
    blind = {0: rank(None), 1: rank(None)}
    assert rule.feed(0, 30.0, blind) is None
    assert rule.feed(30, 60.0, blind) is None
    assert rule.feed(60, 90.0, blind) is None
    hang = rule.feed(90, 120.0, blind)
    assert hang is not None and hang.confirmed_by == "silence" and hang.culprits == []


def test_a_rank_missing_from_a_sample_is_never_a_hang() -> None:
    rule = HangRule()
    rule.feed(0, 30.0, hung())
    rule.feed(15, 45.0, {0: rank(ALL_REDUCE), 2: rank(BARRIER)})  # node1 did not answer
    assert rule.feed(30, 60.0, hung()) is None


class Cluster:
    """Two nodes answering the watch's asks at once, from a simulated clock: rank 1 (node1)
    sleeps before an all_reduce from t=0, rank 0 (node0) waits in it. node1 may be mute."""

    def __init__(self) -> None:
        self.now = 0.0
        self.asked: list[bool] = []
        self.mute: set[int] = set()
        self.watch = HangWatch(
            ["node0", "node1"], None, self.ask, self.hung, clock=lambda: self.now
        )
        self.said: list[tuple[Any, dict[int, str]]] = []

    def ask(self, seq: int, stacks: bool) -> None:
        self.asked.append(stacks)
        frames = {0: ALL_REDUCE, 1: STUCK_BEFORE}
        for node in (0, 1):
            if node not in self.mute:
                got = {str(node): rank(frames[node] if stacks else None)}
                self.watch.answer(node, seq, {"quiet": self.now, "ranks": got})

    def hung(self, hang: Any, ranks: dict[int, Any], hosts: dict[int, str]) -> None:
        self.said.append((hang, hosts))

    def run(self, until: float) -> None:
        while self.now <= until:
            self.watch.step()
            if self.said:
                return
            self.now += POLL_S


def test_the_watch_asks_for_stacks_only_once_silent_and_names_the_culprit_s_host() -> None:
    c = Cluster()
    c.run(120)
    assert c.asked[:6] == [False] * 6  # 0..25 s: no line for less than 30 s
    assert c.asked[6] is True  # 30 s
    [(hang, hosts)] = c.said
    assert hang.culprits == [1] and hosts == {0: "node0", 1: "node1"}
    assert c.now == 60  # the third still sample: 30, 45, 60 s
    assert c.asked.count(True) == 3


def test_a_node_that_does_not_answer_delays_the_verdict_but_never_makes_one() -> None:
    c = Cluster()
    c.mute = {1}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("ddptui.remote.host.watch.ANSWER_S", 0.0)
        c.run(300)
        assert c.said == []  # node1's silence is not its rank's: no quiet known, no stacks
        assert True not in c.asked
        c.mute = set()
        asked_at = c.now
        c.run(600)
    assert c.said and c.now - asked_at <= 60


def test_merge_takes_the_shortest_silence_and_each_rank_s_host() -> None:
    ranks, hosts, quiet = merge(
        {0: {"quiet": 40.0, "ranks": {"0": {}}}, 1: {"quiet": 12.0, "ranks": {"1": {}}}},
        ["a", "b"],
    )
    assert (sorted(ranks), hosts, quiet) == ([0, 1], {0: "a", 1: "b"}, 12.0)
    assert merge({0: {"quiet": None, "ranks": {}}}, ["a"])[2] is None


def test_a_hang_keeps_every_rank_s_stack_and_the_verdict(tmp_path: Path) -> None:
    ranks = hung()
    hang = _confirm(ranks)
    hosts = {0: "node0", 1: "node1", 2: "node2"}
    path = keep(str(tmp_path), 2, hang, ranks, hosts)
    assert path == str(tmp_path / "hang-2.json")
    kept = json.loads(Path(path).read_text())
    assert kept["culprits"] == [1] and kept["text"] == hang.text(hosts)
    assert kept["ranks"]["1"]["frames"] == STUCK_BEFORE and kept["ranks"]["1"]["host"] == "node1"


def _confirm(ranks: dict[int, dict[str, Any]]) -> Any:
    rule = HangRule()
    for k in range(3):
        hang = rule.feed(15 * k, 30.0 + 15 * k, ranks)
    return hang


class FakeHub:
    def __init__(self) -> None:
        self.failed: list[tuple[str, int | None, bool]] = []
        self.bad: list[int | None] = []
        self.causes: list[str] = []
        self.later: list[int] = []  # replace_later's nodes
        self.replaced = 0

    def fail(
        self,
        reason: str,
        node: int | None,
        final: bool = False,
        bad: bool = False,
        cause: str = "hang",
    ) -> None:
        self.failed.append((reason, node, final))
        self.causes.append(cause)
        if bad:
            self.bad.append(node)

    def replace_later(self, node: int, reason: str) -> None:
        self.later.append(node)


@pytest.mark.parametrize("action", ["restart", "stop", "warn"])
def test_job_on_hang_fails_the_attempt_stops_the_run_or_only_says_it(
    tmp_path: Path, action: str
) -> None:
    hub, said = FakeHub(), []
    spec = {"names": ["node0", "node1", "node2"], "hang_after": 600.0, "on_hang": action}
    guard = Guard(hub, spec, str(tmp_path), None, lambda *w: said.append(w))
    hosts = {0: "node0", 1: "node1", 2: "node2"}
    ranks = hung()
    guard.hung(0, _confirm(ranks), ranks, hosts)
    [(event, status, message)] = said
    assert (event, status) == ("hang", "running")
    assert "rank 1 on node1 stuck in <module> (job.py:20)" in message
    assert str(tmp_path / "hang-0.json") in message
    if action == "warn":
        assert hub.failed == [] and message.endswith("left running (job.on_hang: warn)")
    else:
        [(reason, node, final)] = hub.failed
        assert reason.startswith("hung: hung 60 s: rank 1 on node1") and node == 1
        assert final is (action == "stop")


def test_the_same_host_hung_twice_in_a_row_is_said_to_be_bad(tmp_path: Path) -> None:
    said: list[Any] = []
    spec = {"names": ["node0", "node1", "node2"], "hang_after": 600.0, "on_hang": "restart"}
    hub = FakeHub()
    guard = Guard(hub, spec, str(tmp_path), None, lambda *w: said.append(w[2]))
    hosts = {0: "node0", 1: "node1", 2: "node2"}
    ranks = hung()
    for attempt in (0, 1):
        guard.hung(attempt, _confirm(ranks), ranks, hosts)
    assert "bad host" not in said[0]
    assert "node1 hung twice in a row: a bad host" in said[1]
    assert hub.bad == [1]  # the hub marks it bad: a spare takes its place


@pytest.mark.parametrize(
    ("action", "spares", "restarts", "host", "then"),
    [
        ("warn", 1, 3, "node2", ""),
        ("replace", 1, 3, "node2", "now"),
        ("replace", 0, 3, "node2", "later"),  # no spare left: swapped if one frees up
        ("replace", 1, 0, "node2", "later"),  # no restart left: no attempt to end for it
        ("replace", 1, 3, "node0", ""),  # the hub's host is only named
    ],
)
def test_job_on_straggler_swaps_its_host_now_later_or_only_says_it(
    action: str, spares: int, restarts: int, host: str, then: str
) -> None:
    hub, said = FakeHub(), []
    names = ["node0", "node1", "node2"]
    spec = {"names": names, "on_straggler": action, "spares": spares, "restarts": restarts}
    guard = Guard(hub, spec, "", None, lambda *w: said.append(w))
    guard.straggler(0, (3, 0.3), {3: host})
    [(event, status, message)] = said
    assert (event, status) == ("straggler", "running")
    assert message.startswith(f"rank 3 on {host} is a straggler")
    node = names.index(host)
    if then == "now":  # the bad-host path: a spare takes its node rank at once
        assert message.endswith("a spare takes its place now")
        assert [n for _, n, _ in hub.failed] == hub.bad == [node]
        assert hub.causes == ["straggler"] and hub.later == []
    else:
        assert hub.failed == []
        assert hub.later == ([node] if then == "later" else [])
    if host == "node0":
        assert message.endswith("node 0's host runs the hub: not replaced")
