"""The training's progress, launcher side: step, speed, time left, metrics, trackers' links.

The launcher's relay hands every chunk of a node's lines to `ProgressReader.feed`
(remote/run/gang.py); a chunk where nothing looks like progress costs one regex scan
(remote/host/progress.py). The front-ends get `Progress` at most once a second and each
tracker's link once (`TrackerLink`), so none of them parses a line. The run directory keeps the
last values and links in summary.json and the curves in series.json (remote/store/record.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from ddptui.remote.events import Event, Progress, RankProgress, TrackerLink
from ddptui.remote.host.progress import Tracker

EVERY_S = 1.0  # Progress at most this often


class ProgressReader:
    """The training's progress, read from a run's lines and told at most once a second (not a
    watch: the hosts' watches are remote/host/watch.py's and healthwatch.py's)."""

    def __init__(self, pattern: str | None, emit: Callable[[Event], None]) -> None:
        self.tracker = Tracker(pattern)
        self.emit = emit
        self.told: set[str] = set()  # links said
        # A chunk of a node's whole lines, tagged `[rank]:` as the supervisor sends them:
        # feed(text, attempt, at, lines, node). The tracker's own, called as is: the relay
        # pays no call more a chunk (links and progress are told once a second, by tell).
        self.feed: Callable[..., None] = self.tracker.feed_text

    def seed(self, series: dict[str, Any]) -> bool:
        """Go on from node 0's host's curve (an attach): True if it held one."""
        return bool(self.tracker.seed(series))

    def progress(self) -> Progress | None:
        """The news since the last call, or None."""
        tracker = self.tracker
        tracker.flush()
        if not tracker.changed:
            return None
        tracker.changed = False
        last = tracker.last()
        ranks = tuple(
            RankProgress(rank, s.step, s.rate, dict(s.metrics))
            for rank, s in sorted(tracker.ranks.items())
        )
        series = {k: tuple(map(tuple, s.points)) for k, s in tracker.series.items()}
        starts = tuple((a, s) for a, s, _ in tracker.attempts[1:] if s is not None)
        return Progress(
            last["step"], last["total"], last["rate"], last["left"], last["metrics"],
            last["attempt"], ranks, series, starts,
        )  # fmt: skip

    async def run(self) -> None:
        """Progress, at most once a second (ends by cancel)."""
        while True:
            await asyncio.sleep(EVERY_S)
            self.tell()

    def tell(self) -> None:
        """The news: each new tracker's link, then the progress."""
        news = self.progress()
        for url, (name, title, rank) in list(self.tracker.links.items()):
            if url not in self.told:
                self.told.add(url)
                self.emit(TrackerLink(name, url, title, rank))
        if news is not None:
            self.emit(news)

    def dump(self) -> dict[str, Any]:
        """series.json: each metric's points, each attempt's start, the last values, links."""
        self.tracker.flush()
        out: dict[str, Any] = self.tracker.dump()
        out["written_at"] = time.time()
        return out
