"""The run's policy: what follows each attempt, decided in one place (node 0's supervisor).

Once every node's job of an attempt has ended, the run's hub (remote/host/hub.py) gives the
attempt's `Outcome`; `decide` turns it into a `Decision` (restart or end, why, which nodes a
spare must replace first); `Policy.after` carries it out, one named step at a time:

    settle -> decide -> say it -> wait (the delay, the replacements) -> restart

The hub keeps the run's shared state and talks to the peers; node 0's coordinator
(remote/host/coordinator.py) asks this module after each attempt the supervisor ran; this module
only decides and says. A new reason to end or restart a run (a
hang, a sick GPU, restart_on) is a new `cause` of an Outcome and a rule in `decide`.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from . import protocol, retry
from .outcome import Outcome

TYPE_CHECKING = False  # typing's names cost import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any, Callable, Sequence

    from .hotspares import HotSpares
    from .hub import Hub

NO_SPARE = "no spare host left to take its place"


class Decision(NamedTuple):
    """What follows an attempt: another one (restart), once a spare took the place of each
    node in `replace`; or the run's end with its status and why it ends here ("" where the
    status says it all)."""

    restart: bool
    status: str = ""
    why: str = ""
    replace: tuple[int, ...] = ()


def decide(
    out: Outcome,
    attempt: int,
    restarts: int,
    spares: int,
    restart_on: Sequence[Any] | None = None,
    last: Outcome | None = None,
) -> Decision:
    """What follows attempt `attempt` (of at most `restarts` more). spares: how many spare
    hosts are left to take lost nodes' places; restart_on: job.restart_on; last: the attempt
    before, if it failed (remote/host/retry.py)."""
    if out.status != "failed" or out.halted:
        return Decision(False, out.status, "")
    if out.final:
        return Decision(False, "failed", "job.on_hang: stop")
    if attempt >= restarts:
        return Decision(False, "failed", "no restarts left" if restarts else "")
    if out.isolated:
        return Decision(False, "failed", "the run's hub was cut off: no restart")
    if 0 in out.bad:
        return Decision(False, "failed", "node 0's host is bad, and no spare takes the hub's place")
    why = retry.why_not(restart_on, last and last.failure(), out.failure())
    if why is not None:
        return Decision(False, "failed", why)
    if len(out.lost) > spares:
        return Decision(False, "failed", NO_SPARE)
    return Decision(True, replace=tuple(out.lost))


def spares_left(spec: protocol.Spec, hub: Hub) -> int:
    """Spare hosts still free to take a node's place."""
    return int(spec["spares"]) - hub.replaced


class Policy:
    """Node 0's side of a run with restarts: after each attempt, the next one or the end.
    note, save_state and word are the supervisor's: a record in the node's stream, its state
    file, and word of an event (the stream and job.notify)."""

    def __init__(
        self,
        hub: Hub,
        spares: HotSpares,
        spec: protocol.Spec,
        note: Callable[..., None],
        save_state: Callable[..., None],
        word: Callable[[str, str, str], None],
        hang_up_s: float,
        saved: Callable[[int, bool], dict[str, Any] | None] | None = None,
    ) -> None:
        """saved: job.checkpoint's newest at an attempt's end (attempt, failed: its loss said)."""
        self.hub, self.spares, self.spec = hub, spares, spec
        self.saved = saved
        self.note, self.save_state, self.word = note, save_state, word
        self.hang_up_s = hang_up_s  # how long the peers get to hang up at the end
        self.last: Outcome | None = None  # the last attempt's, if it failed
        self.told: dict[str, list[str]] = {}  # the bad hosts said so far: node -> [host, why]
        self.swapped: dict[str, list[Any]] = {}  # node -> [hot spare, attempt]: for an attach

    def after(self, number: int) -> tuple[int, str | None] | None:
        """Once every node's job of attempt `number` ended: (attempt, after) to start next,
        after the delay and once a spare took each lost node's place; or None: the run ends."""
        out = self.swap(self.hub.settle())
        if self.saved is not None:
            saved = self.saved(number, out.status == "failed" and not out.halted)
            out = out._replace(checkpointed=True, saved=saved)
        self.bad_hosts(out.bad)
        decision = decide(out, number, self.spec["restarts"], self.spares_left(),
                          self.spec["restart_on"], self.last)  # fmt: skip
        self.last = out
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

    def bad_hosts(self, bad: dict[int, tuple[str, str]]) -> None:
        """Hosts newly found bad: said in the stream (runs, summary.json and the dashboard
        list them) and kept in node 0's state (`runs` of a detached run)."""
        new = {str(k): [name, why] for k, (name, why) in bad.items() if str(k) not in self.told}
        for k, (name, why) in new.items():
            self.note(t=protocol.BAD_HOST, node=int(k), name=name, why=why)
        if new:
            self.told.update(new)
            self.save_state(bad_hosts=self.told)

    def spares_left(self) -> int:
        return spares_left(self.spec, self.hub)

    def swap(self, out: Outcome) -> Outcome:
        """A failed attempt that restarts: the stragglers job.on_straggler: replace named in it
        become bad hosts, as many as spares are left beside the lost nodes'."""
        if out.status != "failed" or out.halted or out.final:
            return out
        if not self.hub.swap(self.spares_left() - len(out.lost)):
            return out
        return out._replace(lost=sorted(self.hub.lost), bad=dict(self.hub.bad))

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
            self.take_standbys(nxt)
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

    def take_standbys(self, nxt: int) -> None:
        """Nobody attached: a hot spare's standby takes each lost node's place (one attached
        brings a spare itself, remote/run/recover.py; with no standby live, the next does)."""
        if self.hub.launcher() is not None:
            return
        names = self.spec["names"]
        for k, name in self.spares.take(nxt):
            text = f"{name} takes {names[k]}'s place as node {k} from attempt {nxt + 1}"
            text += " (a hot spare)"
            self.note(t=protocol.SPARE_NEWS, level="info", text=text)
            self.word("lost", "restarting", text)
            self.swapped[str(k)] = [name, nxt]
            self.save_state(swapped=self.swapped)  # a later attach follows node k there

    def restart(self, out: Outcome, nxt: int) -> tuple[int, str | None]:
        self.hub.restart(nxt, out.reason, out.saved["path"] if out.saved else "")
        self.word("restarted", "running", f"attempt {nxt + 1} of {self.of()} (after {out.reason})")
        return nxt, out.reason

    def end(self, out: Outcome, status: str, why: str) -> None:
        """The run ends: word of how (and of why no attempt follows: summary.json's reason,
        the console's), and every peer told."""
        halted = self.hub.halted
        if halted is not None:  # a stop (or a lease): during the attempt, or after it failed
            event = "lost" if halted[0] == "lost" else "stopped"
            status, message = (halted[0] if out.halted else "failed"), halted[1]
            why = "" if out.halted else halted[1]
            if not out.halted:
                message += f" (after {out.reason}: no restart)"
        elif out.status == "succeeded":
            event, message, why = "succeeded", "every rank succeeded", ""
        else:
            event = out.cause
            message = str(out.reason) + (f"; {why}" if why else "")
        self.note(t=protocol.RUN_END, status=status, why=why)
        self.word(event, status, message)
        self.save_state(run_status=status, run_reason=message, run_why=why, waiting=[])
        self.spares.finish(message)
        self.hub.finish(message, self.hang_up_s)
