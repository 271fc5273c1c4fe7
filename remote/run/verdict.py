"""Who failed, and why the run stopped: the run's verdict from what each node said. Pure.

remote/run/gang.py feeds it each node's ending (its supervisor's EXIT or ERROR, or nothing: lost or
dead) and the stops it sends; it answers how to show each node and, at the end, the run's status,
exit code and root cause. The rules:

- The first stop names the cause: the user's, a node's failure, or a lease (no launcher heard
  from). A failure after the user's stop is its echo, never the cause.
- A node stopped by the hub (a peer failed) brings its own tracebacks from before the stop (the
  first stop, or its own if earlier: what its ranks printed once told to stop is its echo),
  and the hub's word on which node failed, for when the failing node itself can tell nothing.
  Node 0's word is the hub's own view, and comes first: a cut-off peer, stopped because it lost
  the hub, blames node 0 (and may say so first).
- The root cause is remote/run/failures.py's `first`: a failure of its own before echoes, then
  the earliest traceback. Where every failure known is an echo, no echo's rank is named: the root
  cause keeps its words where they are another's error, else says a peer failed first
  (`echo_of_peer`).
- With job.restarts, each attempt has a verdict of its own (`Attempts`): a node's ending counts
  for the attempt it ended, and the run's status and exit code are its last attempt's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ddptui.remote.events import AttemptResult, Failure, HostStatus, RunStatus
from ddptui.remote.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNREACHABLE
from ddptui.remote.host import protocol
from ddptui.remote.run.failures import describe_exit, echo_of_peer, first, is_echo
from ddptui.remote.run.nodemsg import Exit, StartError

# Why a node stopped that the launcher did not stop: a `ddptui stop` (another launcher), the
# run's hub (another node failed or was lost), or its lease (no launcher heard from).
STOP_CAUSES = {
    protocol.BY_LAUNCHER: "user",
    protocol.BY_PEER: "failure",
    protocol.BY_LEASE: "lease",
    protocol.BY_HEALTH: "failure",  # its own GPUs or NICs
}

# (host, exit code, host clock of the exit) → the failures its ranks' stderr shows
Tracebacks = Callable[[str, int | None, float], list[Failure]]


@dataclass(frozen=True)
class NodeEnding:
    """How one node ended, as the front-ends show it."""

    state: HostStatus  # done, stopped, failed
    detail: str
    exit_code: int | None
    failures: tuple[Failure, ...] = ()
    stopped: bool = False
    errors: tuple[str, ...] = ()  # said of the host as errors (what could not be killed)


@dataclass
class Verdict:
    cause: str | None = None  # "user", "failure" or "lease": why the run is ending early
    stop_sent: float = 0.0  # host clock (time.time) when the nodes were told to stop
    failures: list[Failure] = field(default_factory=list)
    # What the hub said of the node that made it stop the others (the failing node itself may
    # tell nothing: lost, or its supervisor killed); node 0's, the hub's own view, apart.
    peer_failures: list[Failure] = field(default_factory=list)
    hub_failure: Failure | None = None
    lease: str = ""  # a node's own word that no launcher was heard from (its lease ended it)

    def stop(self, cause: str, at: float) -> bool:
        """The run ends early for `cause`; True the first time (the cause that counts)."""
        if self.cause is not None:
            return False
        self.cause, self.stop_sent = cause, at
        return True

    # -- a node's end --------------------------------------------------------------------------

    def ended(
        self,
        name: str,
        end: Exit | StartError | None,
        at: float,
        *,
        gone: str,
        tracebacks: Tracebacks,
        peer_name: Callable[[int], str | None],
        stopped_at: float | None = None,
        hub: bool = False,
    ) -> NodeEnding:
        """A node's stream is over. end: its last word (None: none came, `gone` says why);
        at: the host clock of that word; stopped_at: of the node's own word that it was told
        to stop, if it was; hub: the node is node 0 (its word is the hub's view)."""
        if end is None:
            return self.failed(Failure(name, None, None, gone, seen_at=at))
        if isinstance(end, StartError):
            return self.failed(Failure(name, None, None, end.msg, seen_at=at))
        errors = tuple(f"{text} could not be killed" for text in end.survivors)
        if end.code == 0 and not end.stopped:
            return NodeEnding("done", "", 0, errors=errors)
        if end.by == protocol.BY_HEALTH:  # its GPUs or NICs failed: the cause, as the stop says
            when = stopped_at or at
            self.stop("failure", when)
            why = end.reason or "its GPUs failed"
            sick = Failure(name, None, None, why, seen_at=when, evidence=end.evidence)
            return self.failed(sick, code=end.code, errors=errors)
        if not end.stopped:
            return self.failed(*tracebacks(name, end.code, at), code=end.code, errors=errors)
        if self.cause is None:  # not our stop: a stop from elsewhere, or its lease
            self.stop(STOP_CAUSES.get(end.by or "", "failure"), at)
        if end.by == protocol.BY_LEASE:
            errors += (f"stopped: {end.reason}",)
            self.lease = self.lease or end.reason or ""
        if self.cause == "failure":  # its own tracebacks from before the stop still count
            own = tracebacks(name, end.code, at)
            before = min(self.stop_sent, stopped_at or self.stop_sent)
            self.failures.extend(f for f in own if f.seen_at < before)
            if end.by == protocol.BY_PEER:
                culprit = peer_name(end.node) if end.node is not None else None
                message = end.reason or "the run's hub said stop"
                said = Failure(culprit or name, None, None, message, seen_at=at)
                if not hub:
                    self.peer_failures.append(said)
                elif self.hub_failure is None:
                    self.hub_failure = said
        return NodeEnding("stopped", describe_exit(end.code), end.code, stopped=True, errors=errors)

    def failed(
        self, *failures: Failure, code: int | None = None, errors: tuple[str, ...] = ()
    ) -> NodeEnding:
        """A node failed: its failures count unless the user stopped the run first (they are
        that stop's echo); the others are to be stopped."""
        if self.cause != "user":
            self.failures.extend(failures)
        detail = failures[0].message if failures else describe_exit(code)
        return NodeEnding("failed", detail, code, tuple(failures), errors=errors)

    # -- the run's end -------------------------------------------------------------------------

    def outcome(
        self,
        earlier: Sequence[Failure] = (),
        *,
        unreachable: bool = False,
        detached: bool = False,
    ) -> tuple[RunStatus, int, Failure | None, tuple[Failure, ...]]:
        """(status, exit code, root cause, every failure in the order seen). earlier: failures
        before any node started (logins, checks)."""
        said = [self.hub_failure] if self.hub_failure else self.peer_failures
        failures = [*earlier, *(self.failures or said)]
        root = first(failures)
        if root is not None and is_echo(root):  # first() puts any failure of its own first
            root = echo_of_peer(root)
        status: RunStatus
        if detached:
            status, code = "detached", EXIT_OK
        elif unreachable:
            status, code = "unreachable", EXIT_UNREACHABLE
        elif root is not None:
            status, code = "failed", EXIT_FAILED
        elif self.cause == "user":
            status, code = "stopped", EXIT_INTERRUPTED
        elif self.cause == "lease":  # no launcher was heard from: the hosts stopped the run
            status, code = "lost", EXIT_FAILED
        else:
            status, code = "succeeded", EXIT_OK
        return status, code, root, tuple(sorted(failures, key=lambda f: f.seen_at))


Outcome = tuple[RunStatus, int, Failure | None, tuple[Failure, ...]]


@dataclass
class Attempts:
    """Every attempt's Verdict (job.restarts); `current` is the latest any node started."""

    verdicts: dict[int, Verdict] = field(default_factory=lambda: {0: Verdict()})
    times: dict[int, tuple[float, float]] = field(default_factory=dict)  # first seen, last seen
    current: int = 0

    @property
    def verdict(self) -> Verdict:
        return self.verdicts[self.current]

    def of(self, attempt: int) -> Verdict:
        return self.verdicts.setdefault(attempt, Verdict())

    def seen(self, attempt: int, at: float) -> bool:
        """A node started or ended `attempt` at `at` (host clock): True if that attempt is
        newer than any before (its verdict starts afresh)."""
        first, last = self.times.get(attempt, (at, at))
        self.times[attempt] = (min(first, at), max(last, at))
        self.of(attempt)
        if attempt <= self.current:
            return False
        self.current = attempt
        return True

    def hub_said(self, attempt: int, host: str, why: str, at: float) -> None:
        """The run's hub restarted after `attempt` because of `why` (of `host`): the cause,
        where no node's own ending told one (a replay without the lost host's)."""
        verdict = self.of(attempt)
        if not verdict.failures and not verdict.peer_failures and not verdict.hub_failure:
            verdict.peer_failures.append(Failure(host, None, None, why, seen_at=at))

    def outcome(
        self, earlier: Sequence[Failure] = (), *, unreachable: bool = False, detached: bool = False
    ) -> tuple[Outcome, tuple[AttemptResult, ...]]:
        """The run's (status, exit code, root cause, failures): its last attempt's; and how each
        attempt that started went."""
        results = []
        for attempt in sorted(self.times):
            status, _, root, _ = self.verdicts[attempt].outcome(
                earlier if attempt == self.current else ()
            )
            started, finished = self.times[attempt]
            results.append(AttemptResult(attempt, started, finished, status, root))
        run = self.verdicts[self.current].outcome(
            earlier, unreachable=unreachable, detached=detached
        )
        if results and not detached:  # the last attempt's, as the run's (lost, unreachable)
            results[-1] = dataclasses.replace(results[-1], status=run[0], failure=run[2])
        return run, tuple(results)
