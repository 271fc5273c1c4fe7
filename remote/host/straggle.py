"""The run's straggler rule, judged by node 0's supervisor from every node's counts. Pure.

Why this rule. In DDP every rank's step takes the same wall time: the gradient all-reduce evens
them out, so step times cannot tell the slow rank. What differs is the waiting: the rank that
enters each collective last, step after step, is the one the others wait for, and it waits
least itself. Each node's supervisor looks at its ranks' main threads once a second
(remote/host/looks.py: py-spy, nothing paused) and counts how often each waits inside a
collective: whatever the slow rank does meanwhile (computes, or sleeps on its input) and
whether the waiting ones sleep (gloo) or spin. Where no stack can be read, it counts how often
each slept instead (a gloo rank waiting in a collective sleeps): blind where the slow rank
sleeps too. Every rank is judged by the same look: the stacks' where all have them. Here:

- a rank's waiting share = waiting looks / looks, over the last WINDOW_S (120 s);
- a straggler is the rank that waits least, by a margin: its share is at least MARGIN (0.12)
  below the median of the others', the others wait at least that much themselves, and the
  difference holds by a two-proportion z-test (z >= Z_MIN, 3.5: a balanced job of 8 ranks
  looked at every second for two minutes crosses it by chance far less than once a run);
- how much it slows the job: had the others not waited for it, each step would have taken
  (1 - the others' extra share) of its time, so the job runs 1 / (1 - d) - 1 slower, d being
  the others' pooled share less the straggler's.

Named once, and again only after it stopped being one. What this does not see: ranks that wait
outside any collective's call, as NCCL's do when the collective is only queued on the GPU and
the rank waits at a later sync (`loss.item()`): there no rank is named. python3 >= 3.8, stdlib
only.
"""

from __future__ import annotations  # py3.8: annotations stay unevaluated

import math

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

WINDOW_S = 120.0
MARGIN = 0.12
Z_MIN = 3.5
LOOKS_MIN = 30  # looks of each rank before any verdict
KINDS = ("waits", "asleep")  # the looks, the better first (remote/host/looks.py)


def verdict(counts: Dict[int, Tuple[int, int]]) -> Optional[Tuple[int, float]]:
    """counts: {rank: (asleep, looks)} over the window. (the straggler, how much slower the
    job runs for it: 0.3 = 30 %), or None."""
    shares = {r: a / n for r, (a, n) in counts.items() if n >= LOOKS_MIN}
    if len(shares) < 2 or len(shares) < len(counts):
        return None
    slow = min(shares, key=lambda r: shares[r])
    others = sorted(s for r, s in shares.items() if r != slow)
    median = others[len(others) // 2]
    diff = median - shares[slow]
    if diff < MARGIN or median < MARGIN:
        return None
    a, n = counts[slow]
    rest = [counts[r] for r in shares if r != slow]
    a2, n2 = sum(c[0] for c in rest), sum(c[1] for c in rest)
    if _z(a, n, a2, n2) < Z_MIN:
        return None
    return slow, 1.0 / (1.0 - (a2 / n2 - a / n)) - 1.0  # the others' pooled share: less noise


def _z(a: int, n: int, a2: int, n2: int) -> float:
    """The two-proportion z statistic of a2/n2 over a/n (pooled)."""
    p = (a + a2) / (n + n2)
    spread = math.sqrt(p * (1 - p) * (1.0 / n + 1.0 / n2))
    return (a2 / n2 - a / n) / spread if spread else 0.0


def counts(ranks: Dict[int, Any]) -> Tuple[Optional[str], Dict[int, Tuple[int, int]]]:
    """The looks every rank of a sample ({rank: its sample}) has, the better kind first:
    (kind, {rank: (waiting, looks)}); (None, {}) where no kind is every rank's."""
    for kind in KINDS:
        got = {r: (s[kind][0], s[kind][1]) for r, s in ranks.items() if _pair(s.get(kind))}
        if got and len(got) == len(ranks):
            return kind, got
    return None, {}


def _pair(value: Any) -> bool:
    return (isinstance(value, list) and len(value) == 2
            and all(isinstance(v, int) and v >= 0 for v in value))  # fmt: skip


class Stragglers:
    """Fed each poll's samples of every rank (counts cumulative, as each node keeps them), it
    keeps the last WINDOW_S of them and says a straggler once, until it no longer is one."""

    def __init__(self, window: float = WINDOW_S) -> None:
        self.window = window
        self.kind: Optional[str] = None  # the looks weighed: the window starts afresh on a change
        self.seen: List[Any] = []  # (time, {rank: (waiting, looks)}), oldest first
        self.named: Optional[int] = None

    def feed(self, now: float, ranks: Dict[int, Any]) -> Optional[Tuple[int, float]]:
        kind, got = counts(ranks)
        if kind is None:
            return None
        if kind != self.kind:
            self.kind, self.seen = kind, []
        self.seen.append((now, got))
        while len(self.seen) > 2 and now - self.seen[1][0] >= self.window:
            self.seen.pop(0)
        first = self.seen[0][1]
        delta = {r: (c[0] - first[r][0], c[1] - first[r][1]) for r, c in got.items()
                 if r in first and c[1] >= first[r][1]}  # fmt: skip
        found = verdict(delta) if now - self.seen[0][0] >= self.window / 2 else None
        if found is None or found[0] != self.named:
            self.named = found[0] if found else None
            return found
        return None

    def reset(self) -> None:
        self.kind, self.seen, self.named = None, [], None
