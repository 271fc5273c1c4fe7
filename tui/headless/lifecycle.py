"""Headless commands for runs that live on the cluster: attach, stop, and the history (`runs`).

A run id, a unique prefix of one, or a run directory names a run (remote/store/runs.py). Attaching
replays the run from its first line (to the console and into the run directory) and follows it;
Ctrl-C detaches and leaves it running. Stop ends it on every host and makes sure nothing is left.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from ddptui.remote.events import (
    Event,
    HostState,
    JobState,
    LogBatch,
    Notice,
    RunFinished,
    RunStarted,
    Stopping,
    attempt_from,
    failure_from,
)
from ddptui.remote.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from ddptui.remote.run import late
from ddptui.remote.run.runner import Run
from ddptui.remote.slurm import status
from ddptui.remote.slurm.run import SlurmRun, job_of
from ddptui.remote.store import runs

from ..text import RUN_COLUMNS, run_cells, run_row, shown
from .printer import Printer


class TailPrinter:
    """Holds an attach's history back and shows only its last `n` lines, then goes live."""

    def __init__(self, printer: Callable[[Event], None], n: int) -> None:
        self.printer, self.n = printer, n
        self.held: deque[LogBatch] = deque()
        self.lines = 0
        self.live = False

    def __call__(self, event: Event) -> None:
        if isinstance(event, LogBatch) and event.replay and not self.live:
            self._hold(event)
            return
        if isinstance(event, LogBatch | RunFinished):
            self._release()
        self.printer(event)

    def _hold(self, batch: LogBatch) -> None:
        self.held.append(batch)
        self.lines += len(batch.lines)
        while self.held and self.lines - len(self.held[0].lines) >= self.n:
            self.lines -= len(self.held.popleft().lines)

    def _release(self) -> None:
        if self.live:
            return
        self.live = True
        skip = max(0, self.lines - self.n)
        for batch in self.held:
            lines = batch.lines[skip:]
            skip = max(0, skip - len(batch.lines))
            if lines:
                self.printer(LogBatch(batch.host, batch.node_rank, batch.stream, lines))
        self.held.clear()


def _on_signals(action: Callable[[], None]) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, action)


def _printer(record: runs.RunRecord, verbose: bool, quiet: bool = False) -> Printer:
    """The run's printer, knowing its hosts (their words fold by name and address)."""
    try:
        hosts = record.inventory().hosts
    except runs.RunError:
        hosts = ()
    return Printer(verbose=verbose, quiet=quiet, hosts=hosts)


async def attach(
    spec: str, tail: int | None = None, *, verbose: bool = False, quiet: bool = False
) -> int:
    """`ddptui --headless attach RUN`: the run's exit status; 130 when Ctrl-C detached."""
    record = runs.resolve(spec)
    printer = _printer(record, verbose, quiet)
    if record.summary is not None:  # it ended while we watched: the run dir has it all
        await late.fetch(record, printer)  # but for what a lost host printed meanwhile
        return show_finished(record, printer, tail)
    emit: Callable[[Event], None] = printer if tail is None else TailPrinter(printer, tail)
    run = rejoin(record, emit)
    detached = False

    def detach() -> None:
        nonlocal detached
        if not detached:
            detached = True
            printer.say(f"detaching: run {record.run_id} goes on (ddptui attach {record.run_id})")
            run.detach()

    _on_signals(detach)
    fin = await run.execute()
    return EXIT_INTERRUPTED if detached else fin.exit_code


def rejoin(
    record: runs.RunRecord, emit: Callable[[Event], None], stop: bool = False
) -> Run | SlurmRun:
    """A run started earlier, followed again: on its hosts, or through Slurm."""
    if job_of(record):
        return SlurmRun(record.inventory(), emit, record=record, stop=stop)
    return Run.rejoin(record, emit, stop=stop)


def show_finished(record: runs.RunRecord, printer: Printer, tail: int | None) -> int:
    """A finished run from its run directory: each node's and rank's log, then how it ended."""
    names, rank_nodes = _who(record)
    logs = sorted(record.dir.glob("node-*.log"), key=_number)
    logs += sorted(record.dir.glob("rank-*.log"), key=_number)
    for log in logs:
        lines = log.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
        rank = _number(log) if log.name.startswith("rank-") else None
        node = rank_nodes.get(rank, 0) if rank is not None else _number(log)
        host = names[node] if node < len(names) else f"node {node}"
        shown = tuple((rank, line) for line in lines[-tail if tail else 0 :])
        printer(LogBatch(host, node, "stdout", shown))
    s = record.summary or {}
    failure = failure_from(s["failure"]) if s.get("failure") else None
    attempts = tuple(attempt_from(a) for a in s.get("attempts") or ())
    status, code, elapsed = s.get("status", "failed"), s.get("exit_code", 1), s.get("elapsed", 0.0)
    reason = str(s.get("reason") or "")
    printer(RunFinished(status, code, elapsed, failure, attempts=attempts, reason=reason))
    return int(s.get("exit_code", EXIT_FAILED))


def _who(record: runs.RunRecord) -> tuple[list[str], dict[int, int]]:
    """The run's host names, and each rank's node, from what its events said."""
    names = [str(h) for h in record.info.get("hosts", [])]
    rank_nodes: dict[int, int] = {}
    try:
        lines = (record.dir / "events.jsonl").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        event = json.loads(line)
        if event.get("event") in ("NodeStarted", "NodeRanks"):
            rank_nodes.update(dict.fromkeys(event.get("ranks", ()), event["node_rank"]))
    return names, rank_nodes


def _number(path: Path) -> int:
    return int(path.stem.rpartition("-")[2])


class Quiet:
    """Only ddptui's own words (host states, notices, the end), not the run's lines."""

    def __init__(self, printer: Printer) -> None:
        self.printer = printer

    def __call__(self, event: Event) -> None:
        if isinstance(event, HostState | Notice | RunFinished | RunStarted | JobState | Stopping):
            self.printer(event)


async def stop(spec: str, *, verbose: bool = False) -> int:
    """`ddptui --headless stop RUN`: 0 once nothing of it is left, 1 naming what is."""
    record = runs.resolve(spec)
    printer = _printer(record, verbose)
    run = rejoin(record, Quiet(printer), stop=True)
    fin = await run.execute()
    if fin.status == "unreachable" or run.leftovers:
        left = [text.partition(": ")[::2] for text in run.leftovers]  # "host: what is left"
        left += [(f.host, f.message) for f in fin.failures if f.rank is None]
        for host, text in left:
            printer.hold(host, f"not stopped: {text}")
        printer.flush()
        return EXIT_FAILED
    printer.say(f"run {record.run_id}: nothing of it is left on its hosts")
    return EXIT_OK


async def history(as_json: bool = False, out: TextIO | None = None) -> int:
    """`ddptui --headless runs`: every run, newest first, its status from its hosts if need be."""
    out = out or sys.stdout
    records = runs.all_runs()
    await status.fill(records)
    rows = [run_row(r) for r in records]
    if as_json:
        out.write(json.dumps({"runs": rows}, indent=2) + "\n")
    else:
        print_table(rows, out)
    return EXIT_OK


def print_table(rows: list[dict[str, Any]], out: TextIO) -> None:
    table = [RUN_COLUMNS, *(shown(run_cells(r)) for r in rows)]  # hosts' words: made safe
    widths = [max(len(row[i]) for row in table) for i in range(len(RUN_COLUMNS))]
    for line in table:
        out.write("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
        out.write("\n")
    if not rows:
        out.write("no runs yet\n")
