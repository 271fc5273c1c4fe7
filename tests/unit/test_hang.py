"""Hang detection (pure, on a fake clock), its guard task, and folding ranks and hosts."""

from __future__ import annotations

import asyncio

from ddptui.remote import fold
from ddptui.remote.events import (
    Event,
    Gpu,
    GpuStats,
    HangDetected,
    LogBatch,
    NodeExited,
    NodeRanks,
    NodeStarted,
    Notice,
)
from ddptui.remote.stalls import hang


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def started(clock: Clock, after: float | None = 15.0) -> hang.HangWatch:
    watch = hang.HangWatch(after, clock)
    for k in range(3):
        watch.feed(NodeStarted(f"node{k}", k, 100 + k, f"node{k}", (2 * k, 2 * k + 1)))
    return watch


def line(k: int, rank: int | None = None) -> LogBatch:
    return LogBatch(f"node{k}", k, "stdout", ((rank, "step"),))


def gpus(k: int, util: int) -> GpuStats:
    return GpuStats(f"node{k}", k, (Gpu(0, "NVIDIA H100 80GB HBM3", 81559, 1000, util),))


def test_silence_of_the_whole_job_is_a_stall_once() -> None:
    clock = Clock()
    watch = started(clock)
    clock.now += 14
    assert watch.check() is None
    watch.feed(line(0, 0))  # rank 0 alone printing keeps the job alive (rank-0-only logging)
    clock.now += 14
    assert watch.check() is None
    clock.now += 1
    stall = watch.check()
    assert stall is not None
    assert stall.reason == "silent" and stall.since == 15
    assert stall.ranks == (0, 1, 2, 3, 4, 5) and stall.hosts == ("node0", "node1", "node2")
    assert stall.text() == (
        "no rank printed a line for 15 s (ranks 0-5 on node[0-2]): the job may be stalled"
    )
    clock.now += 100
    assert watch.check() is None  # once per stall
    watch.feed(line(1, None))  # a line (a node's own, too) ends it
    clock.now += 15
    again = watch.check()
    assert again is not None and again.since == 15


def test_a_job_silent_from_the_start_stalls_too() -> None:
    clock = Clock()
    watch = started(clock)
    clock.now += 16
    stall = watch.check()
    assert stall is not None and stall.since == 16


def test_idle_gpus_count_only_once_the_job_used_them() -> None:
    clock = Clock()
    watch = started(clock)
    for _ in range(5):  # a CPU job on GPU hosts: the GPUs stay idle, lines keep coming
        clock.now += 10
        watch.feed(gpus(0, 0))
        watch.feed(line(0, 0))
        assert watch.check() is None
    watch.feed(gpus(1, 97))  # now the job computes on them...
    for _ in range(3):  # ...then they sit at 0 % while a rank still prints
        clock.now += 6
        watch.feed(gpus(1, 0))
        watch.feed(line(0, 0))
    stall = watch.check()
    assert stall is not None and stall.reason == "gpus-idle" and stall.since == 18
    assert "the job's GPUs sat at 0 % for 18 s" in stall.text()


def test_ranks_learned_during_the_run_and_the_end_of_the_run() -> None:
    clock = Clock()
    watch = hang.HangWatch(15.0, clock)
    watch.feed(NodeStarted("a", 0, 1, "a", ()))
    watch.feed(NodeRanks("a", 0, (0, 1, 2)))
    clock.now += 20
    stall = watch.check()
    assert stall is not None and stall.ranks == (0, 1, 2)
    watch.feed(line(0, 1))
    watch.feed(NodeExited("a", 0, 0))  # the run ends: silence now is no hang
    clock.now += 100
    assert watch.check() is None


def test_off() -> None:
    clock = Clock()
    watch = started(clock, after=None)
    clock.now += 10_000
    assert watch.check() is None


async def test_guard_warns_and_captures() -> None:
    clock = Clock()
    watch = started(clock, after=0.2)
    seen: list[Event] = []
    captured = asyncio.Event()

    async def capture() -> None:
        captured.set()

    clock.now += 1
    task = asyncio.ensure_future(hang.guard(watch, seen.append, capture))
    await asyncio.wait_for(captured.wait(), 5)
    task.cancel()
    hangs = [e for e in seen if isinstance(e, HangDetected)]
    assert hangs == [HangDetected((0, 1, 2, 3, 4, 5), ("node0", "node1", "node2"), 1.0, "silent")]
    notices = [e.text for e in seen if isinstance(e, Notice)]
    assert notices == [
        "no rank printed a line for 1 s (ranks 0-5 on node[0-2]): the job may be stalled; "
        "capturing every rank's stack"
    ]


def test_fold() -> None:
    assert fold.ranks([5, 0, 1, 2, 4]) == "0-2,4-5"
    assert fold.ranks([3]) == "3" and fold.ranks([]) == ""
    assert fold.hosts(["node0", "node1", "node2"]) == "node[0-2]"
    assert fold.hosts([f"gpu{i:02d}" for i in range(1, 65)]) == "gpu[01-64]"
    assert fold.hosts(["node9", "node10", "node12"]) == "node[9-10,12]"
    assert fold.hosts(["gpu-b", "node1", "login"]) == "node1,gpu-b,login"
    assert fold.hosts(["10.0.0.11", "10.0.0.12"]) == "10.0.0.[11-12]"
    assert fold.ranks_on([3], ["gpu-b"]) == "rank 3 on gpu-b"
    assert fold.ranks_on(range(2048), [f"n{i:03d}" for i in range(256)]) == (
        "ranks 0-2047 on n[000-255]"
    )
