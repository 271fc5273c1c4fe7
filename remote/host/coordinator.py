"""Node 0, in its run: the coordinator. Node 0's supervisor runs its own node's job as every
node's does; beside it, this part holds the run itself, with or without a launcher attached:

- the run's hub (remote/host/hub.py): the peers' links, who stopped, who is lost;
- the hot spares' standbys (remote/host/hotspares.py);
- the policy (remote/host/policy.py): what follows each attempt, restart or end;
- job.notify's command (remote/host/notify.py), and the word of every event in the stream;
- the training's curve from node 0's ranks' lines (remote/host/progress.py: series.json);
- job.checkpoint's newest, each new save said (remote/host/checkpoints.py);
- the run's hang and straggler watch (remote/host/watch.py).

python3 >= 3.8, stdlib only.
"""

from __future__ import annotations

from . import checkpoints, protocol
from .common import log, thread
from .hotspares import HotSpares
from .hub import Hub
from .notify import Notifier
from .policy import Policy
from .progress import Keeper
from .role import Role
from .watch import Guard

TYPE_CHECKING = False  # typing's names cost import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any

    from .role import Step, Supervisor
    from .watch import HangWatch


class Coordinator(Role):
    """hang_up_s: how long the peers get to hang up at the run's end."""

    def __init__(self, spec: protocol.Spec, sup: Supervisor, hang_up_s: float) -> None:
        self.spec, self.sup = spec, sup
        link_timeout = spec["link_timeout"]
        self.hub = Hub(
            spec["secret"], spec["names"], link_timeout, protocol.beat_interval(link_timeout),
            sup.stop, spec["master_addr"], sup.launcher, self._refused, spec["hub_port"] or 0,
        )  # fmt: skip
        self.hub_port = self.hub.port
        self.hub.attempt = spec["attempt"]  # a run's new Slurm job starts its nodes past 0
        self.spares = HotSpares(self.hub, spec["standbys"], self._spare_lost)
        self.saves: checkpoints.Saves | None = None
        if spec["checkpoint"] is not None:
            folder = checkpoints.where(spec["checkpoint"], spec["workdir"])
            self.saves = checkpoints.Saves(folder, self._saved)
        self.policy = Policy(self.hub, self.spares, spec, sup.note, sup.save_state, self.word,
                             hang_up_s, self._attempt_saved if self.saves else None)  # fmt: skip
        self.notifier = Notifier(spec["notify"], spec["run_id"], self._notify_failed, sup.own)
        self.progress: Keeper | None = None  # job.progress: false reads no line for it
        if spec["progress"] is not False:
            self.progress = Keeper(spec["progress"], sup.ndir, self.notifier.said_links)
        self.hangs = Guard(self.hub, spec, sup.ndir, sup.vitals, self.word)

    def start(self) -> None:
        self.hub.start()
        self.spares.start()
        if self.saves is not None:
            thread(self.saves.run)
        # the peers learn where the hub listens through a launcher, whether a job starts or not
        self.sup.note(t=protocol.HUB_PORT, port=self.hub.port)

    def checkpoint(self, attempt: int) -> str | None:
        if self.saves is None:
            return None
        latest = self.saves.look() if attempt == 0 else self.saves.latest  # a restart: the end's
        return latest["path"] if latest else ""

    def watch(self, attempt: int) -> HangWatch | None:
        return self.hangs.start(attempt)

    def feed(self, data: bytes, attempt: int) -> None:
        if self.progress is not None:
            self.progress.feed(data, attempt)

    def ended(self, status: str, reason: str | None, echo: bool, facts: dict[str, Any]) -> None:
        self.hub.own_end(status, reason, echo, facts)

    def next(self, attempt: int) -> Step | None:
        return self.policy.after(attempt)

    def halt(self, status: str, reason: str) -> None:
        self.hub.halt(status, reason)

    def gone(self, node: int, attempt: int, why: str) -> None:
        self.hub.gone(node, attempt, why)

    def command(self, verb: str, args: list[str]) -> None:
        """A spare comes, none can, or word of a hang a launcher saw, for job.notify."""
        if verb == protocol.SAY_REPLACE and len(args) == 2 and args[0].isdigit():
            self.hub.expect(int(args[0]), args[1])
        elif verb == protocol.SAY_NO_SPARE:
            self.hub.give_up(" ".join(args) or "no spare host could take the lost node's place")
        elif verb == protocol.SAY_NOTIFY and args and args[0] in protocol.NOTIFY_EVENTS:
            self.word(args[0], "running", " ".join(args[1:]))

    def close(self) -> None:
        if self.saves is not None:
            self.saves.stop()
        if self.progress is not None:
            self.progress.flush()
        # its failures are said in the stream: before it closes
        self.notifier.close(protocol.NOTIFY_TIMEOUT + 5)

    def word(self, event: str, status: str, message: str) -> None:
        """Something happened to the run: said in the stream (the dashboard rings on it), and
        to job.notify's command."""
        wanted = self.notifier.wanted(event)
        self.sup.note(t=protocol.NOTIFY, event=event, status=status, message=message,
                      wanted=wanted)  # fmt: skip
        self.notifier(event, status, message)

    def _saved(self, saved: dict[str, Any]) -> None:
        """The job saved a new newest checkpoint: said (the console, the dashboard, summary.json)
        and kept in the state (`runs` of a detached run)."""
        self.sup.note(t=protocol.CHECKPOINT, **saved)
        self.sup.save_state(checkpoint=saved)

    def _attempt_saved(self, attempt: int, failed: bool) -> dict[str, Any] | None:
        """The newest checkpoint as `attempt` ended (its job is over: nobody writes); a failed
        one's loss said: the steps since it, which the next attempt does again."""
        assert self.saves is not None
        latest = self.saves.look(settle=0)
        if failed:
            reached = self.progress.step(attempt) if self.progress is not None else None
            self.sup.note(t=protocol.SAVED, **checkpoints.loss(attempt, latest, reached))
        return latest

    def _spare_lost(self, text: str) -> None:
        """A hot spare's standby died, was cut off or could not take its node: said, and to
        job.notify."""
        self.sup.note(t=protocol.SPARE_NEWS, level="warning", text=text)
        self.word("lost", "running", text)

    def _refused(self, text: str) -> None:
        """A host proved its own key claiming another's node at the hub: said."""
        self.sup.note(t=protocol.PEER_REFUSED, text=text)

    def _notify_failed(self, event: str, why: str) -> None:
        log(f"notify ({event}) failed: {why}")
        self.sup.note(t=protocol.NOTIFY_FAILED, event=event, error=why)  # unless the stream closed
