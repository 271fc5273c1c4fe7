"""One attempt of a node's job (job.restarts), on its supervisor (remote/host/daemon.py): its
process and how it ended, in the words a failure is named by and the facts the run's hub weighs
it by (remote/host/retry.py). python3 >= 3.8, stdlib only.
"""

from __future__ import annotations

import re
import threading

from . import procs, torchrun

TYPE_CHECKING = False  # typing's names cost import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any


class Attempt:
    """host: the node's host's name; ranks: the node's global ranks as planned."""

    def __init__(self, number: int, host: str, ranks: list[int]) -> None:
        self.number, self.host, self.ranks = number, host, ranks
        self.job: Any = None  # its Popen
        self.code: int | None = None
        self.error: str | None = None  # why the job could not start
        self.done = threading.Event()  # the job has ended (or never started)
        self.stopped = threading.Event()  # a stop was asked
        # the first stop's: who (protocol.BY_*), why, for which node's sake
        self.by: str | None = None
        self.reason: str | None = None
        self.node: int | None = None
        self.survivors: list[str] = []
        self.scratch: str | None = None  # torchrun's --log-dir: fresh for each attempt
        self.err = b""  # the end of the job's own stderr: torchrun's report names the rank
        self.died: Any = None  # (rank, exit code or None, time): the first rank process to end
        self.sick: str | None = None  # why this host's GPUs or NICs failed during the attempt
        self.evidence: list[str] = []  # what that verdict rests on (each read's exit, stderr, row)
        self.watch: Any = None  # its health watch, once it has read how the host began
        self.reading = threading.Lock()  # one read of the watch at a time
        self.lines = 0  # the lines its ranks printed: how far it got (remote/host/retry.py)

    def failed_text(self) -> tuple[str, bool]:
        """`rank 3 failed on node1 (killed by SIGKILL)` where the first rank to end was killed,
        `rank 3 failed on node1` where torchrun's report names it, else the node's exit; and
        whether that rank died of another's failure (an echo), which the hub passes over for
        a failure of a rank's own."""
        died = self.died
        if died and procs.own_death(died[1]):  # the first rank to go, killed (OOM, a segfault)
            return "rank {} failed on {} ({})".format(
                died[0], self.host, procs.describe_code(died[1])
            ), False
        own = self.own_failure()
        if own:
            return own, False
        ranks = torchrun.failed_ranks(self.err)
        if ranks:
            return "rank {} failed on {}".format(ranks[0][0], self.host), True
        return "{} failed (exit {})".format(self.host, self.code), False

    def own_failure(self) -> str | None:
        """A rank of this node that failed of its own, as torchrun's report names it."""
        return torchrun.own_failure(self.host, self.err, self.scratch, self.ranks)

    def facts(self, reason: str | None, code: int | None) -> dict[str, Any]:
        """What the run's hub weighs a failure by (remote/host/retry.py): its cause, the
        failing rank and its exit code, how far this node got; bad: this host may not run
        the job again."""
        m = re.match(r"rank (\d+) failed", reason or "")
        codes = [c for _, _, c in torchrun.failed_ranks(self.err) if c is not None]
        if self.died and self.died[1] is not None:
            codes.append(self.died[1])
        return {
            "cause": "gpu" if self.sick else "failed",
            "rank": int(m.group(1)) if m else None,
            "code": codes[0] if codes else code,
            "lines": self.lines,
            "bad": bool(self.sick),
            "host": self.host,
        }
