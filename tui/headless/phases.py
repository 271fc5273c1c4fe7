"""The hosts' states, folded for the console: a line per phase, not a line per host.

Every HostState state but the steady ones (STEADY) and trouble is a phase each host passes
through (connecting: login; starting: from login until the host's agent says hello; any state
the engine adds, a restart say, the same way). While hosts are in one, a terminal
shows `connecting 97/128 …`; once every host is through it, one line says so, with the
slowest (`connected to 128 hosts in 2.1 s; slowest gpu088 1.9 s`). The exceptions are named,
each: a host that failed or was lost (TROUBLE: held, and folded with the others that failed
the same way), and one slower than SLOW times the median. When every host runs, one line says
which ranks run where. Other states (connected, done, stopped) are the phases' and the run's
end lines' to say.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ddptui.remote import fold
from ddptui.remote.events import HostState

# A phase's state → how its end reads; any other phase's: "<state> done on N hosts".
PHASES = {"connecting": "connected to", "starting": "started on"}
TROUBLE = {"unreachable", "failed", "lost"}  # each named (a notice says "disconnected")
RUNNING = "running"
PAST = {RUNNING, "done", "stopped"}  # a host here is through any phase it did not enter
STEADY = {*PAST, "connected", "disconnected", "idle"}  # states, not phases
SLOW = 3.0  # times the median: a host that took longer in a phase is named
SLOW_BY = 1.0  # seconds over the median at least: with a median of 0.01 s, 0.04 s is not slow
NAMED = 8  # slow hosts named one by one; more are folded


@dataclass
class Phase:
    state: str
    first: float  # when the first host entered it
    entered: dict[str, float] = field(default_factory=dict)  # host → when
    took: dict[str, float] = field(default_factory=dict)  # host → seconds, once through
    failed: set[str] = field(default_factory=set)
    last: float = 0.0  # when the last host left it

    @property
    def inside(self) -> int:
        return len(self.entered) - len(self.took) - len(self.failed)


class Phases:
    """Host states in; lines out through `say` (a phase's end, the exceptions, the running
    ranks), and the live line through `show` (a terminal's: "" when no phase is open)."""

    def __init__(
        self,
        say: Callable[[str], None],
        show: Callable[[str], None],
        hold: Callable[[str, str], None],
        clock: Callable[[], float],
    ) -> None:
        self.say, self.show, self.hold, self.clock = say, show, hold, clock
        self.hosts: dict[str, None] = {}  # every host of the run, once known, in order
        self.state: dict[str, str] = {}
        self.open: dict[str, Phase] = {}
        self.ranks: dict[str, tuple[int, ...]] = {}
        self.running_said = False

    def expect(self, hosts: Sequence[str]) -> None:
        """The run's hosts (as it has them now: a spare, never the lost host it replaced): a
        phase ends when every one of them is through it."""
        self.hosts = dict.fromkeys(hosts)

    def __call__(self, ev: HostState) -> bool:
        """Take a host's new state; True when that ended a phase."""
        now, host, state = self.clock(), ev.host, ev.state
        self.hosts.setdefault(host)
        before = self.state.get(host)
        self.state[host] = state
        if before == state:
            return False
        if before in self.open:
            phase = self.open[before]
            if state in TROUBLE:
                phase.failed.add(host)
            else:
                phase.took[host] = now - phase.entered[host]
            phase.last = now
        if state in TROUBLE:
            self.hold(host, f"{state} ({ev.detail})" if ev.detail else state)
        if state not in STEADY and state not in TROUBLE:
            phase = self.open.setdefault(state, Phase(state, now))
            phase.entered[host] = now
            phase.took.pop(host, None)  # through it before (a reconnect tried again): inside now
            phase.failed.discard(host)
            self.running_said = False  # a new round (a restart): say when all run again
        ended = self._ended()
        self.show(self.progress())  # the live line first: the lines below go above it
        for phase in ended:
            self._say_end(phase)
        if state == RUNNING:
            self._running()
        return bool(ended)

    def started(self, host: str, ranks: tuple[int, ...]) -> None:
        self.ranks[host] = ranks

    def _through(self, phase: Phase, host: str) -> bool:
        if host in phase.entered:
            return host in phase.took or host in phase.failed
        return self.state.get(host) in TROUBLE | PAST

    def _ended(self) -> list[Phase]:
        """The phases every host is now through, taken off the open ones."""
        ended = []
        for state, phase in list(self.open.items()):
            if phase.inside == 0 and all(self._through(phase, h) for h in self.hosts):
                ended.append(self.open.pop(state))
        return ended

    def end(self) -> None:
        """The run ended: each phase still open said as it stands."""
        for phase in list(self.open.values()):
            self._say_end(phase)
            waiting = [h for h in phase.entered if h not in phase.took and h not in phase.failed]
            if waiting:
                self.say(f"still {phase.state}: {fold.hosts(waiting)}")
        self.open = {}
        self.show("")

    def _say_end(self, phase: Phase) -> None:
        took = phase.took
        if not took:
            return  # every host failed it: the exceptions say it all
        n = len(took)
        words = PHASES.get(phase.state) or f"{phase.state} done on"
        line = f"{words} {n} host{'s' * (n != 1)} in {phase.last - phase.first:.1f} s"
        if n > 1:
            slowest = max(took, key=took.__getitem__)
            line += f"; slowest {slowest} {took[slowest]:.1f} s"
        self.say(line)
        median = statistics.median(took.values())
        slow = sorted(
            (h for h, t in took.items() if t > SLOW * median and t - median >= SLOW_BY),
            key=took.__getitem__,
            reverse=True,
        )
        if slow:
            named = ", ".join(f"{h} {took[h]:.1f} s" for h in slow[:NAMED])
            more = f", and {fold.hosts(slow[NAMED:])}" if len(slow) > NAMED else ""
            self.say(f"slow {phase.state}: {named}{more} (median {median:.1f} s)")

    def _running(self) -> None:
        """Once every host (but those in trouble) runs: which ranks run where."""
        if self.running_said or self.open:
            return
        up = [h for h in self.hosts if self.state.get(h) not in TROUBLE]
        if up and all(self.state.get(h) == RUNNING for h in up):
            self.running_said = True
            ranks = [r for h in up for r in self.ranks.get(h, ())]
            where = fold.ranks_on(ranks, up) if ranks else fold.hosts(up)
            self.say(f"running: {where}")

    def progress(self) -> str:
        """The live line: `connecting 97/128 … · starting 12/128 …`."""
        total = len(self.hosts)
        parts = [
            f"{phase.state} {len(phase.took) + len(phase.failed)}/{total} …"
            for phase in self.open.values()
        ]
        return " · ".join(parts)
