"""The run directory: every line to its log file, every event to events.jsonl, a summary.

rank-<N>.log   every line global rank N printed (stdout and stderr, in arrival order)
node-<K>.log   lines of node K that carry no rank (the launcher's own, or untagged styles)
events.jsonl   the event stream, less the log batches
summary.json   status, exit code, first failure, times
"""

from __future__ import annotations

import dataclasses
import json
import time
from operator import itemgetter
from pathlib import Path
from typing import IO, Any

from .events import Event, GpuStats, LogBatch, RunFinished, RunStarted


class Recorder:
    def __init__(
        self, run_dir: Path, resume: bool = False, started_at: float | None = None
    ) -> None:
        """resume: a run attached to again; its hosts replay every line from the first, so
        the logs are written anew and events.jsonl goes on."""
        self.dir = run_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        if resume:
            for old in [*self.dir.glob("rank-*.log"), *self.dir.glob("node-*.log")]:
                old.unlink()
        mode = "a" if resume else "w"
        self.events = open(self.dir / "events.jsonl", mode, encoding="utf-8")  # noqa: SIM115
        self.logs: dict[str, IO[str]] = {}
        self.started: RunStarted | None = None
        self.t0 = started_at or time.time()

    def __call__(self, event: Event) -> None:
        if isinstance(event, LogBatch):
            self._write_lines(event)
            return
        if isinstance(event, GpuStats):
            return
        if isinstance(event, RunStarted):
            self.started = event
        self.events.write(event.to_json() + "\n")
        self.events.flush()
        if isinstance(event, RunFinished) and event.status != "detached":
            self._summary(event)

    def _write_lines(self, batch: LogBatch) -> None:
        # One write per file and batch, not per line: 1M lines must flow.
        ranks = set(map(itemgetter(0), batch.lines))
        by_rank: dict[int | None, list[str]]
        if len(ranks) == 1:  # the usual batch: one rank's lines
            by_rank = {ranks.pop(): list(map(itemgetter(1), batch.lines))}
        else:
            by_rank = {rank: [] for rank in ranks}
            for rank, text in batch.lines:
                by_rank[rank].append(text)
        for rank, texts in by_rank.items():
            name = f"rank-{rank}.log" if rank is not None else f"node-{batch.node_rank}.log"
            f = self.logs.get(name)
            if f is None:
                f = self.logs[name] = open(  # noqa: SIM115
                    self.dir / name, "a", encoding="utf-8", errors="surrogateescape"
                )
            texts.append("")  # the last line's newline
            f.write("\n".join(texts))
            f.flush()

    def _summary(self, fin: RunFinished) -> None:
        summary: dict[str, Any] = {
            "run_id": self.started.run_id if self.started else None,
            "status": fin.status,
            "exit_code": fin.exit_code,
            "started_at": self.t0,
            "finished_at": time.time(),
            "elapsed": fin.elapsed,
            "hosts": list(self.started.hosts) if self.started else [],
            "world_size": self.started.world_size if self.started else None,
            "failure": dataclasses.asdict(fin.failure) if fin.failure else None,
            "failing_rank": fin.failure.rank if fin.failure else None,
            "failing_host": fin.failure.host if fin.failure else None,
        }
        (self.dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")

    def close(self) -> None:
        for f in self.logs.values():
            f.close()
        self.events.close()
