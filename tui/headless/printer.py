"""The event stream rendered as plain lines for scripts and CI (launch, attach, stop).

Rank lines go to stdout or stderr as the rank wrote them (bytes as they came), prefixed
`[r<rank> <host>]`; ddptui's own messages go to stderr prefixed `ddptui:`, a few for the whole
run however many hosts: the hosts' phases folded (phases.py), the same words from several
hosts one line naming them folded (`node[0-127]: ...`), the run's end one line and its failure
report. `verbose` gives every host's own lines instead. ddptui's words are made safe (no
escape sequence or control of a host's or a rank's), and rank lines too on a terminal, where
phases show as a live line (console.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import TextIO

from ddptui.remote.events import (
    Alert,
    CheckpointSaved,
    ChecksDone,
    CodeSynced,
    DeepChecked,
    DeepProgress,
    Event,
    HostState,
    JobState,
    LogBatch,
    NodeRanks,
    NodeStarted,
    Notice,
    Progress,
    RunFinished,
    RunRestarting,
    RunStarted,
    StepsLost,
    Stopping,
    TrackerLink,
)
from ddptui.remote.inventory import Host

from ..text import Fold, checkpoint_text, failure_line, run_ended
from .console import Console
from .findings import deep_lines, finding_line, finding_lines
from .phases import Phases

QUIET_STATES = {"connecting", "starting", "disconnected"}  # --verbose: a notice says it better
HOLD_S = 0.3  # a host's words wait this long for the same from others (outside a phase)
TRACEBACK_SHOWN = 10
PROGRESS_EVERY_S = 60.0  # in a pipe, the training's progress as a line at most this often


class Printer:
    def __init__(
        self,
        out: TextIO = sys.stdout,
        err: TextIO = sys.stderr,
        on_closed: Callable[[], None] | None = None,
        *,
        verbose: bool = False,
        quiet: bool = False,
        hosts: Sequence[Host] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console = Console(out, err, on_closed)
        self.out, self.err = out, err
        self.verbose = verbose
        self.quiet = quiet  # no progress lines in a pipe
        self.clock = clock
        self._progress_said = -PROGRESS_EVERY_S  # when a progress line was said (a pipe)
        self.held = Fold({h.name: h.host for h in hosts})  # hosts' words, folded when said
        self._flush_due = False
        self._pushed: set[str] = set()  # hosts whose code sync was said
        # A phase's lines come before the exceptions held for its end: said as they come.
        self.phases = Phases(self._say_now, self.console.show, self.hold, clock)
        self.phases.expect([h.name for h in hosts])

    def __call__(self, event: Event) -> None:
        if isinstance(event, LogBatch):
            self._lines(event)
        elif isinstance(event, HostState):
            self._host_state(event)
        elif isinstance(event, NodeStarted | NodeRanks):
            self.phases.started(event.host, event.ranks)
        elif isinstance(event, RunStarted):
            self.phases.expect(event.hosts)
            size = f", world size {event.world_size}" if event.world_size else ""
            self.say(f"run {event.run_id}: {len(event.hosts)} hosts{size}; logs in {event.run_dir}")
        elif isinstance(event, Notice):
            text = f"{event.level}: {event.text}" if event.level != "info" else event.text
            if event.host is not None:
                self.hold(event.host, text)
            else:
                self.say(text)
        elif isinstance(event, RunFinished):
            self._finished(event)
        elif isinstance(event, ChecksDone):
            self._checked(event)
        elif isinstance(event, CodeSynced):
            self._synced(event)
        elif isinstance(event, RunRestarting):
            self.say(event.text())
        elif isinstance(event, DeepProgress):
            self.say(f"deep check: {event.text}")
        elif isinstance(event, DeepChecked):  # `launch --deep`: its verdict before the start
            for line in deep_lines(event, self.held.addresses):
                self.say(line)
        elif isinstance(event, Progress):
            self._progress(event)
        elif isinstance(event, TrackerLink | JobState):
            self.say(event.text() if isinstance(event, TrackerLink) else event.text)
        elif isinstance(event, CheckpointSaved):
            self.say("checkpoint: " + checkpoint_text(dataclasses.asdict(event)))
        elif isinstance(event, StepsLost | Stopping):
            self.say(event.text())
        elif isinstance(event, Alert) and event.event in ("hang", "straggler"):  # the run's watch
            self.say(f"{event.event}: {event.message}")

    def _progress(self, progress: Progress) -> None:
        """The live line on a terminal; in a pipe, a line at most once a minute."""
        text = progress.text()
        if not text or self.phases.open:
            return
        if self.console.live:
            self.console.show(text)
        elif not self.quiet and self.clock() - self._progress_said >= PROGRESS_EVERY_S:
            self._progress_said = self.clock()
            self.say(text)

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
        self.console.write(self.out if batch.stream == "stdout" else self.err, text, lines=True)

    def _host_state(self, ev: HostState) -> None:
        if not self.verbose:
            if self.phases(ev):  # a phase ended: its exceptions now, folded
                self.flush()
        elif ev.state not in QUIET_STATES:
            self.say(f"{ev.host}: {ev.state}" + (f" ({ev.detail})" if ev.detail else ""))

    def _synced(self, ev: CodeSynced) -> None:
        """Each host's push, said once every host has pushed (or sooner, when something
        else is said): the hosts that got the same are one line."""
        if self.verbose:
            self.say(f"{ev.host}: {ev.text()}")
            return
        self.held.add(ev.host, ev.text())
        self._pushed.add(ev.host)
        if self._pushed >= set(self.phases.hosts):
            self.flush()

    def _checked(self, done: ChecksDone) -> None:
        """Before a launch: each failure or warning (once for all the hosts it was found
        on), then the verdict."""
        shown = [f for f in done.findings if f.level != "ok"]
        if self.verbose:
            lines = [finding_line(f.level, f.host or "", f.check, f.message) for f in shown]
        else:
            lines = finding_lines(shown, self.held.addresses)
        for line in lines:
            self.say(line)
        failures = sum(1 for f in shown if f.level == "failure")
        verdict = "failed" if failures else "passed"
        self.say(f"checks {verdict}: {failures} failures, {len(shown) - failures} warnings")

    def _finished(self, fin: RunFinished) -> None:
        self.flush()
        self.phases.end()
        self.console.show("")  # the training's live line goes with the run
        if fin.status == "refused":  # its notice named who holds its GPUs
            self.say(f"run refused (exit {fin.exit_code}): nothing was started")
        elif fin.failure is not None:
            self.say(f"run failed: {failure_line(fin.failure)}")
            tail = fin.failure.traceback[-TRACEBACK_SHOWN:] + fin.failure.evidence
            self.console.write(self.err, "".join(f"    {line}\n" for line in tail))
            if fin.reason:  # why the restarts stop here (node 0's hub says)
                self.say(f"not restarted: {fin.reason}")
        elif fin.status != "detached":
            self.say(run_ended(fin))

    # -- ddptui's own words -----------------------------------------------------------------

    def say(self, text: str) -> None:
        if self.held:
            self.flush()  # what hosts said before this comes before it
        self._say_now(text)

    def _say_now(self, text: str) -> None:
        self.console.write(self.err, f"ddptui: {text}\n")

    def hold(self, host: str, text: str) -> None:
        """A host's words: said at once with --verbose; else held a moment (until its phase
        ends, if one is open) to be said once for every host that said the same."""
        if self.verbose:
            self.say(f"{host}: {text}")
            return
        self.held.add(host, text)
        if not self._flush_due and not self.phases.open:
            self._flush_due = True
            try:
                asyncio.get_running_loop().call_later(HOLD_S, self._flush_later)
            except RuntimeError:  # no loop (a replay, a test): nothing to wait for
                self.flush()

    def _flush_later(self) -> None:
        self._flush_due = False
        if not self.phases.open:
            self.flush()

    def flush(self) -> None:
        """Say what hosts said, each once for all the hosts that said it."""
        for _, hosts, text in self.held.take():
            self.say(f"{hosts}: {text}" if hosts else text)

    def print(self, text: str) -> None:
        """To stdout: what a script reads (a detached run's id)."""
        self.console.write(self.out, text)
