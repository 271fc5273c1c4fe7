"""The straggler rule (remote/host/straggle.py) on synthesised looks: each rank's main thread seen
waiting in a collective or not once a second, as a DDP job's ranks are: balanced, or one 30 %
slower (the others wait for it, about 0.3 / 1.3 of each step, over the waiting all ranks share);
and which looks it weighs: the stacks' where every rank has them, else the asleep counts."""

from __future__ import annotations

import random
import statistics

from ddptui.remote.host.straggle import Stragglers, counts, verdict

BASE = 0.08  # the share of looks every rank sleeps in the all-reduce itself
SLOW = 0.3  # the straggler's slowness
TARGET_S = 120.0


def shares(ranks: int, slow: int | None) -> dict[int, float]:
    extra = SLOW / (1 + SLOW)
    return {
        r: BASE if r == slow else BASE + (extra if slow is not None else 0) for r in range(ranks)
    }


def run(
    seed: int, ranks: int, slow: int | None, seconds: float = 300
) -> list[tuple[float, int, float]]:
    """The watch fed every 5 s with each rank's cumulative looks: [(when, rank, slower)]."""
    rng, p = random.Random(seed), shares(ranks, slow)
    counts = {r: [0, 0] for r in range(ranks)}
    watch, said, t = Stragglers(), [], 0.0
    while t < seconds:
        t += 1.0
        for r in range(ranks):
            counts[r][0] += rng.random() < p[r]
            counts[r][1] += 1
        if t % 5 == 0:
            found = watch.feed(t, {r: {"waits": [a, n]} for r, (a, n) in counts.items()})
            if found is not None:
                said.append((t, *found))
    return said


def test_a_rank_30_percent_slower_is_named_within_two_minutes_with_its_cost() -> None:
    costs = []
    for seed in range(100):
        said = run(seed, 8, slow=5)
        assert said, f"seed {seed}: never named"
        when, rank, slower = said[0]
        assert rank == 5 and when <= TARGET_S, (seed, said)
        assert all(r == 5 for _, r, _ in said)
        costs.append(slower)
    # named on a minute or so of looks: each estimate is rough, their middle is the truth
    assert min(costs) >= 0.15 and max(costs) <= 0.5
    assert 0.25 <= statistics.median(costs) <= 0.35


def test_no_straggler_on_a_balanced_job() -> None:
    for seed in range(300):
        assert run(seed, 8, slow=None) == [], seed


def test_no_verdict_on_too_few_looks_or_a_job_that_never_waits() -> None:
    assert verdict({0: (0, 10), 1: (9, 10)}) is None  # 10 looks each: too few
    assert verdict({0: (0, 100), 1: (5, 100), 2: (6, 100)}) is None  # nobody waits much
    assert verdict({0: (2, 100), 1: (30, 100), 2: (31, 100)}) is not None


def test_the_stacks_looks_count_where_every_rank_has_them_else_the_asleep_ones() -> None:
    both = {0: {"waits": [3, 40], "asleep": [30, 40]}, 1: {"waits": [20, 40], "asleep": [31, 40]}}
    assert counts(both) == ("waits", {0: (3, 40), 1: (20, 40)})
    one_unread = {0: {"asleep": [30, 40]}, 1: {"waits": [20, 40], "asleep": [31, 40]}}
    assert counts(one_unread) == ("asleep", {0: (30, 40), 1: (31, 40)})
    assert counts({0: {"waits": [1, -1]}, 1: {}}) == (None, {})  # what a host sends is data


def test_a_change_of_looks_starts_the_window_afresh() -> None:
    """The first stack looks come a second after the asleep ones: counts of two kinds are
    never subtracted from each other."""
    watch = Stragglers()
    watch.feed(0.0, {0: {"asleep": [0, 0]}, 1: {"asleep": [0, 0]}})
    looked = {"asleep": [5, 5], "waits": [0, 4]}
    watch.feed(5.0, {0: looked, 1: looked})
    assert watch.kind == "waits" and len(watch.seen) == 1
    for t in range(10, 125, 5):  # rank 0 never waits, rank 1 a third of the time
        got = watch.feed(float(t), {0: {"waits": [0, t]}, 1: {"waits": [t // 3, t]}})
        if got is not None:
            break
    assert got is not None and got[0] == 0 and t >= 65  # half the window after the change
