"""The supervisors of one run tell each other when to stop, with or without a launcher attached.

Node 0's supervisor is the run's hub: it listens on TCP at the master address (any free port;
the peers reach it there, over the network torch's own store already needs); every other
supervisor connects once the launcher tells it where. How a connection proves itself, and
each line on it, is remote/host/channel.py's; this module is what they say.

A peer says first which attempt its supervisor started at and which it runs ("join"), then
heartbeats, "my job of this attempt ended (ok / failed / stopped)", and "halt" (a user's stop or
a lease: no attempt may follow); the hub says "stop, because ...", "restart: attempt N" and
"over". A peer silent for link_timeout is lost, which stops the rest; a peer that loses its hub
stops itself; a hub that hears from no peer at all is the one cut off, and says so of itself.
Each peer proves a key of its own (remote/host/identity.py), so a host speaks only as itself. A
spare that takes a lost node's place (job.restarts) proves a ticket of its own, which the
launcher gave node 0 and the spare over SSH; the lost node, if it comes back, is told it is
over, whatever attempt it claims.
Hot spares' standbys (remote/host/standby.py) connect as peers numbered after the nodes, each
in its spare's fleet slot; the hub admits them at its door and hands them to node 0's hot spares
(remote/host/hotspares.py).
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import NamedTuple

from . import channel, identity, protocol
from .common import thread
from .outcome import Outcome

TYPE_CHECKING = False  # typing's names cost import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any, Callable

    from .channel import Channel


class Ended(NamedTuple):
    """How a node's job of this attempt ended, as it said."""

    status: str  # succeeded, failed, stopped, lost
    reason: str | None


class Blame(NamedTuple):
    """The failure an attempt ends for: its words and whose it is (0: node 0, cut off too;
    None: no node to blame, as a hang whose culprit no stack names)."""

    reason: str
    node: int | None


class Stopping(NamedTuple):
    """Why every node was told to stop: a node's failure or loss, or a halt (`by`)."""

    reason: str
    node: int | None
    by: str | None


class Halted(NamedTuple):
    """A stop that ends the run: no attempt follows."""

    status: str  # stopped (a user's), lost (a lease)
    reason: str


class Go(NamedTuple):
    """The restart the hub said: the attempt to start, after what, and job.checkpoint's newest
    as node 0 sees it ("": none yet)."""

    attempt: int
    after: str | None  # None: the failed attempt's end gave no reason
    checkpoint: str = ""


class Hub:
    """Node 0's side. on_stop(reason, node, by) stops node 0's own job, for node's sake (by:
    the halt's, when a user's stop or a lease stops them all).
    bind: the master address (a name is resolved here); None: every interface. port: the
    one chosen ahead (0: any).

    Node 0's supervisor drives it, attempt by attempt (remote/host/policy.py): `own_end` when
    its job ended, `settle` for the attempt's outcome once every node's job ended (a node lost
    counts as ended), then `restart` or `finish`. Between the two it may wait for a spare to
    take a lost node's place (`expect`, `wait_replaced`) and for the delay (`wait_quiet`); a
    halt (a user's stop, a lease) ends those waits: a stopped run is never restarted."""

    def __init__(
        self,
        secret: str,
        names: list[str],
        link_timeout: float,
        beat: float,
        on_stop: Callable[[str, int | None, str | None], None],
        bind: str | None = None,
        launcher: Callable[[], float | None] | None = None,
        on_refused: Callable[[str], None] | None = None,
        port: int = 0,
    ) -> None:
        self.secret, self.names, self.link_timeout, self.beat = secret, names, link_timeout, beat
        self.on_refused = on_refused or (lambda text: None)  # a host that claimed another's node
        self.on_stop = on_stop
        # When node 0 last heard a launcher (monotonic), None when none holds the run: a
        # witness that node 0's own network is up, where one peer's silence cannot tell.
        self.launcher = launcher or (lambda: None)
        self.cond = threading.Condition()  # guards all below; notified on every change
        self.peers: dict[int, Channel] = {}  # node -> its Channel
        self.joined: set[int] = set()  # the peers that ever joined (they know where the hub is)
        self.heard = {k: time.monotonic() for k in range(1, len(names))}
        self.since = dict.fromkeys(range(1, len(names)), 0)  # the attempt each one joined at
        self.tickets: dict[int, str] = {}  # node -> the proof of the spare coming to take its place
        self.replaced = 0  # spares that took lost nodes' places
        self.spared: set[int] = set()  # the nodes whose place a spare took: not their hosts'
        self.attempt = 0
        self.ended: dict[int, Ended] = {}  # node -> how its job of this attempt ended (0: node 0)
        self.stopping: Stopping | None = None  # why every node was told to stop, this attempt
        self.failure: Blame | None = None  # the first failure of this attempt (its own)
        self.echo = False  # the failure is a rank that died of a peer's failure
        # that failure's kind, rank, exit code and lines (remote/host/retry.py)
        self.facts: dict[str, Any] = {}
        self.bad: dict[int, tuple[str, str]] = {}  # node -> (host, why): never used again this run
        self.swaps: dict[int, str] = {}  # node -> why: to be swapped after the attempt (straggler)
        self.lost: dict[int, int] = {}  # node -> the attempt it was lost in: a spare must come
        self.isolated = False  # node 0 heard from no peer: its own network, not theirs
        self.halted: Halted | None = None  # no attempt follows (a user's stop, a lease)
        self.given_up: str | None = None  # why no spare can come (the launcher said so)
        self.go: Go | None = None  # the restart said to the peers
        self.over: str | None = None  # the run is over: said to every peer that comes
        self.final = False  # this attempt's failure ends the run (job.on_hang: stop)
        self.sampled = lambda node, seq, sample: None  # a peer's sample (remote/host/watch.py)
        self.traced = lambda node, msg: None  # a piece of a peer's traces (hangtraces.py)
        # Hot spares' standbys: the slots after the nodes', each served by stand_by(slot, chan)
        # (remote/host/hotspares.py sets both)
        self.standbys: list[str] = []  # their hosts' names, by slot
        self.stand_by: Callable[[int, Channel], None] = lambda slot, chan: chan.close()
        self.chosen: Callable[[int], list[int]] = lambda node: []  # the slots told to take node
        self.ids: identity.Identities | None = None  # the peers' keys, from the start
        self.all_ended = threading.Event()  # every peer's job of this attempt has ended
        if len(names) == 1:
            self.all_ended.set()
        self.server = channel.listen(bind, port)
        self.port = self.server.getsockname()[1]

    def start(self) -> None:
        self.ids = identity.Identities(self.secret, self.names, self.standbys)
        peers = len(self.names) + len(self.standbys)
        door = channel.Door(self.server, self._keys, peers, self._admit, self._refused)
        thread(door.run)
        thread(self._watch)

    def _keys(self, node: int) -> list[tuple[str, str]]:
        """What a peer of `node` may prove: its own key, or the spare's awaited in its place."""
        assert self.ids is not None
        with self.cond:
            return self.ids.keys(node, self.tickets.get(node), self.chosen(node))

    def _refused(self, node: int, hub_nonce: bytes, peer_nonce: bytes, proof: bytes) -> None:
        assert self.ids is not None
        said = self.ids.impostor(node, hub_nonce, peer_nonce, proof)
        if said is not None:
            channel.log(said)
            self.on_refused(said)

    # -- node 0's supervisor ------------------------------------------------------------------

    def own_end(
        self, status: str, reason: str | None, echo: bool = False,
        facts: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        """Node 0's job ended; a failure of its own stops the others. echo: its failing rank
        died of a peer's failure (a failure of another's own is the cause). facts: the
        failure's, as Attempt.facts gives them."""
        self._ended(0, self.attempt, status, reason, echo, facts)

    def halt(self, status: str, reason: str) -> None:
        """No attempt follows this one: a user's stop, or a lease (no launcher heard from).
        Whatever still runs of this attempt stops for the same reason."""
        with self.cond:
            if self.halted is not None:
                return
            running = not self._all_ended()
            self.halted = Halted(status, reason)
            self.cond.notify_all()
        if running:
            self.stop_all(reason, None, protocol.HALT_BY.get(status))

    def stop_all(self, reason: str, node: int | None, by: str | None = None) -> None:
        """Every node stops because of `node` (its failure or loss), or of a halt (`by`)."""
        with self.cond:
            if self.stopping is not None:
                return
            self.stopping = Stopping(reason, node, by)
            peers = list(self.peers.values())
            attempt = self.attempt
        for chan in peers:
            chan.send(t=protocol.HUB_STOP, reason=reason, node=node, attempt=attempt, by=by)
        self.on_stop(reason, node, by)

    def fail(
        self, reason: str, node: int | None, final: bool = False, bad: bool = False,
        cause: str = "hang",
    ) -> None:  # fmt: skip
        """A failure the hub itself found (a hang, a straggler to replace): every node stops,
        the attempt fails for `node`'s sake (its cause as job.restart_on names it); final: no
        attempt follows (job.on_hang: stop); bad: `node`'s host is bad for the run (hung twice
        in a row, a straggler), so a spare must take its place, as a lost node's."""
        with self.cond:
            if self.failure is None:
                self.failure, self.echo, self.facts = Blame(reason, node), False, {"cause": cause}
            self.final = self.final or final
            chan = self._bad(node, reason) if bad and node is not None else None
        self.stop_all(reason, node)
        self._over(chan, reason)

    def replace_later(self, node: int, reason: str) -> None:
        """`node`'s host is to be swapped for a spare once the attempt fails of something else
        (job.on_straggler: replace, with no spare or restart to spend now): see `swap`."""
        with self.cond:
            self.swaps.setdefault(node, reason)

    def swap(self, room: int) -> list[int]:
        """After a failed attempt: up to `room` of the hosts `replace_later` named become bad,
        for spares to take their places. The nodes swapped."""
        with self.cond:
            nodes = [k for k in sorted(self.swaps) if k not in self.lost][: max(0, room)]
            chans = [(self._bad(k, self.swaps[k]), self.swaps.pop(k)) for k in nodes]
        for chan, reason in chans:
            self._over(chan, reason)
        return nodes

    def _bad(self, node, reason):
        """(Under the lock) `node`'s host is never used again this run: a spare must take its
        place (node 0's cannot: policy.decide ends the run). Its channel, to be told it is over."""
        self.bad[node] = (self.names[node], reason)
        if not node:
            return None
        self.lost[node] = self.attempt
        return self.peers.get(node)

    @staticmethod
    def _over(chan, reason):
        if chan is not None:  # its supervisor leaves once its job is stopped
            chan.send(t=protocol.HUB_OVER, reason=f"this host is bad for the run: {reason}")

    def ask(self, seq: int, stacks: bool) -> None:
        """Every peer samples its ranks (their stacks too): each answers `sampled`."""
        self._tell_peers(t=protocol.HUB_SAMPLE, seq=seq, stacks=stacks)

    def ask_flight(self, seq: str) -> None:
        """Every peer sends its ranks' flight recorder traces: pieces to `traced`."""
        self._tell_peers(t=protocol.HUB_FLIGHT, seq=seq)

    def _tell_peers(self, **msg: Any) -> None:
        with self.cond:
            peers = list(self.peers.values())
        for chan in peers:
            chan.send(**msg)

    def settle(self) -> Outcome:
        """Wait until every node's job of this attempt has ended: its Outcome (a node lost
        counts as ended)."""
        with self.cond:
            self.cond.wait_for(self._all_ended)
            status, reason, node = "succeeded", None, None
            stopped = [(r, k) for k, (s, r) in sorted(self.ended.items()) if s != "succeeded"]
            facts: dict[str, Any] = {}
            if self.halted is not None:
                status, reason = self.halted
            elif self.failure is not None:
                status, (reason, node), facts = "failed", self.failure, self.facts
            elif stopped:  # stopped, without a failure of its own: a launcher saw one
                status, (reason, node) = "failed", stopped[0]
            return Outcome(status, reason, node, sorted(self.lost), self.halted is not None,
                           self.isolated, str(facts.get("cause") or "failed"),
                           _opt_int(facts.get("code")), _opt_int(facts.get("rank")),
                           _int(facts.get("lines")), dict(self.bad), self.final)  # fmt: skip

    def expect(self, node: int, ticket: str) -> None:
        """A launcher sends a spare to take lost `node`'s place; it proves itself with ticket."""
        if 0 < node < len(self.names):
            self.tickets[node] = ticket

    def give_up(self, why: str) -> None:
        with self.cond:
            self.given_up = why
            self.cond.notify_all()

    def wait_replaced(self) -> str | None:
        """Until every lost node has a spare in its place: None, else why not (a halt, or no
        spare could come). Waits for a launcher as long as it takes."""
        with self.cond:
            self.cond.wait_for(lambda: self.halted or self.given_up or not self.lost)
            if self.halted:
                return self.halted.reason
            if self.lost:
                return self.given_up
            return None

    def wait_quiet(self, seconds: float) -> bool:
        """The delay before the next attempt: False when a halt (or a new loss) cut it short."""
        with self.cond:
            lost = len(self.lost)
            return not self.cond.wait_for(
                lambda: self.halted or len(self.lost) > lost, max(0.0, seconds)
            )

    def restart(self, attempt: int, after: str | None, checkpoint: str = "") -> None:
        """Every node starts `attempt` (node 0's supervisor starts its own)."""
        with self.cond:
            self.attempt, self.go = attempt, Go(attempt, after, checkpoint)
            self.ended, self.stopping, self.failure, self.echo = {}, None, None, False
            self.facts = {}
            self.final = False
            if len(self.names) > 1:
                self.all_ended.clear()
            peers = list(self.peers.values())
        for chan in peers:
            chan.send(t=protocol.HUB_RESTART, attempt=attempt, after=after, checkpoint=checkpoint)

    def finish(self, reason: str, wait: float) -> None:
        """The run is over: every peer is told, and given `wait` seconds to hang up (a lost
        one's link is silent: none is waited for)."""
        with self.cond:
            self.over = reason
            peers = list(self.peers.values())
        for chan in peers:
            chan.send(t=protocol.HUB_OVER, reason=reason)
        with self.cond:  # a close before they read it could reset what they were sent
            self.cond.wait_for(lambda: not [k for k in self.peers if k not in self.lost], wait)

    # -- the peers ----------------------------------------------------------------------------

    def _all_ended(self):
        """Every node's job of this attempt has ended (a lost node's counts). After a halt, a
        peer that never joined is not waited for: it never learned where the hub is, and
        stops by itself (told by the launcher, or on its own lease)."""
        waited = range(len(self.names)) if self.halted is None else (0, *self.joined)
        return all(k in self.ended or k in self.lost for k in waited)

    def _admit(self, node: int, who: str, chan: Channel, proof: bytes) -> None:
        """A peer proved itself (the door's thread): follow it in a thread of its own."""
        thread(self._peer, node, who == identity.SPARE, chan, proof)

    def _peer(self, node, spare, chan, proof):
        if not channel.prove(chan, proof):
            return
        if node >= len(self.names):
            return self.stand_by(node, chan)
        with contextlib.suppress(OSError):  # reset by the peer: the same as its going silent
            msgs = iter(chan)
            join = next(msgs, None)
            if (
                join is not None
                and join.get("t") == protocol.HUB_JOIN
                and self._join(node, spare, chan, join)
            ):
                self._follow(node, chan, msgs)
        # Gone without saying its job ended: its supervisor died or the link broke. A broken
        # link may heal (the peer reconnects); the watchdog decides after link_timeout.
        chan.close()
        with self.cond:
            if self.peers.get(node) is chan:
                del self.peers[node]
                self.cond.notify_all()

    def _join(self, node, spare, chan, join):
        """A peer says which attempt its supervisor started at (since) and which it runs: the
        spare of a lost node (its key a spare's) joins in its place; the lost one, come back,
        is told it is over."""
        since, attempt = _int(join.get("since")), _int(join.get("attempt"))
        with self.cond:
            lost_in = self.lost.get(node)
            taken = lost_in is not None or node in self.spared  # not its own host's place now
            if (
                since < self.since[node]
                or (lost_in is not None and since <= lost_in)
                or (taken and not spare)
            ):
                chan.send(t=protocol.HUB_OVER, reason="another host took this node's place")
                return False
            if lost_in is not None:  # the spare
                del self.lost[node]
                self.since[node] = since
                self.replaced += 1
                self.spared.add(node)
            old, self.peers[node] = self.peers.get(node), chan
            self.joined.add(node)
            self.heard[node] = time.monotonic()
            self.cond.notify_all()
            over, go, stopping = self.over, self.go, self.stopping
            current = self.attempt
        if old is not None:
            old.close()
        if over is not None:
            chan.send(t=protocol.HUB_OVER, reason=over)
        elif go is not None and go.attempt > attempt:  # it missed the restart (a broken link)
            chan.send(t=protocol.HUB_RESTART, attempt=go.attempt, after=go.after,
                      checkpoint=go.checkpoint)  # fmt: skip
        elif stopping is not None and attempt == current:  # it joined after the stop
            reason, stopped_for, by = stopping
            chan.send(t=protocol.HUB_STOP, reason=reason, node=stopped_for, attempt=current, by=by)
        return True

    def _follow(self, node, chan, msgs):
        for msg in msgs:
            self.heard[node] = time.monotonic()
            kind = msg.get("t")
            if kind == protocol.HUB_END:
                echo, facts = msg.get("echo") is True, msg.get("facts")
                self._ended(node, msg.get("attempt"), msg.get("status"), msg.get("reason"), echo,
                            facts if isinstance(facts, dict) else None)  # fmt: skip
            elif kind == protocol.HUB_HALT and msg.get("status") in protocol.HALT_BY:
                self.halt(msg["status"], str(msg.get("reason")))
            elif kind == protocol.HUB_BEAT:
                chan.send(t=protocol.HUB_BEAT)
            elif kind == protocol.HUB_SAMPLED and msg.get("attempt") == self.attempt:
                self.sampled(node, msg.get("seq"), msg.get("sample"))
            elif kind == protocol.HUB_TRACE:
                self.traced(node, msg)

    def _ended(self, node, attempt, status, reason, echo=False, facts=None):
        facts = facts or {}
        with self.cond:
            if attempt != self.attempt or node in self.ended or node in self.lost:
                return  # the end of an earlier attempt, or of a node given up for lost
            self.ended[node] = Ended(status, reason)
            failed = status == "failed"
            if failed and (self.failure is None or (self.echo and not echo)):
                self.failure, self.echo = Blame(reason or f"{self.names[node]} failed", node), echo
                self.facts = facts
            bad = facts.get("bad") is True
            if bad:
                self.bad[node] = (str(facts.get("host") or self.names[node]), str(reason))
                if node:  # a spare must take its place, as a lost node's
                    self.lost[node] = self.attempt
            chan = self.peers.get(node) if bad else None
            if node and all(k in self.ended or k in self.lost for k in range(1, len(self.names))):
                self.all_ended.set()
            self.cond.notify_all()
        self._over(chan, reason)  # its supervisor leaves: no attempt of this run is its again
        if failed:
            self.stop_all(reason or f"{self.names[node]} failed", node)

    def gone(self, node: int, attempt: int, why: str) -> None:
        """A launcher found node's supervisor dead (its stream ended without a word): it is
        lost now, not after link_timeout of silence."""
        if 0 < node < len(self.names) and attempt == self.attempt:
            self._lose([node], why, node, f"{self.names[node]}'s supervisor died")

    def _watch(self):
        """A peer not heard from for link_timeout is lost: the rest stop, and a spare must take
        its place before another attempt (one lost while idle between attempts too). A hub
        that hears from no peer at all is the one cut off: it says so of itself."""
        while self.over is None:
            time.sleep(self.beat)
            now = time.monotonic()
            silent = [k for k, heard in list(self.heard.items())
                      if k not in self.lost and now - heard > self.link_timeout]  # fmt: skip
            if not silent:
                continue
            if self._alone(now):
                self.isolated = True
                why = (
                    f"node 0 ({self.names[0]}), the run's hub, heard from no peer for "
                    f"{self.link_timeout:g} s: its own network was cut"
                )
                self._lose(silent, why, 0, why)
                continue
            for node in filter(self._heard_others_after, silent):
                why = (
                    f"node {node} ({self.names[node]}) lost: its supervisor was not heard "
                    f"from for {self.link_timeout:g} s"
                )
                self._lose([node], why, node, f"{self.names[node]} was lost")

    def _alone(self, now):
        """Every peer that joined is silent, and so is the launcher, or more than one peer:
        node 0's own network, not each of theirs (one silent peer of two cannot tell)."""
        with self.cond:
            peers = [k for k in self.joined if k not in self.lost]
        if not peers or any(now - self.heard[k] <= self.link_timeout for k in peers):
            return False
        heard = self.launcher()
        return len(peers) > 1 or (heard is not None and now - heard > self.link_timeout)

    def _heard_others_after(self, node):
        """Whether node 0 heard another peer or the launcher well after `node` fell silent: its
        own network was up, so the silence is node's. Heartbeats come a beat apart and late
        under load, so a cut of node 0 leaves its peers' last words up to a beat or so apart;
        until half a link_timeout separates them, wait: the others may fall silent too, and
        node 0 is the one cut off. A peer that never joined, or no one else to hear: node is
        lost (node 0 cannot tell)."""
        with self.cond:
            if node not in self.joined:
                return True
            others = [self.heard[k] for k in self.joined if k != node and k not in self.lost]
        launcher = self.launcher()
        if launcher is not None:
            others.append(launcher)
        return not others or max(others) > self.heard[node] + self.link_timeout / 2

    def _lose(self, nodes, why, culprit, short):
        """Nodes lost this attempt, for `culprit`'s sake (a peer, or node 0 cut off); `short`
        names the failure (a restart is "after" it)."""
        with self.cond:
            nodes = [k for k in nodes if k not in self.lost]
            running = any(k not in self.ended for k in nodes)
            for k in nodes:
                self.lost[k] = self.attempt
            if running and self.failure is None:
                self.failure, self.facts = Blame(short, culprit), {"cause": "lost"}
            if all(k in self.ended or k in self.lost for k in range(1, len(self.names))):
                self.all_ended.set()
            self.cond.notify_all()
        if running:
            self.stop_all(why, culprit)


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _opt_int(value: object) -> int | None:
    return None if value is None else _int(value)
