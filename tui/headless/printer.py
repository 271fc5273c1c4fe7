"""The event stream rendered as plain lines for scripts and CI (launch, attach, stop).

Rank lines go to stdout or stderr as the rank wrote them (bytes as they came), prefixed
`[r<rank> <host>]`; ddptui's own messages go to stderr prefixed `ddptui:`. Ctrl-C, SIGTERM,
SIGHUP and a closed output (`| head`) all stop the run the same way: every host stopped,
summary.json written, exit 130.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from operator import itemgetter
from typing import TextIO

from remote.events import (
    ChecksDone,
    CodeSynced,
    Event,
    HostState,
    LogBatch,
    Notice,
    RunFinished,
    RunStarted,
)
from remote.record import BYTES_BACK

from ..text import failure_line
from .check import finding_line
from .console import silence

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
            self.say(f"run {fin.status} in {fin.elapsed:.1f} s (exit {fin.exit_code})")

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
