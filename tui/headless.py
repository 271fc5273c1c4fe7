"""`ddptui --headless launch`: the event stream rendered as plain lines for scripts and CI.

Rank lines go to stdout or stderr as the rank wrote them (bytes as they came), prefixed
`[r<rank> <host>]`; ddptui's own messages go to stderr prefixed `ddptui:`. Ctrl-C, SIGTERM,
SIGHUP and a closed output (`| head`) all stop the run the same way: every host stopped,
summary.json written, exit 130.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import sys
from collections.abc import Callable, Sequence
from operator import itemgetter
from pathlib import Path
from typing import TextIO

from remote import deepcheck
from remote.events import (
    ChecksDone,
    CodeSynced,
    DeepChecked,
    Event,
    Failure,
    HostChecked,
    HostState,
    LogBatch,
    Notice,
    RunFinished,
    RunRestarting,
    RunStarted,
)
from remote.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNREACHABLE
from remote.failures import describe_exit
from remote.inventory import Inventory
from remote.preflight import Preflight
from remote.record import BYTES_BACK
from remote.run import Run, fleet_for

from .check_report import finding_line, print_deep, print_json, print_table

QUIET_STATES = {"connecting", "starting", "disconnected"}  # a notice says it better


class Printer:
    def __init__(
        self,
        out: TextIO = sys.stdout,
        err: TextIO = sys.stderr,
        on_closed: Callable[[], None] | None = None,
    ) -> None:
        self.out, self.err = out, err
        self.on_closed = on_closed  # an output went away: the caller stops the run
        self.closed = False
        for stream in (out, err):
            if isinstance(stream, io.TextIOWrapper):  # any byte a rank wrote, on any console
                stream.reconfigure(errors=BYTES_BACK)

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
        elif isinstance(event, CodeSynced):
            self.say(f"{event.host}: {event.text()}")
        elif isinstance(event, RunRestarting):
            self.say(event.text())

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
        self._write(self.out if batch.stream == "stdout" else self.err, text)

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
            self._write(self.err, "".join(f"    {line}\n" for line in fin.failure.traceback[-10:]))
        elif fin.status != "detached":
            tries = f" after {len(fin.attempts)} attempts" if len(fin.attempts) > 1 else ""
            self.say(f"run {fin.status}{tries} in {fin.elapsed:.1f} s (exit {fin.exit_code})")

    def say(self, text: str) -> None:
        self._write(self.err, f"ddptui: {text}\n")

    def print(self, text: str) -> None:
        """To stdout: what a script reads (a detached run's id)."""
        self._write(self.out, text)

    def _write(self, dst: TextIO, text: str) -> None:
        try:
            dst.write(text)
            dst.flush()
        except OSError:  # EPIPE (`| head` exited), EIO (the terminal is gone)
            silence(dst)
            if not self.closed:
                self.closed = True
                if self.on_closed is not None:
                    self.on_closed()


def silence(stream: TextIO) -> None:
    """Point a closed output at /dev/null: later writes, and Python's own flush at exit, go
    nowhere instead of raising (the Python docs' note on SIGPIPE)."""
    with contextlib.suppress(OSError, ValueError):  # no file descriptor: nothing to redirect
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.fileno())
        os.close(null)


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
    *,
    run_id: str | None = None,
    deep: float | None = None,
) -> int:
    stopping = False

    def stop(why: str | None = None) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            if why:
                printer.say(f"{why}: stopping the run")
            run.stop()

    def interrupt() -> None:
        if stopping:  # a second Ctrl-C: leave now; each host's supervisor cleans up alone
            printer.say("interrupted again: leaving; each host stops its part by itself")
            os._exit(EXIT_INTERRUPTED)
        stop()

    printer = Printer(on_closed=lambda: stop("output closed"))
    run = Run(
        inv, printer, run_dir=run_dir, run_id=run_id, extra_args=extra, checks=checks,
        detach=detach, deep=deep,
    )  # fmt: skip
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, interrupt)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # nohup: outlive the terminal
        loop.add_signal_handler(signal.SIGHUP, stop, "terminal closed (SIGHUP)")
    fin = await run.execute()
    if fin.status == "detached":  # the run id alone on the last line: for scripts
        printer.say(f"detached: run {run.run_id} goes on by itself (ddptui attach {run.run_id})")
        printer.print(f"{run.run_id}\n")
    return fin.exit_code


async def check(
    inv: Inventory,
    as_json: bool = False,
    out: TextIO | None = None,
    *,
    deep: float | None = None,
    runs_root: Path | None = None,
) -> int:
    """`ddptui --headless check`: a table (or JSON) of every host; exit 1 when a check failed,
    3 when a host could not be reached (as launch). deep: the deep check too, in so many
    seconds at most, after the checks pass (its progress on stderr)."""
    hosts: list[HostChecked] = []
    printer = Printer()

    def collect(event: Event) -> None:
        if isinstance(event, HostChecked):
            hosts.append(event)
        elif isinstance(event, Notice) and deep is not None:
            printer(event)

    fleet = fleet_for(inv)
    deep_done: DeepChecked | None = None
    try:
        done = await Preflight(inv, fleet, collect).check()
        if deep is not None and done.ok:
            deep_done = await deepcheck.run(inv, fleet, collect, seconds=deep, runs_dir=runs_root)
        elif deep is not None:
            printer.say("deep check skipped: the checks failed")
    finally:
        await fleet.close()
    out = out or sys.stdout
    try:
        if as_json:
            print_json(hosts, done, out, deep_done)
        else:
            print_table(hosts, done, out)
            if deep_done is not None:
                print_deep(deep_done, out)
    except OSError:  # `| head`: the verdict stands
        silence(out)
    if any(h.facts.get("reachable") is False for h in hosts):
        return EXIT_UNREACHABLE
    return EXIT_OK if done.ok and (deep_done is None or deep_done.ok) else EXIT_FAILED
