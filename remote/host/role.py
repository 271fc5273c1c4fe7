"""A node's part in its run, as its supervisor (remote/host/daemon.py) drives it: node 0
coordinates the run (remote/host/coordinator.py), every other node is its hub's peer
(remote/host/peer.py). The supervisor runs its node's attempts the same way on every node and
asks its role, at a few fixed points, what the run says: where the first attempt starts, what
follows each one, a halt, a node gone, a launcher's word for the run.

python3 >= 3.8, stdlib only.
"""

from __future__ import annotations

from typing import NamedTuple

TYPE_CHECKING = False  # typing's names cost import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any, Callable

    from .owncommands import OwnCommands
    from .vitals import Node
    from .watch import HangWatch

    Step = tuple[int, str | None]  # (attempt, after what): an attempt to start


class Supervisor(NamedTuple):
    """What a role may ask of its node's supervisor."""

    ndir: str  # the node's private directory
    note: Callable[..., None]  # a record in the node's stream
    save_state: Callable[..., None]  # changes to the node's state file
    stop: Callable[..., None]  # (reason, node, by=None): the hub says stop this attempt
    launcher: Callable[[], float | None]  # when a launcher holding the lease last spoke
    own: OwnCommands  # the supervisor's own commands: never the job's, reaped in one place
    vitals: Node  # this node's ranks' progress, for the run's hang watch


class Role:
    """The interface the supervisor drives; a part that has nothing to do at a point inherits
    the no-op."""

    hub_port: int | None = None  # where the run's hub listens: node 0's

    def start(self) -> None:
        """The supervisor is up: before its first attempt."""

    def first(self, attempt: int) -> Step | None:
        """The first attempt to run, from the spec's `attempt`; None: the run is over."""
        return attempt, None

    def begin(self, attempt: int) -> None:
        """An attempt of the node's job is starting."""

    def checkpoint(self, attempt: int) -> str | None:
        """job.checkpoint's newest for `attempt`'s ranks (DDPTUI_CHECKPOINT; "": none yet),
        None where job.checkpoint is not set."""
        return None

    def watch(self, attempt: int) -> HangWatch | None:
        """The attempt's job runs: the run's hang watch over it, where this node keeps one."""
        return None

    def feed(self, data: bytes, attempt: int) -> None:
        """Whole lines the node's ranks printed (the training's progress)."""

    def ended(self, status: str, reason: str | None, echo: bool, facts: dict[str, Any]) -> None:
        """The node's job of this attempt ended: how, told to the run."""
        raise NotImplementedError

    def next(self, attempt: int) -> Step | None:
        """Once the node's job of `attempt` ended: the next attempt to run, or None."""
        raise NotImplementedError

    def halt(self, status: str, reason: str) -> None:
        """No attempt follows, anywhere: a user's stop, or a lease."""
        raise NotImplementedError

    def gone(self, node: int, attempt: int, why: str) -> None:
        """A launcher found `node`'s supervisor dead during `attempt`."""

    def command(self, verb: str, args: list[str]) -> None:
        """A launcher's word for the run, on a viewer's connection (protocol.SAY_*)."""

    def close(self) -> None:
        """The run is over here: what the part still owes is done, before the stream closes."""
