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
from operator import itemgetter
from pathlib import Path
from typing import TextIO

from remote.events import (
    ChecksDone,
    Event,
    Failure,
    HostChecked,
    HostState,
    LogBatch,
    Notice,
    RunFinished,
    RunStarted,
)
from remote.failures import describe_exit
from remote.inventory import Inventory
from remote.run import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, Run
from remote.run import check as run_checks

from .check_report import finding_line, print_json, print_table

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
        elif isinstance(event, ChecksDone):
            self._checked(event)

    def _lines(self, batch: LogBatch) -> None:
        host = batch.host
        tags = {  # one per rank in the batch, so each line costs a lookup, not a format
            rank: f"[r{rank} {host}] " if rank is not None else f"[{host}] "
            for rank in set(map(itemgetter(0), batch.lines))
        }
        if len(tags) == 1:  # the usual batch: one rank's lines
            tag = next(iter(tags.values()))
            text = tag + ("\n" + tag).join(map(itemgetter(1), batch.lines)) + "\n"
        else:
            text = "".join([tags[rank] + line + "\n" for rank, line in batch.lines])
        dst = self.out if batch.stream == "stdout" else self.err
        dst.write(text)
        dst.flush()

    def _checked(self, done: ChecksDone) -> None:
        """Before a launch: one line per failure or warning, then the verdict."""
        shown = [f for f in done.findings if f.level != "ok"]
        for f in shown:
            self.say(finding_line(f))
        failures = sum(1 for f in shown if f.level == "failure")
        verdict = "failed" if failures else "passed"
        self.say(f"checks {verdict}: {failures} failures, {len(shown) - failures} warnings")

    def _finished(self, fin: RunFinished) -> None:
        if fin.failure is not None:
            self.say(f"run failed: {failure_line(fin.failure)}")
            for line in fin.failure.traceback[-10:]:
                self.err.write(f"    {line}\n")
        elif fin.status != "detached":
            self.say(f"run {fin.status} in {fin.elapsed:.1f} s (exit {fin.exit_code})")
        self.err.flush()

    def say(self, text: str) -> None:
        self.err.write(f"ddptui: {text}\n")
        self.err.flush()


def failure_line(f: Failure) -> str:
    who = f"rank {f.rank} on {f.host}" if f.rank is not None else f.host
    code = f" ({describe_exit(f.exit_code)})" if f.exit_code is not None else ""
    return f"{who}{code}: {f.message}"


async def launch(
    inv: Inventory,
    run_dir: Path | None,
    extra: Sequence[str],
    checks: bool = True,
    detach: bool = False,
) -> int:
    printer = Printer()
    run = Run(inv, printer, run_dir=run_dir, extra_args=extra, checks=checks, detach=detach)
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
    if fin.status == "detached":  # the run id alone on the last line: for scripts
        printer.say(f"detached: run {run.run_id} goes on by itself (ddptui attach {run.run_id})")
        printer.out.write(f"{run.run_id}\n")
        printer.out.flush()
    return fin.exit_code


async def check(inv: Inventory, as_json: bool = False, out: TextIO | None = None) -> int:
    """`ddptui --headless check`: a table (or JSON) of every host; exit 1 when a check failed."""
    hosts: list[HostChecked] = []

    def collect(event: Event) -> None:
        if isinstance(event, HostChecked):
            hosts.append(event)

    done = await run_checks(inv, collect)
    (print_json if as_json else print_table)(hosts, done, out or sys.stdout)
    return EXIT_OK if done.ok else EXIT_FAILED
