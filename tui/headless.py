"""`ddptui --headless launch`: the event stream rendered as plain lines for scripts and CI.

Rank lines go to stdout or stderr as the rank wrote them, prefixed `[r<rank> <host>]`; ddptui's
own messages go to stderr prefixed `ddptui:`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from remote.events import (
    Event,
    Failure,
    HostState,
    LogBatch,
    Notice,
    RunFinished,
    RunStarted,
)
from remote.failures import describe_exit
from remote.inventory import Inventory
from remote.run import EXIT_INTERRUPTED, Run

QUIET_STATES = {"connecting", "starting"}


class Printer:
    def __init__(self, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> None:
        self.out, self.err = out, err

    def __call__(self, event: Event) -> None:
        if isinstance(event, LogBatch):
            self._lines(event)
        elif isinstance(event, RunStarted):
            size = f", world size {event.world_size}" if event.world_size else ""
            self.say(f"run {event.run_id}: {len(event.hosts)} hosts{size}; logs in {event.run_dir}")
        elif isinstance(event, HostState) and event.state not in QUIET_STATES:
            detail = f" ({event.detail})" if event.detail else ""
            self.say(f"{event.host}: {event.state}{detail}")
        elif isinstance(event, Notice):
            where = f"{event.host}: " if event.host else ""
            self.say(
                f"{where}{event.level}: {event.text}"
                if event.level != "info"
                else f"{where}{event.text}"
            )
        elif isinstance(event, RunFinished):
            self._finished(event)

    def _lines(self, batch: LogBatch) -> None:
        host = batch.host
        text = "".join(
            f"[r{rank} {host}] {line}\n" if rank is not None else f"[{host}] {line}\n"
            for rank, line in batch.lines
        )
        dst = self.out if batch.stream == "stdout" else self.err
        dst.write(text)
        dst.flush()

    def _finished(self, fin: RunFinished) -> None:
        if fin.failure is not None:
            self.say(f"run failed: {failure_line(fin.failure)}")
            for line in fin.failure.traceback[-10:]:
                self.err.write(f"    {line}\n")
        else:
            self.say(f"run {fin.status} in {fin.elapsed:.1f} s (exit {fin.exit_code})")
        self.err.flush()

    def say(self, text: str) -> None:
        self.err.write(f"ddptui: {text}\n")
        self.err.flush()


def failure_line(f: Failure) -> str:
    who = f"rank {f.rank} on {f.host}" if f.rank is not None else f.host
    code = f" ({describe_exit(f.exit_code)})" if f.exit_code is not None else ""
    return f"{who}{code}: {f.message}"


async def launch(inv: Inventory, run_dir: Path | None, extra: Sequence[str]) -> int:
    printer = Printer()
    run = Run(inv, printer, run_dir=run_dir, extra_args=extra)
    loop = asyncio.get_running_loop()
    interrupted = False

    def interrupt() -> None:
        nonlocal interrupted
        if interrupted:  # a second Ctrl-C: leave now; each host's supervisor cleans up alone
            printer.say("interrupted again: leaving; each host stops its part by itself")
            os._exit(EXIT_INTERRUPTED)
        interrupted = True
        run.stop()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, interrupt)
    fin = await run.execute()
    return fin.exit_code
