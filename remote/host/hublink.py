"""A peer's side of the hub (remote/host/hub.py): it connects to node 0's hub, proves a key of its
own, heartbeats, says how its job of each attempt ended, and obeys the stop and the restart
the hub says."""

from __future__ import annotations

import contextlib
import threading
import time

from . import channel, hangtraces, protocol
from .common import thread
from .hub import Go, _int
from .vitals import fit

TYPE_CHECKING = False  # typing's names cost import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any, Callable

    from .channel import Channel

RETRY_S = 1.0  # a peer's wait before it connects again


class HubLink:
    """A peer's side: connects to the hub, proving `key` (its own: identity.py), keeps the
    lease, obeys its stop (on_stop(reason, node, by), as the hub's), and hears from it what
    follows each attempt (`word`). since: the attempt its supervisor started at (a spare joins
    a run going, before its attempt)."""

    def __init__(
        self, key: str, node: int, link_timeout: float, beat: float,
        on_stop: Callable[..., None], since: int = 0,
        on_sample: Callable[[bool], dict[str, Any]] | None = None,
        on_flight: Callable[[], dict[str, Any]] | None = None,
    ) -> None:  # fmt: skip
        self.key, self.node, self.link_timeout, self.beat = key, node, link_timeout, beat
        self.on_stop = on_stop
        self.on_sample = on_sample  # stacks -> this node's sample (remote/host/vitals.py)
        self.on_flight = on_flight  # () -> its ranks' traces (remote/host/hangtraces.py)
        self.since, self.attempt = since, max(0, since - 1)
        self.cond = threading.Condition()
        self.chan: Channel | None = None
        self.heard = time.monotonic()
        # this attempt's end: said (again, after a reconnect) until the next
        self.ending: protocol.End | None = None
        self.halting: protocol.Halt | None = None  # a stop that ends the run, said likewise
        self.delivered = threading.Event()  # the hub was sent our end
        self.go: Go | None = None  # the latest restart the hub said
        self.over: str | None = None  # why no attempt follows here (the hub said so, a halt,
        # the hub lost)
        self.take: tuple[int, int] | None = None  # (node, attempt): a standby takes that node
        self.addr: tuple[str, int] | None = None
        thread(self._watch)

    def connect(self, addr: str, port: int) -> None:
        """Start talking to the hub at addr:port (the launcher says where, once known)."""
        if self.addr is not None:
            return
        self.addr = (addr, port)
        self.heard = time.monotonic()
        thread(self._run)

    def begin(self, attempt: int) -> None:
        """Our job of `attempt` is starting."""
        with self.cond:
            self.attempt, self.ending = attempt, None
            self.delivered.clear()

    def end(
        self, status: str, reason: str | None, echo: bool = False,
        facts: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        """Our job ended: say so (now, or once connected), so the hub need not wait for us."""
        if self.addr is None:  # the hub's address may still come: a lease from now
            self.heard = time.monotonic()
        self.ending = {"t": protocol.HUB_END, "attempt": self.attempt, "status": status,
                       "reason": reason, "echo": echo, "facts": facts}  # fmt: skip
        self._say(self.ending, self.delivered)

    def halt(self, status: str, reason: str) -> None:
        """No attempt follows, here or anywhere (a user's stop, a lease): the hub is told, and
        says `over` once every node's job has ended (leaving before it could reset the end
        we sent)."""
        self.halting = {"t": protocol.HUB_HALT, "status": status, "reason": reason}
        if self.addr is None:  # no launcher told us where the hub is, and none will now
            self._over(reason)
        self._say(self.halting)

    def gone(self, why: str) -> None:
        """A launcher found the hub's supervisor dead: lost now, not after link_timeout."""
        if self.over is None:
            self.on_stop(why, 0)
            self._over(why)

    def word(self) -> Go | None:
        """Once our job ended: the hub's word on what follows: (attempt, after) to start, or
        None: the run is over here (the hub said so, a halt, or the hub was lost)."""
        with self.cond:
            self.cond.wait_for(
                lambda: (
                    self.over is not None
                    or (self.go is not None and self.go.attempt > self.attempt)
                )
            )
            return None if self.over is not None else self.go

    def say(self, **msg: Any) -> None:
        """A word to the hub, if connected (a standby's "took")."""
        self._say(msg)

    def leave(self, reason: str) -> None:
        """No more of this link: it hangs up (a standby whose part is over)."""
        self._over(reason)
        chan = self.chan
        if chan is not None:
            chan.close()

    def _say(self, msg, sent=None):
        chan = self.chan
        if chan is not None and chan.send(**msg) and sent is not None:
            sent.set()

    def _over(self, reason):
        with self.cond:
            if self.over is None:
                self.over = reason
            self.cond.notify_all()

    def _run(self):
        while self.over is None:
            with contextlib.suppress(OSError, ValueError, IndexError, RuntimeError):
                self._session()
            if self.over is None:
                time.sleep(RETRY_S)  # the hub is gone or unreachable: the watchdog decides

    def _session(self):
        assert self.addr is not None  # connect() set it before it started this thread
        chan = channel.dial(self.addr, self.key, self.node)
        self.chan = chan
        try:
            chan.send(t=protocol.HUB_JOIN, since=self.since, attempt=self.attempt)
            for said in (self.halting, self.ending):
                if said is not None:
                    self._say(said, self.delivered if said is self.ending else None)
            thread(self._beat, chan)
            for msg in chan:
                self.heard = time.monotonic()
                self._heard(msg)
                if self.over is not None:
                    return
        finally:
            self.chan = None
            chan.close()

    def _heard(self, msg):
        kind = msg.get("t")
        if kind == protocol.HUB_STOP and msg.get("attempt") == self.attempt:
            why = msg.get("reason") or "the run's hub said stop"
            self.on_stop(why, msg.get("node"), msg.get("by"))
        elif kind == protocol.HUB_RESTART and isinstance(msg.get("attempt"), int):
            with self.cond:
                if self.go is None or msg["attempt"] > self.go.attempt:
                    after, checkpoint = msg.get("after"), msg.get("checkpoint")
                    self.go = Go(msg["attempt"], str(after or ""), str(checkpoint or ""))
                self.cond.notify_all()
        elif (
            kind == protocol.HUB_TAKE
            and _int(msg.get("node"))
            and isinstance(msg.get("attempt"), int)
        ):
            with self.cond:
                self.take = (msg["node"], msg["attempt"])
                self.cond.notify_all()
        elif kind == protocol.HUB_OVER:
            self._over(str(msg.get("reason") or "the run is over"))
        elif kind == protocol.HUB_SAMPLE and self.on_sample is not None:
            thread(self._sample, msg.get("seq"), msg.get("stacks") is True, self.attempt)
        elif kind == protocol.HUB_FLIGHT and self.on_flight is not None:
            thread(self._flight, msg.get("seq"))

    def _sample(self, seq, stacks, attempt):
        """The hub's ask, answered in a thread of its own: py-spy takes a moment."""
        assert self.on_sample is not None  # asked only where there is one
        sample = fit(self.on_sample(stacks), channel.LINE_MAX // 2)
        self._say({"t": protocol.HUB_SAMPLED, "seq": seq, "attempt": attempt, "sample": sample})

    def _flight(self, seq):
        """The hub's ask at a hang: our ranks' traces, in pieces (a trace is megabytes); done
        at once where they cannot be read, so the hub need not wait for them."""
        assert self.on_flight is not None  # asked only where there is one
        try:
            found = self.on_flight()
        except Exception as exc:  # a dump gone wrong must not leave the hub waiting
            channel.log(f"node {self.node}: the flight recorder's traces: {exc}")
            found = {}
        for piece in hangtraces.pieces(seq, found):
            self._say({"t": protocol.HUB_TRACE, **piece})

    def _beat(self, chan: Channel) -> None:
        while self.chan is chan and self.over is None:
            chan.send(t=protocol.HUB_BEAT)
            time.sleep(self.beat)

    def _watch(self):
        """The hub not heard from for link_timeout: our job stops, and no attempt follows here.
        Before the launcher says where the hub is, only an idle node waits that long."""
        while self.over is None:
            time.sleep(self.beat)
            if time.monotonic() - self.heard <= self.link_timeout:
                continue
            if self.addr is None and self.ending is None:
                continue  # running, and the hub's address yet to come: not ours to judge
            why = (
                "lost the run's hub (node 0's supervisor): not heard from for "
                f"{self.link_timeout:g} s"
            )
            self.on_stop(why, 0)
            self._over(why)
            return
