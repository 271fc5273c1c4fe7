"""The run's hang rule, judged on the cluster by node 0's supervisor from every node's samples
(remote/host/vitals.py). Pure: fed samples and asked with the time, it never reads anything.

Why this rule. Silence alone is no hang: a checkpoint, an evaluation, a first step that compiles
or loads data are silent and alive, and many jobs print once in minutes. CPU time alone is none
either: a rank waiting in an NCCL collective spins its CPU, and one waiting on its DataLoader
burns none of its own (its workers do, which is why a rank's CPU and I/O are its process
tree's). A stack alone is none: a rank writing a 2 GB file sits on one line for minutes. So:

- suspicion: the whole job printed no line for `quiet` seconds (30; a quarter of a
  job.hang_after the user set, if shorter). Only then are stacks read, `gap` seconds apart
  (15, or as short), so a job that prints costs nothing;
- each rank, between two samples: *moving* if its main thread's stack changed or its tree used
  CPU (2 % of the gap), moved I/O (64 KiB) or was in the middle of it (a thread in D state);
  *waiting* if its stack held still inside a collective (torch.distributed, DDP's gradient
  all-reduce under backward), whatever its CPU (NCCL spins); *stuck* if it held still
  elsewhere, using nothing;
- confirmed: two windows in a row (three samples) with no rank moving, no line, and at least one
  rank waiting in a collective. Named about quiet + 2 x gap after the last line: 60 s by
  default, three quarters of a job.hang_after set lower;
- the culprit: the stuck ranks (not in the collective the others wait in); if every rank waits,
  the odd group out (the ranks in another collective than the most). If all wait in the same
  one, no rank is to blame (a peer's process or the network is gone), and the rule waits for
  job.hang_after of silence before it says hang: a GPU job's ranks all sit in DDP's backward
  for most of a step, their CPUs spinning, so three samples may land there by chance.
Where a stack cannot be read (no py-spy, no ptrace rights), nothing can be confirmed by stacks:
the rule then says hang only once the job was silent for job.hang_after (600 s unless set) with
no rank's tree using CPU or I/O over two windows.
"""

from __future__ import annotations  # py3.8: annotations stay unevaluated

from dataclasses import dataclass, field

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

QUIET_S = 30.0
GAP_S = 15.0
WINDOWS = 2
HANG_AFTER_S = 600.0  # job.hang_after's default: the bound where no stack can be read
CPU_SHARE = 0.02  # CPU seconds per second of the gap that count as work
IO_BYTES = 64 << 10  # per window
SAME_LINE_S = 1.0  # a line this much after the last sample's silence began is a new line

# Frames of a rank waiting for its peers: torch.distributed's collectives, and the autograd
# engine's, where DDP's reducer waits for its gradient all-reduce.
COLLECTIVE_FILES = ("torch/distributed/",)
BACKWARD = ("_engine_run_backward", "torch/autograd/graph.py")


@dataclass
class Window:
    """One window's judgement: each rank's state and, for those in a collective, which."""

    states: Dict[int, str] = field(default_factory=dict)  # moving | waiting | stuck | unread
    waits_in: Dict[int, str] = field(default_factory=dict)

    def still(self) -> bool:
        return not any(s == "moving" for s in self.states.values())


@dataclass
class Hang:
    """A confirmed hang: who is at fault (may be none), where the others wait, since when."""

    culprits: List[int]
    waiting: Dict[str, List[int]]  # collective -> ranks
    silent_s: float
    where: Dict[int, str]  # rank -> its innermost frame, `function (file:line)`
    confirmed_by: str  # "stacks" | "silence"

    def text(self, hosts: Dict[int, str]) -> str:
        def who(ranks: List[int]) -> str:
            return ", ".join("rank {} on {}".format(r, hosts.get(r, "?")) for r in ranks)

        waits = "; ".join("{} wait{} in {}".format(_span(rs), "s" if len(rs) == 1 else "", c)
                          for c, rs in self.waiting.items())  # fmt: skip
        if self.confirmed_by == "silence":
            head = "no rank printed, used CPU or moved I/O for {:.0f} s (no stack readable)"
            return head.format(self.silent_s)
        if not self.culprits:
            return "hung {:.0f} s: {}; no rank is missing from it (a lost peer or the " \
                "network)".format(self.silent_s, waits)  # fmt: skip
        culprit = "; ".join("{} stuck in {}".format(who([r]), self.where.get(r, "?"))
                            for r in self.culprits)  # fmt: skip
        return "hung {:.0f} s: {}, while {}".format(self.silent_s, culprit, waits)


def _span(ranks: List[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ",".join(map(str, ranks))


def collective(frames: List[List[Any]]) -> Optional[str]:
    """The collective a stack waits in (`all_reduce`, `barrier`...), None if in none."""
    for function, path, _ in frames:
        path = str(path or "")
        if any(c in path for c in COLLECTIVE_FILES):
            return str(function).rsplit(".", 1)[-1]
        if function == BACKWARD[0] and path.endswith(BACKWARD[1]):
            return "DDP's gradient all-reduce (backward)"
    return None


def frame_text(frames: List[List[Any]]) -> str:
    if not frames:
        return "(no Python frame)"
    function, path, line = frames[0]
    return "{} ({}:{})".format(function, path, line)


def classify(before: Dict[str, Any], after: Dict[str, Any], gap: float) -> str:
    """One rank between two of its samples: moving, waiting, stuck; unread without stacks."""
    busy = (after.get("cpu", 0) - before.get("cpu", 0) >= CPU_SHARE * gap
            or after.get("io", 0) - before.get("io", 0) >= IO_BYTES
            or after.get("in_io", False))  # fmt: skip
    frames, was = after.get("frames"), before.get("frames")
    if frames is None or was is None:
        return "moving" if busy else "unread"
    if frames != was:
        return "moving"
    if collective(frames) is not None:
        return "waiting"
    return "moving" if busy else "stuck"


def judge(
    before: Dict[int, Dict[str, Any]], after: Dict[int, Dict[str, Any]], gap: float
) -> Window:
    """A window from two samples of the whole job ({rank: rank sample}); a rank missing from
    either counts as moving (nothing is known of it: no alarm)."""
    win = Window()
    for rank in set(before) | set(after):
        if rank not in before or rank not in after:
            win.states[rank] = "moving"
            continue
        win.states[rank] = classify(before[rank], after[rank], gap)
        if win.states[rank] == "waiting":
            win.waits_in[rank] = collective(after[rank]["frames"]) or "?"
    return win


class HangRule:
    """Asked `due(now, quiet)` whether to sample now, then fed the samples (`feed`); says a
    Hang once, then nothing until a line or a moving rank starts the watch afresh.
    hang_after: job.hang_after (None: the default)."""

    def __init__(self, hang_after: Optional[float] = None) -> None:
        limit = hang_after or HANG_AFTER_S
        self.quiet = min(QUIET_S, limit / 4)
        self.gap = min(GAP_S, limit / 4)
        self.limit = limit
        self.samples: List[Any] = []  # (time, silent since, {rank: sample})
        self.windows: List[Window] = []
        self.reported = False

    def due(self, now: float, quiet: Optional[float]) -> bool:
        if quiet is None or quiet < self.quiet:
            if self.samples or self.reported:  # a line: whatever was gathered is stale
                self.reset()
            return False
        return not self.samples or now - self.samples[-1][0] >= self.gap

    def reset(self) -> None:
        self.samples, self.windows, self.reported = [], [], False

    def feed(self, now: float, quiet: float, ranks: Dict[int, Dict[str, Any]]) -> Optional[Hang]:
        since = now - quiet
        if self.samples and since > self.samples[-1][1] + SAME_LINE_S:
            self.reset()  # a line came between two samples
        if self.samples:
            last_t, _, last = self.samples[-1]
            self.windows.append(judge(last, ranks, now - last_t))
            if not self.windows[-1].still():
                self.windows, self.reported = [self.windows[-1]], False
        self.samples = [*self.samples[-WINDOWS:], (now, since, ranks)]
        if self.reported or len(self.windows) < WINDOWS:
            return None
        recent = self.windows[-WINDOWS:]
        if not all(w.still() for w in recent):
            return None
        hang = self._verdict(recent[-1], quiet, ranks)
        self.reported = hang is not None
        return hang

    def _verdict(
        self, win: Window, quiet: float, ranks: Dict[int, Dict[str, Any]]
    ) -> Optional[Hang]:
        where = {r: frame_text(s.get("frames") or []) for r, s in ranks.items()}
        if any(s == "unread" for s in win.states.values()):
            if quiet < self.limit:
                return None
            return Hang([], {}, quiet, where, "silence")
        if not win.waits_in:
            return None  # every rank holds still outside a collective: no proof of a hang
        groups: Dict[str, List[int]] = {}
        for rank, name in sorted(win.waits_in.items()):
            groups.setdefault(name, []).append(rank)
        culprits = sorted(r for r, s in win.states.items() if s == "stuck")
        if not culprits and len(groups) > 1:
            sizes = sorted(len(rs) for rs in groups.values())
            if sizes[0] < sizes[-1]:
                odd = [c for c, rs in groups.items() if len(rs) < sizes[-1]]
                culprits = sorted(r for c in odd for r in groups.pop(c))
        if not culprits and quiet < self.limit:
            return None  # all in one collective: a step's backward can look so a while
        return Hang(culprits, groups, quiet, where, "stacks")
