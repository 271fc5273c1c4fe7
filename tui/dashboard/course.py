"""A run's course as the dashboard tells it: each of the run's events turned into the status
bar's state, the failure shown (the banner, the views' marks) and the toasts. A controller the app
holds (as Glance): it owns that state, the status, the attempt's failures and how the run ended;
the widgets take what they show of an event themselves (the app hands it to each).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from textual.app import App
from textual.notifications import SeverityLevel

from ddptui.remote.events import (
    Alert,
    ChecksDone,
    CodeSynced,
    DeepChecked,
    Event,
    Failure,
    HangDetected,
    HostState,
    JobState,
    NodeExited,
    NodeRanks,
    Notice,
    RunFinished,
    RunRestarting,
    RunStarted,
    Stopping,
)
from ddptui.remote.run.failures import first

from ..text import run_ended
from .hosts import HostsTable
from .logpane import LogPane
from .widgets import FailureBanner, Status, StatusBar

SEVERITY: dict[str, SeverityLevel] = {"info": "information", "warning": "warning", "error": "error"}


class Course:
    def __init__(
        self,
        app: App[Any],
        clock: Callable[[], float],
        *,
        hosts: HostsTable,
        pane: LogPane,
        banner: FailureBanner,
        status_bar: StatusBar,
    ) -> None:
        self.app, self.clock = app, clock
        self.hosts, self.pane, self.banner, self.status_bar = hosts, pane, banner, status_bar
        self.status = Status()
        self.failure: Failure | None = None  # the one the banner shows
        self.failures: list[Failure] = []  # this attempt's
        self.finished: RunFinished | None = None
        self.started_at: float | None = None
        self.run_dir: str | None = None  # where its logs and stacks go, as it said
        self.stopping = False  # the user asked the run to stop
        self.grace: tuple[Stopping, float] | None = None  # a stop's TERM, and when KILL comes

    def reset(self, run_id: str) -> None:
        """A new run: no failure, the status starts over (the hosts and world size it knew)."""
        self.failure, self.failures, self.finished = None, [], None
        self.started_at, self.stopping, self.grace = None, False, None
        self.banner.hide()
        old = self.status
        self.status = Status(hosts=old.hosts, world_size=old.world_size, no_run=old.no_run)
        self.status.run_id, self.status.state = run_id, "connecting"

    def apply(self, event: Event) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(self, event)

    def show(self) -> None:
        """The status bar as things stand (elapsed, lines a second, hosts up)."""
        status = self.status
        if self.started_at is not None and self.finished is None:
            status.elapsed = self.clock() - self.started_at
            status.measure(self.clock(), self.pane.received)
        if self.grace is not None and self.finished is None:  # the ranks' time to save, left
            stop, kill_at = self.grace
            status.waiting = stop.waiting(kill_at - self.clock())
        status.hosts_up = len(self.hosts.up)
        self.status_bar.show(status)

    def show_failure(self, failure: Failure | None) -> None:
        if failure is None or failure == self.failure:
            return
        self.failure = failure
        self.banner.show_failure(failure)
        self.pane.mark_failed(f.rank for f in [*self.failures, failure])
        self.app.refresh_bindings()

    # -- the events -------------------------------------------------------------------------

    def _run_started(self, ev: RunStarted) -> None:
        self.started_at = self.clock()
        self.run_dir = ev.run_dir
        self.status.world_size = ev.world_size or self.status.world_size
        self.show()

    def _host_state(self, ev: HostState) -> None:
        if ev.state == "running" and self.status.state in ("connecting", "restarting"):
            self.status.state = "running"
        self.show()

    def _node_ranks(self, ev: NodeRanks) -> None:
        if ev.world_size:
            self.status.world_size = ev.world_size
            self.show()

    def _node_exited(self, ev: NodeExited) -> None:
        if ev.failures and not self.stopping:  # after a stop, failures are its echo
            self.failures.extend(ev.failures)
            if self.status.state == "running":
                self.status.state = "stopping"
            self.show_failure(first(self.failures))

    def _code_synced(self, ev: CodeSynced) -> None:
        self.app.notify(f"{ev.host}: {ev.text()}", severity="error" if ev.error else "information")

    def _alert(self, ev: Alert) -> None:
        """What job.notify tells of (failed, lost, restarted...): the bell, and a toast; a hang
        the run's watch found is always shown, as an error."""
        if ev.wanted:
            self.app.bell()
        if ev.wanted or ev.event == "hang":
            severity = SEVERITY[{"hang": "error", "straggler": "warning"}.get(ev.event, "info")]
            self.app.notify(
                f"{ev.event}: {ev.message}", title="ddptui", timeout=10, severity=severity
            )

    def _run_restarting(self, ev: RunRestarting) -> None:
        """The hub starts the job again: the banner keeps the failure that caused it, and the
        next attempt's failures are its own."""
        self.failures.clear()
        self.status.state = "restarting"
        self.show()
        self.app.notify(ev.text(), severity="warning", timeout=10)

    def _job_state(self, ev: JobState) -> None:
        """Slurm's word on the run's job: submitted, pending (its reason and expected start
        stay in the status bar until it runs), running on its nodes, or how it ended."""
        said = self.status.state
        if ev.state in ("SUBMITTED", "PENDING"):
            self.status.state = ev.state.lower()
            self.status.say(ev.text, self.pane.received)
        elif ev.state == "RUNNING":
            self.status.state, self.status.alert = "connecting", ""  # to its nodes, now
        if self.status.state != said or ev.state not in ("SUBMITTED", "PENDING", "RUNNING"):
            ended = ev.state not in ("SUBMITTED", "PENDING", "RUNNING", "COMPLETED")
            self.app.notify(ev.text, severity="warning" if ended else "information", timeout=6)
        self.show()

    def _notice(self, ev: Notice) -> None:
        where = f"{ev.host}: " if ev.host else ""
        self.app.notify(where + ev.text, severity=SEVERITY[ev.level], timeout=6)

    def _stopping(self, ev: Stopping) -> None:
        """A stop that ends the run (this dashboard's, another launcher's, the hosts' lease):
        the ranks' grace (their time to finish a save) counted down in the status bar until the
        run ends; heard late (an attach's replay), what is left of it."""
        left = ev.grace if ev.left is None else ev.left
        self.stopping, self.grace = True, (ev, self.clock() + left)
        self.status.state = "stopping"
        self.app.notify(ev.text(), timeout=max(6.0, ev.grace))
        self.show()

    def _hang_detected(self, ev: HangDetected) -> None:
        """The run warned of a stall (its Notice is shown too): the status bar says so until
        a rank speaks again."""
        self.status.stalled(ev, self.pane.received)
        self.show()

    def _run_finished(self, ev: RunFinished) -> None:
        self.finished = ev
        self.status.waiting = ""
        self.status.state = ev.status
        self.status.elapsed = ev.elapsed
        if ev.failure is not None:
            self.show_failure(ev.failure)
        severity: SeverityLevel = "information" if ev.status == "succeeded" else "warning"
        if ev.status in ("failed", "unreachable"):
            severity = "error"
        timeout = 10 if ev.reason else 6
        self.app.notify(run_ended(ev, took=False), severity=severity, timeout=timeout)
        self.show()

    def _checks_done(self, ev: ChecksDone) -> None:
        self.hosts.flush()  # every host's row now, not at the next tick
        self.show()
        failures = [f for f in ev.findings if f.level == "failure"]
        warnings = [f for f in ev.findings if f.level == "warning"]
        if failures:
            self.app.notify(f"checks failed: {failures[0].message}", severity="error", timeout=10)
        elif warnings:
            self.app.notify(f"checks passed with {len(warnings)} warning(s)", severity="warning")
        else:
            self.app.notify("checks passed", timeout=3)

    def _deep_checked(self, ev: DeepChecked) -> None:
        failed = [f for f in ev.findings if f.level == "failure"]
        if failed:
            message = f"deep check failed: {failed[0].message}"
            self.app.notify(message, severity="error", timeout=10)
        else:
            self.app.notify(f"deep check passed in {ev.seconds:.0f} s", timeout=6)

    _handlers: ClassVar[dict[type[Event], Callable[[Any, Any], None]]] = {
        RunStarted: _run_started,
        HostState: _host_state,
        NodeRanks: _node_ranks,
        NodeExited: _node_exited,
        Notice: _notice,
        Stopping: _stopping,
        JobState: _job_state,
        RunFinished: _run_finished,
        ChecksDone: _checks_done,
        DeepChecked: _deep_checked,
        HangDetected: _hang_detected,
        CodeSynced: _code_synced,
        RunRestarting: _run_restarting,
        Alert: _alert,
    }
