"""The run's straggler rule, judged by node 0's supervisor from every node's counts. Pure.

Why this rule. In DDP every rank's step takes the same wall time: the gradient all-reduce evens
them out, so step times cannot tell the slow rank. What differs is the waiting: the others wait
in the collective for the slow one, which waits least. Each node's supervisor looks at its ranks'
main threads once a second (remote/host/vitals.py, /proc: no py-spy, nothing paused) and counts
how often each was asleep (blocked: in a collective, gloo's way) against how often it ran. Here:

- a rank's waiting share = asleep / looks, over the last WINDOW_S (120 s);
- a straggler is the rank that waits least, by a margin: its share is at least MARGIN (0.12)
  below the median of the others', the others wait at least that much themselves, and the
  difference holds by a two-proportion z-test (z >= Z_MIN, 3.5: a balanced job of 8 ranks
  sampled every second for two minutes crosses it by chance far less than once a run);
- how much it slows the job: had the others not waited for it, each step would have taken
  (1 - the others' extra share) of its time, so the job runs 1 / (1 - d) - 1 slower, d being
  the others' pooled share less the straggler's.

Named once, and again only after it stopped being one. What this does not see: a job whose
waiting ranks spin instead of sleeping (NCCL on GPUs: a rank waiting in a collective runs its
CPU), and a rank slow in its input (it sleeps on its DataLoader, as waiting ranks do). python3 >=
3.8, stdlib only.
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


class Stragglers:
    """Fed each poll's counts per rank (cumulative, as each node keeps them), it keeps the
    last WINDOW_S of them and says a straggler once, until it no longer is one."""

    def __init__(self, window: float = WINDOW_S) -> None:
        self.window = window
        self.seen: List[Any] = []  # (time, {rank: (asleep, looks)}), oldest first
        self.named: Optional[int] = None

    def feed(self, now: float, counts: Dict[int, Tuple[int, int]]) -> Optional[Tuple[int, float]]:
        self.seen.append((now, counts))
        while len(self.seen) > 2 and now - self.seen[1][0] >= self.window:
            self.seen.pop(0)
        first = self.seen[0][1]
        delta = {r: (c[0] - first[r][0], c[1] - first[r][1]) for r, c in counts.items()
                 if r in first and c[1] >= first[r][1]}  # fmt: skip
        found = verdict(delta) if now - self.seen[0][0] >= self.window / 2 else None
        if found is None or found[0] != self.named:
            self.named = found[0] if found else None
            return found
        return None

    def reset(self) -> None:
        self.seen, self.named = [], None
