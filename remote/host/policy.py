"""The run's policy: what follows each attempt, decided in one place (node 0's supervisor).

Once every node's job of an attempt has ended, the run's hub (remote/host/hub.py) gives the
attempt's `Outcome`; `decide` turns it into a `Decision` (restart or end, why, which nodes a
spare must replace first); `Policy.after` carries it out, one named step at a time:

    settle -> decide -> say it -> wait (the delay, the replacements) -> restart

The hub keeps the run's shared state and talks to the peers; the daemon (remote/host/daemon.py)
runs the attempts; this module only decides and says. A new reason to end or restart a run (a
hang, a sick GPU, restart_on) is a new `cause` of an Outcome and a rule in `decide`.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from . import protocol

TYPE_CHECKING = False  # typing's names cost import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any, Callable, Sequence

    from .hub import Hub

NO_SPARE = "no spare host left to take its place"


class Outcome(NamedTuple):
    """How an attempt ended, once every node's job has (Hub.settle)."""

    status: str  # succeeded, failed, stopped, lost
    reason: str | None  # why (the failure's words, a halt's)
    node: int | None  # whose failure (or loss) it was
    lost: list[int]  # the nodes lost: a spare must take each one's place before another attempt
    halted: bool  # a user's stop or a lease: no attempt may follow
    isolated: bool  # node 0 heard from no peer: its own network was cut
    # What ended a failed attempt, as job.notify names it: "failed" (a rank's failure) or
    # "lost" (a node's); a new one (a hang, a sick GPU) names its cause here, and its node in
    # `lost` where a spare must take that node's place.
    cause: str = "failed"


class Decision(NamedTuple):
    """What follows an attempt: another one (restart), once a spare took the place of each
    node in `replace`; or the run's end with its status and why it ends here ("" where the
    status says it all)."""

    restart: bool
    status: str = ""
    why: str = ""
    replace: tuple[int, ...] = ()


def decide(out: Outcome, attempt: int, restarts: int, spares: int) -> Decision:
    """What follows attempt `attempt` (of at most `restarts` more). spares: how many spare
    hosts are left to take lost nodes' places."""
    if out.status != "failed" or out.halted:
        return Decision(False, out.status, "")
    if attempt >= restarts:
        return Decision(False, "failed", "no restarts left" if restarts else "")
    if out.isolated:
        return Decision(False, "failed", "the run's hub was cut off: no restart")
    if len(out.lost) > spares:
        return Decision(False, "failed", NO_SPARE)
    return Decision(True, replace=tuple(out.lost))


class Policy:
    """Node 0's side of a run with restarts: after each attempt, the next one or the end.
    note, save_state and word are the daemon's: a record in the node's stream, its state
    file, and word of an event (the stream and job.notify)."""

    def __init__(
        self,
        hub: Hub,
        spec: dict[str, Any],
        note: Callable[..., None],
        save_state: Callable[..., None],
        word: Callable[[str, str, str], None],
        hang_up_s: float,
    ) -> None:
        self.hub, self.spec = hub, spec
        self.note, self.save_state, self.word = note, save_state, word
        self.hang_up_s = hang_up_s  # how long the peers get to hang up at the end

    def after(self, number: int) -> tuple[int, str | None] | None:
        """Once every node's job of attempt `number` ended: (attempt, after) to start next,
        after the delay and once a spare took each lost node's place; or None: the run ends."""
        out = self.hub.settle()
        decision = decide(out, number, self.spec["restarts"], self.spares_left())
        if not decision.restart:
            self.end(out, decision.status, decision.why)
            return None
        delay = protocol.restart_delay(self.spec["restart_delay"], number + 1)
        self.say_restart(out, decision, number + 1, delay)
        why = self.wait(out, decision.replace, number + 1, time.monotonic() + delay)
        if why is not None:
            self.end(out, "failed", why)
            return None
        return self.restart(out, number + 1)

    def spares_left(self) -> int:
        return int(self.spec["spares"]) - self.hub.replaced

    def of(self) -> int:
        return int(self.spec["restarts"]) + 1

    def say_restart(self, out: Outcome, decision: Decision, nxt: int, delay: float) -> None:
        wait = ", once a spare host takes its place" if decision.replace else ""
        plan = f"restarting in {delay:g} s{wait} (attempt {nxt + 1} of {self.of()})"
        self.word(out.cause, "restarting", f"{out.reason}; {plan}")

    def wait(self, out: Outcome, replace: Sequence[int], nxt: int, deadline: float) -> str | None:
        """The delay, and a spare in each lost node's place: None once both are over, else why
        the run ends instead (a halt, no spare can come, more nodes lost than spares left)."""
        hub = self.hub
        while True:
            left = round(max(0.0, deadline - time.monotonic()), 3)
            self.note(t=protocol.RESTART, attempt=nxt, of=self.of(), after=out.reason,
                      node=out.node, delay=left, replace=list(replace))  # fmt: skip
            waiting = [self.spec["names"][k] for k in replace]
            self.save_state(status="waiting" if waiting else "restarting", waiting=waiting)
            why = hub.wait_replaced()
            if why is not None:
                return why
            if hub.wait_quiet(deadline - time.monotonic()):
                return None
            replace = sorted(hub.lost)  # a halt, or another node lost meanwhile
            if hub.halted is not None:
                return ""
            if len(replace) > self.spares_left():
                return NO_SPARE

    def restart(self, out: Outcome, nxt: int) -> tuple[int, str | None]:
        self.hub.restart(nxt, out.reason)
        self.word("restarted", "running", f"attempt {nxt + 1} of {self.of()} (after {out.reason})")
        return nxt, out.reason

    def end(self, out: Outcome, status: str, why: str) -> None:
        """The run ends: word of how, and every peer told."""
        halted = self.hub.halted
        if halted is not None:  # a stop (or a lease): during the attempt, or after it failed
            event = "lost" if halted[0] == "lost" else "stopped"
            status, message = (halted[0] if out.halted else "failed"), halted[1]
            if not out.halted:
                message += f" (after {out.reason}: no restart)"
        elif out.status == "succeeded":
            event, message = "succeeded", "every rank succeeded"
        else:
            event = out.cause
            message = str(out.reason) + (f"; {why}" if why else "")
        self.word(event, status, message)
        self.save_state(run_status=status, run_reason=message, waiting=[])
        self.hub.finish(message, self.hang_up_s)
