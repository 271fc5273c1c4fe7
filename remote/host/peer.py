"""Every node but node 0, in its run: a peer of the run's hub (remote/host/hub.py's HubLink).

Its job's end is told to the hub, and the hub's word says what follows: another attempt, or the
run's end. It learns where the hub listens from a launcher (`hub ADDR PORT`), or from its spec
(a hot spare's node). python3 >= 3.8, stdlib only.
"""

from __future__ import annotations

import contextlib

from . import checkpoints, protocol
from .hublink import HubLink
from .role import Role

TYPE_CHECKING = False  # typing's names cost import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any

    from .hub import Go
    from .role import Step, Supervisor


class Peer(Role):
    def __init__(self, spec: protocol.Spec, sup: Supervisor) -> None:
        self.spec = spec
        self.resume: str | None = None  # job.checkpoint's newest, as the hub's restart said
        self.link = HubLink(
            spec["secret"], spec["node"], spec["link_timeout"],
            protocol.beat_interval(spec["link_timeout"]), sup.stop, since=spec["attempt"],
            on_sample=sup.vitals.sample, on_flight=sup.vitals.traces,
        )  # fmt: skip

    def start(self) -> None:
        addr, port = self.spec["master_addr"], self.spec["hub_port"]
        if addr and port:  # a hot spare's node: no launcher need say where the hub is
            self.link.connect(addr, port)

    def first(self, attempt: int) -> Step | None:
        """A spare joins a run going: it starts at the hub's word. A run's new Slurm job
        starts every node at its attempt together."""
        joins = attempt and self.spec["joins"]
        return self._step(self.link.word()) if joins else (attempt, None)

    def begin(self, attempt: int) -> None:
        self.link.begin(attempt)

    def ended(self, status: str, reason: str | None, echo: bool, facts: dict[str, Any]) -> None:
        self.link.end(status, reason, echo, facts)

    def next(self, attempt: int) -> Step | None:
        return self._step(self.link.word())

    def _step(self, go: Go | None) -> Step | None:
        if go is None:
            return None
        self.resume = go.checkpoint
        return go.attempt, go.after

    def checkpoint(self, attempt: int) -> str | None:
        """The hub's word on a restart (node 0's view: the one every rank must load); the
        first attempt's, as this host sees the directory."""
        if self.spec["checkpoint"] is None:
            return None
        if self.resume is not None:
            return self.resume
        return checkpoints.newest_path(self.spec["checkpoint"], self.spec["workdir"])

    def halt(self, status: str, reason: str) -> None:
        self.link.halt(status, reason)

    def gone(self, node: int, attempt: int, why: str) -> None:
        if node == 0:  # the hub's supervisor: lost now, not after link_timeout
            self.link.gone(why)

    def command(self, verb: str, args: list[str]) -> None:
        if verb == protocol.SAY_HUB and len(args) == 2:
            with contextlib.suppress(ValueError):
                self.link.connect(args[0], int(args[1]))
