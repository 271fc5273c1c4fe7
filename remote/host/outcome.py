"""How an attempt ended, once every node's job has: the run's hub (remote/host/hub.py) says it
(Hub.settle), the restart policy (remote/host/policy.py) decides on it. A module of its own so
that neither imports the other for it. python3 >= 3.8, stdlib only.
"""

from __future__ import annotations  # py3.8: annotations stay unevaluated

from typing import NamedTuple

TYPE_CHECKING = False  # typing's names cost import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any


class Outcome(NamedTuple):
    """How an attempt ended, once every node's job has (Hub.settle)."""

    status: str  # succeeded, failed, stopped, lost
    reason: str | None  # why (the failure's words, a halt's)
    node: int | None  # whose failure (or loss) it was
    lost: list[int]  # the nodes lost: a spare must take each one's place before another attempt
    halted: bool  # a user's stop or a lease: no attempt may follow
    isolated: bool  # node 0 heard from no peer: its own network was cut
    # The failure as job.restart_on and the no-progress rule weigh it (remote/host/retry.py):
    kind: str = "failed"  # failed (a rank's exit), gpu (its host's GPUs or NICs), lost, hang
    code: int | None = None  # the failing rank's exit code
    rank: int | None = None  # the failing rank, where one is named
    lines: int = 0  # the lines the failing node's ranks printed in the attempt
    bad: dict[int, tuple[str, str]] = {}  # node -> (host, why): no attempt may use it again
    final: bool = False  # its failure ends the run (a hang, with job.on_hang: stop)
    checkpointed: bool = False  # job.checkpoint is set: `saved` is the newest at the end
    saved: dict[str, Any] | None = None  # {path, step, at} (remote/host/checkpoints.py)

    @property
    def cause(self) -> str:
        """What ended a failed attempt, as job.notify names it: a node lost, or a failure (a
        bad host is in `lost` too, for a spare to take its place: it failed)."""
        return "lost" if self.node in self.lost and self.node not in self.bad else "failed"

    def failure(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cause": self.kind, "code": self.code, "node": self.node,
                               "rank": self.rank, "lines": self.lines}  # fmt: skip
        if self.checkpointed:
            out["saved"] = self.saved
        return out
