"""Finding the first failure: torchrun's ChildFailedError report plus what each rank printed.

Each host knows only its own failures, so the engine merges them: the earliest traceback seen
(by the launcher's clock) is the root cause; ranks that died because a peer did come after it.
"""

from __future__ import annotations

import dataclasses
import re
import signal
import time
from collections import defaultdict, deque
from operator import itemgetter

from ddptui.remote.events import Failure
from ddptui.remote.host.torchrun import ReportedFailure, is_echo_text, parse_child_failed
from ddptui.remote.run.nodemsg import RankEnd

TRACEBACK_START = "Traceback (most recent call last):"
TAIL = 60  # stderr lines kept per rank, enough for the end of a traceback
SHOWN = 20  # traceback lines carried in a Failure

# torch's excepthook prefixes a worker's traceback with "[rankN]: " (distributed_c10d.py).
_RANK_PREFIX = re.compile(r"^\[rank(\d+)\]: ?")
# A warning is never a failure's message: c10d's and torchrun's own (`[W1125 10:00:00.1
# socket.cpp:207] ...`, `W1125 10:00:00.1 12 api.py:753] ...`, `[W socket.cpp:207] ...`),
# glog's info lines, Python's (`x.py:3: UserWarning: ...` and its `  warnings.warn(` line),
# `WARNING: ...`. (`Warning: ` alone: `\w*Warning: ` tried every word character as a start.)
_WARNING = re.compile(
    r"^\[?[IW]\d{4} \d\d:\d\d:\d\d|^\[[IW] |Warning: |^\s*warnings\.warn\(|^\s*WARNING\b"
)


def _plain(lines: tuple[tuple[int | None, str], ...]) -> bool:
    """One rank's lines, no traceback, no torch rank prefix: stderr that is just logging
    (Python's logging writes there), where only the last TAIL lines matter. Checked in C."""
    text = "\n".join(map(itemgetter(1), lines))
    return (
        TRACEBACK_START not in text
        and "[rank" not in text
        and len(set(map(itemgetter(0), lines))) == 1
    )


def describe_exit(code: int | None) -> str:
    if code is None:
        return "no exit code"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (out of memory?)" if name == "SIGKILL" else ""
        return f"killed by {name}{hint}"
    return f"exit code {code}"


class FailureTracker:
    """Watches stderr lines as they arrive; turns a node's exit into Failures."""

    def __init__(self) -> None:
        self.tails: dict[tuple[str, int | None], deque[str]] = defaultdict(
            lambda: deque(maxlen=TAIL)
        )
        self.first_traceback: dict[tuple[str, int | None], float] = {}

    def feed(
        self, host: str, lines: tuple[tuple[int | None, str], ...], at: float | None = None
    ) -> None:
        """at: when the host saw them (its clock); a replay must not make them all 'now'."""
        now = time.time() if at is None else at
        if len(lines) > TAIL and _plain(lines):
            lines = lines[-TAIL:]  # the rest would only pass through the tail: skip the work
        for rank, text in lines:
            if m := _RANK_PREFIX.match(text):
                text = text[m.end() :]
                # Untagged styles (Lightning): torch's excepthook still names the rank.
                rank = int(m[1]) if rank is None else rank
            key = (host, rank)
            self.tails[key].append(text)
            if text.startswith(TRACEBACK_START) and key not in self.first_traceback:
                self.first_traceback[key] = now

    def forget(self, host: str) -> None:
        """A host's lines so far tell nothing of what comes (a new attempt of the job)."""
        for key in [k for k in self.tails if k[0] == host]:
            del self.tails[key]
        for key in [k for k in self.first_traceback if k[0] == host]:
            del self.first_traceback[key]

    def node_failures(
        self,
        host: str,
        exit_code: int | None,
        why: str = "",
        at: float | None = None,
        died: RankEnd | None = None,
    ) -> list[Failure]:
        """Failures of one node that ended badly, one per failed rank when torchrun says so.
        died: the first rank process to end, as the node's supervisor saw it (any style)."""
        now = time.time() if at is None else at
        node_lines = list(self.tails[(host, None)])
        reported = parse_child_failed(node_lines)
        if not reported and not why:  # no torchrun report: the tracebacks that name a rank
            ranked = sorted(r for h, r in self.first_traceback if h == host and r is not None)
            reported = [ReportedFailure(r, exit_code=exit_code) for r in ranked]
        if died is not None and not why:
            reported = _with_death(reported, died)
        if not reported:
            tb = self._traceback(host, None)
            return [
                Failure(
                    host=host,
                    rank=None,
                    exit_code=exit_code,
                    message=why or _message_line(tb, exit_code) or describe_exit(exit_code),
                    seen_at=self._seen(host, None, now),
                    traceback=tb,
                )
            ]
        out = []
        for r in reported:
            # A spawn child's traceback may come before its lines carry its rank: the node's
            # own is then the one rank's that failed.
            tb = self._traceback(host, r.rank) or (
                self._traceback(host, None) if len(reported) == 1 else ()
            )
            out.append(
                Failure(
                    host=host,
                    rank=r.rank,
                    exit_code=r.exit_code,
                    local_rank=r.local_rank,
                    pid=r.pid,
                    message=_message_line(tb, r.exit_code) or describe_exit(r.exit_code),
                    seen_at=self._seen(host, r.rank, r.at or now),
                    traceback=tb,
                )
            )
        return out

    def _seen(self, host: str, rank: int | None, default: float) -> float:
        return self.first_traceback.get((host, rank), default)

    def _traceback(self, host: str, rank: int | None) -> tuple[str, ...]:
        lines = list(self.tails.get((host, rank), ()))
        starts = [i for i, line in enumerate(lines) if line.startswith(TRACEBACK_START)]
        if starts:
            lines = lines[starts[-1] :]
        return tuple(lines[-SHOWN:])


def _with_death(reported: list[ReportedFailure], died: RankEnd) -> list[ReportedFailure]:
    """The first rank process to end, as its supervisor saw it: its exit code and time where
    torchrun's report names it, else a failure of its own (the env and spawn styles have no
    report; a rank SIGKILLed leaves no traceback either)."""
    for r in reported:
        if r.rank == died.rank:
            r.exit_code = died.code if r.exit_code is None else r.exit_code
            r.at = died.at
            return reported
    if not died.code:  # it ended well, or nobody could tell how
        return reported
    return [ReportedFailure(died.rank, exit_code=died.code, root=True, at=died.at), *reported]


def _message_line(lines: tuple[str, ...], code: int | None = None) -> str:
    """A traceback's exception line (the first unindented line after its frames); else, for a
    process killed by a signal, "" (the signal is the message); else the last line that is
    not a warning: a warning (c10d's, NCCL's, Python's) is never the cause."""
    in_frames = False
    for line in lines:
        if line.startswith("  File "):
            in_frames = True
        elif in_frames and line.strip() and not line[0].isspace():
            return line.strip()
    if code is not None and code < 0:
        return ""
    for line in reversed(lines):
        if line.strip() and not _WARNING.search(line):
            return line.strip()
    return ""


def is_echo(f: Failure) -> bool:
    """Did this rank die of another's failure (lost peer, its launcher's TERM)?"""
    killed = f.exit_code is not None and f.exit_code < 0 and -f.exit_code != signal.SIGKILL
    return killed or is_echo_text(f.message)


def echo_of_peer(f: Failure) -> Failure:
    """The root cause where every failure known is an echo (the failing rank's own words never
    came, or came under the echo's rank: spawn's parent quotes its failed child's traceback
    beside the first rank to end): not the echo's rank. Its words where they are not an
    echo's, else that a peer failed first."""
    message = f.message
    if not message or is_echo_text(message):
        who = f"rank {f.rank}" if f.rank is not None else "a rank"
        message = f"{who} died of a peer's failure ({message or describe_exit(f.exit_code)}); "
        message += "the failing peer's own error was not seen"
    return dataclasses.replace(f, rank=None, local_rank=None, pid=None, message=message)


def first(failures: list[Failure]) -> Failure | None:
    """The root cause: a failure of its own before echoes, then the earliest traceback.

    Arrival order alone cannot decide: torchrun's tee polls each rank's log every 0.1 s.
    """
    return min(failures, key=lambda f: (is_echo(f), f.seen_at)) if failures else None
