"""The run's hub: supervisors telling each other to stop, with nobody attached (in-process)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from ddptui.remote.host import channel, policy
from ddptui.remote.host import hub as hubmod
from ddptui.remote.host.channel import CHALLENGE, Channel, _mac
from ddptui.remote.host.hotspares import HotSpares
from ddptui.remote.host.hub import Hub
from ddptui.remote.host.hublink import HubLink
from ddptui.remote.host.policy import Outcome

SECRET = "s3cret"


def key(k: int) -> str:
    """Node k's own key, as the launcher derives it for that node's spec alone."""
    return channel.node_key(SECRET, k)


class Stops:
    def __init__(self) -> None:
        self.said: list[tuple[str, int | None]] = []
        self.event = threading.Event()

    def __call__(self, reason: str, node: int | None, by: str | None = None) -> None:
        self.said.append((reason, node))
        self.event.set()


def hub(n: int, timeout: float = 5.0, launcher: Any = None) -> tuple[Hub, Stops]:
    """launcher(): when node 0 last heard a launcher (None: detached)."""
    stops = Stops()
    h = Hub(SECRET, [f"node{k}" for k in range(n)], timeout, 0.1, stops, "127.0.0.1", launcher)
    h.start()
    return h, stops


def joined(h: Hub, *links: HubLink) -> None:
    """Until each link has joined the hub."""
    deadline = time.monotonic() + 5
    while any(link.node not in h.joined for link in links):
        assert time.monotonic() < deadline, "a peer never joined"
        time.sleep(0.02)


def with_peers(timeout: float, peer_timeout: float = 5.0) -> tuple[Hub, Stops, list[HubLink]]:
    """A hub of 3 nodes, both its peers joined."""
    h, stops = hub(3, timeout=timeout)
    links = [HubLink(key(k), k, peer_timeout, 0.1, Stops()) for k in (1, 2)]
    for link in links:
        link.connect("127.0.0.1", h.port)
    joined(h, *links)
    return h, stops, links


def test_a_peer_that_ended_before_it_knew_the_hub_is_heard() -> None:
    for _ in range(20):  # its `end` follows its login at once: the hub must not lose it
        h, _ = hub(2)
        link = HubLink(key(1), 1, 5.0, 0.1, Stops())
        link.end("succeeded", None)
        link.connect("127.0.0.1", h.port)
        assert h.all_ended.wait(3)
        assert link.delivered.wait(3)


def test_a_failed_peer_stops_every_other_node() -> None:
    h, hub_stops = hub(3)
    peers = [Stops(), Stops()]
    links = [HubLink(key(k + 1), k + 1, 5.0, 0.1, peers[k]) for k in range(2)]
    for link in links:
        link.connect("127.0.0.1", h.port)
    time.sleep(0.3)
    links[1].end("failed", "node 2 (node2) failed: exit 1")
    assert hub_stops.event.wait(3) and peers[0].event.wait(3)
    assert hub_stops.said == [("node 2 (node2) failed: exit 1", 2)]
    assert peers[0].said == [("node 2 (node2) failed: exit 1", 2)]


def test_a_silent_peer_is_lost_and_stops_the_rest() -> None:
    _h, stops = hub(2, timeout=0.6)  # the peer never connects: lost after link_timeout
    assert stops.event.wait(3)
    reason, node = stops.said[0]
    assert node == 1 and "lost" in reason and "node1" in reason


def test_a_peer_that_loses_its_hub_stops_itself() -> None:
    h, _ = hub(2)
    stops = Stops()
    link = HubLink(key(1), 1, 0.6, 0.1, stops)
    link.connect("127.0.0.1", h.port)
    time.sleep(0.2)
    h.server.close()
    for chan in list(h.peers.values()):  # the hub's host is gone: nothing answers
        chan.sock.shutdown(socket.SHUT_RDWR)
    assert stops.event.wait(3)
    assert "lost the run's hub" in stops.said[0][0]


def test_a_wrong_secret_is_turned_away() -> None:
    h, _ = hub(2)
    intruder = HubLink("guess", 1, 5.0, 0.1, Stops())
    intruder.connect("127.0.0.1", h.port)
    time.sleep(0.5)
    assert not h.peers


# -- one identity per node (issue 37, item 3) ---------------------------------------------------


def refusing(n: int) -> tuple[Hub, Stops, list[str]]:
    """A hub of n nodes, and what it says of the hosts it refused."""
    stops, said = Stops(), list[str]()
    names = [f"node{k}" for k in range(n)]
    h = Hub(SECRET, names, 5.0, 0.1, stops, "127.0.0.1", on_refused=said.append)
    h.start()
    return h, stops, said


@pytest.mark.security
def test_a_node_claiming_another_nodes_number_is_refused_and_named() -> None:
    """Node 1's key proves node 1 only: joining as node 2 it is refused and named, and node 2
    (marked lost and bad on the old shared secret, which stopped the run) is untouched."""
    h, stops, said = refusing(3)
    links = [HubLink(key(k), k, 5.0, 0.1, Stops()) for k in (1, 2)]
    for link in links:
        link.connect("127.0.0.1", h.port)
    joined(h, *links)
    impostor = HubLink(key(1), 2, 5.0, 0.1, Stops())
    impostor.connect("127.0.0.1", h.port)
    until(lambda: said)
    assert said == ["node1 (node 1) tried to join the run's hub as node2 (node 2): refused"]
    assert impostor.chan is None and h.peers[2] is not None and links[1].chan is not None
    impostor.leave("done")
    links[1].end("succeeded", None)
    until(lambda: 2 in h.ended)
    assert h.ended[2].status == "succeeded" and not h.bad and not h.lost and not stops.said


@pytest.mark.security
def test_a_lost_nodes_host_cannot_take_its_spares_place_whatever_it_claims() -> None:
    """Once a spare holds node 1, node 1's own host (lost, come back, or compromised) is told
    it is over even claiming a later attempt than the spare's: only the spare's key is its."""
    h, stops = hub(2, timeout=0.6)
    assert stops.event.wait(3)  # node 1 never came: lost
    h.own_end("stopped", "node 1 lost")
    h.settle()
    h.expect(1, "t1cket")
    spare = HubLink("t1cket", 1, 5.0, 0.1, Stops(), since=1)
    spare.connect("127.0.0.1", h.port)
    assert h.wait_replaced() is None
    old = HubLink(key(1), 1, 5.0, 0.1, Stops(), since=99)
    old.connect("127.0.0.1", h.port)
    assert old.word() is None and old.over == "another host took this node's place"
    assert h.peers[1] is not None and spare.chan is not None


@pytest.mark.security
def test_a_standby_proves_a_node_only_once_the_hub_chose_it_for_that_node() -> None:
    """A standby holds a key for each node it may become: the hub takes it for lost node 1
    only once it told that standby to take node 1."""
    h, hot, _, _ = standing(2, 1)
    lost_node1(h)
    as_1 = channel.spare_key(key(2), 1)
    with pytest.raises(ValueError, match="did not prove itself"):  # refused: not chosen yet
        channel.dial(("127.0.0.1", h.port), as_1, 1)
    assert hot.take(1) == [(1, "node2")]
    channel.dial(("127.0.0.1", h.port), as_1, 1).close()


def test_the_hub_listens_at_the_master_address_only() -> None:
    stops = Stops()
    for bind, want in (("127.0.0.1", "127.0.0.1"), ("localhost", "127.0.0.1 ::1"), ("::1", "::1")):
        h = Hub(SECRET, ["node0", "node1"], 5.0, 0.1, stops, bind)
        assert h.server.getsockname()[0] in want.split()
        h.server.close()
    h = Hub(SECRET, ["node0", "node1"], 5.0, 0.1, stops, "192.0.2.1")  # not this host's
    assert h.server.getsockname()[0] in ("::", "0.0.0.0")  # NAT: the peers may still reach it
    h.server.close()


@pytest.mark.security
def test_slow_strangers_never_keep_a_peer_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Connections that trickle a byte now and then: each has one deadline for its whole
    handshake, and past 64 at once the oldest goes; a peer gets in all the while."""
    monkeypatch.setattr(channel, "HANDSHAKE_S", 1.0)
    h, _ = hub(2)
    strangers = [socket.create_connection(("127.0.0.1", h.port)) for _ in range(200)]
    for s in strangers:
        s.sendall(b"1")
    link = HubLink(key(1), 1, 5.0, 0.1, Stops())
    link.end("succeeded", None)
    link.connect("127.0.0.1", h.port)
    assert h.all_ended.wait(5) and link.delivered.wait(5)
    closed = 0
    for s in strangers:  # every one of them dropped: evicted, or past its deadline
        s.settimeout(3)
        try:
            closed += s.recv(4096).startswith(CHALLENGE) and s.recv(1) == b""
        except ConnectionResetError:
            closed += 1
        s.close()
    assert closed == len(strangers)


HUB_UNDER_FEW_FILES = """
import resource, sys, threading
from ddptui.remote.host.hub import Hub
resource.setrlimit(resource.RLIMIT_NOFILE, (40, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
h = Hub("s3cret", ["node0", "node1"], 60.0, 0.1, lambda *a: None, "127.0.0.1")
h.start()
print(h.port, flush=True)
sys.exit(0 if h.all_ended.wait(60) else 1)
"""


@pytest.mark.security
def test_the_accept_loop_outlives_a_full_file_table() -> None:
    """EMFILE ended the hub's accept loop for good: node 0 was cut off from its peers."""
    hub_proc = subprocess.Popen(
        [sys.executable, "-c", HUB_UNDER_FEW_FILES], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert hub_proc.stdout is not None and hub_proc.stderr is not None
        port = int(hub_proc.stdout.readline())
        strangers = [socket.create_connection(("127.0.0.1", port)) for _ in range(60)]
        assert "accept failed: Too many open files" in hub_proc.stderr.readline()
        for s in strangers:
            s.close()
        link = HubLink(key(1), 1, 5.0, 0.1, Stops())
        link.end("succeeded", None)
        link.connect("127.0.0.1", port)
        assert hub_proc.wait(20) == 0
    finally:
        hub_proc.kill()
        hub_proc.wait()


@pytest.mark.security
def test_a_thread_that_would_not_start_is_not_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    h, _ = hub(2)
    failed: list[str] = []
    start = hubmod.thread

    def no_thread_once(fn: Any, *args: Any) -> Any:
        if fn.__name__ == "_peer" and not failed:  # the thread that would follow the peer
            failed.append(fn.__name__)
            raise RuntimeError("can't start new thread")
        return start(fn, *args)

    monkeypatch.setattr(hubmod, "thread", no_thread_once)
    link = HubLink(key(1), 1, 5.0, 0.1, Stops())
    link.end("succeeded", None)
    link.connect("127.0.0.1", h.port)  # its first try is dropped; it comes again
    assert h.all_ended.wait(10) and failed == ["_peer"]


class Tap:
    """Where the hub's channel writes: the lines an attacker on the wire sees."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.lines.append(data)


@pytest.mark.security
@pytest.mark.parametrize("attack", ["replayed", "reordered", "forged", "reflected"])
def test_a_message_not_from_the_other_end_ends_the_session(attack: str) -> None:
    """After the handshake, anyone who can write into the TCP stream could say `stop`: every
    message carries an HMAC under the session key over its direction and number."""
    key, tap = b"k" * 32, Tap()
    to_peer = Channel(tap, None, key, b"hub", b"peer")
    to_peer.send(t="hb")
    to_peer.send(t="stop", reason="node 1 failed", node=1)
    first, second = tap.lines
    stop = b'{"t": "stop", "reason": "forged", "node": 1}'
    lines = {
        "replayed": [first, second, second],
        "reordered": [second, first],
        "forged": [first, first[:65] + stop + b"\n"],
        "reflected": [first, _mac(key, b"peer", b"1", stop) + b" " + stop + b"\n"],
    }[attack]
    wire, peer_end = socket.socketpair()
    wire.sendall(b"".join(lines))
    wire.shutdown(socket.SHUT_WR)
    got = list(Channel(peer_end, peer_end.makefile("rb"), key, b"peer", b"hub"))
    assert got == [{"t": "hb"}, {"t": "stop", "reason": "node 1 failed", "node": 1}][: len(got)]
    assert len(got) == {"replayed": 2, "reordered": 0, "forged": 1, "reflected": 1}[attack]
    wire.close()
    peer_end.close()


@pytest.mark.security
def test_a_peer_obeys_no_hub_that_cannot_prove_itself() -> None:
    """Whoever answers at the hub's address without the run's secret cannot stop a node."""
    impostor = socket.create_server(("127.0.0.1", 0))
    port = impostor.getsockname()[1]
    stops = Stops()
    link = HubLink(key(1), 1, 60.0, 0.1, stops)
    link.connect("127.0.0.1", port)
    for _ in range(2):  # it comes again, and is turned away again
        sock, _ = impostor.accept()
        sock.sendall(CHALLENGE + b"00" * 16 + b"\n")
        sock.makefile("rb").readline()
        sock.sendall(b"0" * 64 + b"\n" + b"x" * 64 + b' {"t": "stop", "reason": "impostor"}\n')
        sock.close()
    assert not stops.event.wait(0.5)
    impostor.close()


# -- attempts (job.restarts) ------------------------------------------------------------------


def outcome(status: str = "failed", lost: tuple[int, ...] = (), halted: bool = False) -> Outcome:
    return Outcome(status, "why", 1, list(lost), halted, False)


def next_step(out: Outcome, attempt: int, restarts: int, spares: int, *more: Any) -> object:
    """None for another attempt, else (the run's status, why it ends here)."""
    decision = policy.decide(out, attempt, restarts, spares, *more)
    return None if decision.restart else (decision.status, decision.why)


@pytest.mark.parametrize(
    ("out", "attempt", "restarts", "spares", "want"),
    [
        (outcome("succeeded"), 0, 3, 0, ("succeeded", "")),
        (outcome("stopped", halted=True), 0, 3, 0, ("stopped", "")),
        (outcome("lost", halted=True), 0, 3, 0, ("lost", "")),
        (outcome(), 0, 0, 0, ("failed", "")),
        (outcome(), 2, 2, 0, ("failed", "no restarts left")),
        (outcome(), 1, 2, 0, None),
        (outcome(lost=(1,)), 0, 1, 1, None),
        (outcome(lost=(1, 2)), 0, 1, 1, ("failed", "no spare host left to take its place")),
    ],
)
def test_what_follows_an_attempt(
    out: Outcome, attempt: int, restarts: int, spares: int, want: object
) -> None:
    assert next_step(out, attempt, restarts, spares) == want


def test_restart_on_and_no_progress_end_the_chain() -> None:
    """job.restart_on and an attempt that got no further (remote/host/retry.py) end it."""
    out = outcome()._replace(code=7, rank=3, lines=40)
    assert next_step(out, 0, 3, 0, [137]) == ("failed", "job.restart_on does not name exit 7")
    assert next_step(out, 0, 3, 0, [7]) is None
    assert next_step(out, 1, 3, 0, None, out) == (
        "failed", "no progress: it failed as the last attempt did, no further",
    )  # fmt: skip
    assert next_step(out, 1, 3, 0, None, out._replace(lines=39)) is None
    bad0 = out._replace(bad={0: ("node0", "GPU 1 on node0: Xid 79")})
    assert next_step(bad0, 0, 3, 3) == (
        "failed", "node 0's host is bad, and no spare takes the hub's place",
    )  # fmt: skip


def test_a_bad_host_is_told_it_is_over_and_needs_a_spare() -> None:
    """Its GPU failed: the others stop, its supervisor leaves, a spare must take its place."""
    h, stops = hub(3)
    links = [HubLink(key(k), k, 5.0, 0.1, Stops()) for k in (1, 2)]
    for link in links:
        link.connect("127.0.0.1", h.port)
    joined(h, *links)
    why = "GPU 3 (00000000:5D:00.0) on node1: Xid 79: GPU has fallen off the bus."
    facts = {"cause": "gpu", "rank": None, "code": None, "lines": 12, "bad": True, "host": "node1"}
    links[0].end("failed", why, facts=facts)
    assert stops.event.wait(3) and stops.said == [(why, 1)]
    assert links[0].word() is None and links[0].over == f"this host is bad for the run: {why}"
    links[1].end("stopped", why)
    h.own_end("stopped", why)
    out = h.settle()
    assert (out.reason, out.kind, out.lost, out.cause) == (why, "gpu", [1], "failed")
    assert out.bad == {1: ("node1", why)}
    assert next_step(out, 0, 1, 0) == ("failed", "no spare host left to take its place")
    assert next_step(out, 0, 1, 1) is None


def test_a_restart_names_the_nodes_a_spare_must_replace_first() -> None:
    assert policy.decide(outcome(lost=(1,)), 0, 1, 1) == policy.Decision(True, replace=(1,))
    assert policy.decide(outcome(), 0, 1, 0).replace == ()


def test_a_failed_attempt_settles_then_every_peer_hears_the_restart() -> None:
    h, _ = hub(3)
    links = [HubLink(key(k), k, 5.0, 0.1, Stops()) for k in (1, 2)]
    for link in links:
        link.connect("127.0.0.1", h.port)
    links[0].end("failed", "rank 3 failed on node1")
    links[1].end("stopped", "stopped by the hub")
    h.own_end("stopped", "stopped by the hub")
    out = h.settle()
    assert (out.status, out.reason, out.node, out.lost) == (
        "failed", "rank 3 failed on node1", 1, [],
    )  # fmt: skip
    h.restart(1, "rank 3 failed on node1")
    assert [link.word() for link in links] == [hubmod.Go(1, "rank 3 failed on node1")] * 2
    for link in links:
        link.begin(1)
        link.end("succeeded", None)
    h.own_end("succeeded", None)
    assert h.settle().status == "succeeded"
    h.finish("every rank succeeded", 5)
    assert [link.word() for link in links] == [None, None]  # over: they leave


def test_a_halt_ends_the_wait_for_the_next_attempt() -> None:
    h, _ = hub(2)
    link = HubLink(key(1), 1, 5.0, 0.1, Stops())
    link.connect("127.0.0.1", h.port)
    link.halt("stopped", "stopped from the launcher")
    assert not h.wait_quiet(5)  # cut short at once
    assert h.halted == ("stopped", "stopped from the launcher")


def test_a_spare_proves_its_ticket_and_the_lost_node_is_told_it_is_over() -> None:
    h, stops = hub(2, timeout=0.6)
    assert stops.event.wait(3)  # node 1 never came: lost
    h.own_end("stopped", "node 1 lost")
    out = h.settle()
    assert out.lost == [1] and out.reason == "node1 was lost"
    h.expect(1, "t1cket")
    spare = HubLink("t1cket", 1, 5.0, 0.1, Stops(), since=1)
    spare.connect("127.0.0.1", h.port)
    assert h.wait_replaced() is None and h.replaced == 1
    old = HubLink(key(1), 1, 5.0, 0.1, Stops())  # the lost node's supervisor, come back
    old.connect("127.0.0.1", h.port)
    assert old.word() is None and old.over == "another host took this node's place"
    h.restart(1, "node1 was lost")
    assert spare.word() == hubmod.Go(1, "node1 was lost")
    stranger = HubLink("guess", 1, 5.0, 0.1, Stops(), since=1)
    stranger.connect("127.0.0.1", h.port)
    time.sleep(0.3)
    assert h.peers[1] is not None and stranger.chan is None


def test_no_spare_ends_the_wait() -> None:
    h, stops = hub(2, timeout=0.6)
    assert stops.event.wait(3)
    h.give_up("spare node2 not used: no torch")
    assert h.wait_replaced() == "spare node2 not used: no torch"


def test_a_failure_of_its_own_is_the_cause_over_a_peers_echo() -> None:
    """rank 2 died of rank 1's death (its peer gone) and said so first: rank 1 is the cause."""
    h, _ = hub(2)
    link = HubLink(key(1), 1, 5.0, 0.1, Stops())
    link.connect("127.0.0.1", h.port)
    link.end("failed", "rank 2 failed on node1", echo=True)
    time.sleep(0.3)
    h.own_end("failed", "rank 1 failed on node0")
    assert h.settle().reason == "rank 1 failed on node0"


def test_a_hub_that_hears_from_no_peer_says_it_is_the_one_cut_off() -> None:
    """node 0's host cut: every peer falls silent at once. The hub blames its own network,
    never a healthy peer, and no restart follows (node 0 has no spare)."""
    h, stops, links = with_peers(0.6)
    for link in links:
        link._over("cut off")  # no more heartbeats, no FIN: silence, as a cut link is
    assert stops.event.wait(3)
    reason, node = stops.said[0]
    assert node == 0 and "node 0 (node0), the run's hub, heard from no peer for 0.6 s" in reason
    h.own_end("stopped", reason)
    out = h.settle()
    assert (out.status, out.node, out.isolated) == ("failed", 0, True)
    assert next_step(out, 0, 3, 3) == ("failed", "the run's hub was cut off: no restart")


def test_peers_falling_silent_a_little_apart_still_say_the_hub_was_cut() -> None:
    """A cut of node 0 leaves its peers' last heartbeats apart by a beat or so (more under
    load): the first to fall silent is not blamed while the other may yet fall silent too."""
    _h, stops, links = with_peers(1.0)
    links[0]._over("cut off")
    time.sleep(0.3)  # under half a link_timeout: the hub cannot tell yet
    links[1]._over("cut off")
    assert stops.event.wait(3)
    assert stops.said[0][1] == 0 and "heard from no peer" in stops.said[0][0]


def test_a_silent_peer_beside_one_still_heard_is_lost_at_its_timeout() -> None:
    _h, stops, links = with_peers(1.0)
    links[0]._over("cut off")
    assert stops.event.wait(3)  # node2 heard all along: node1's own link, not node 0's
    assert stops.said[0][1] == 1 and stops.said[0][0].startswith("node 1 (node1) lost")


@pytest.mark.parametrize("launcher_heard", [True, False])
def test_one_silent_peer_of_one_is_told_apart_by_the_launcher(launcher_heard: bool) -> None:
    """With one peer, its silence alone cannot say whose network went: the launcher node 0
    still hears (attached) says the peer's; no launcher heard either, node 0's own."""
    since = time.monotonic()
    h, stops = hub(2, timeout=0.6, launcher=time.monotonic if launcher_heard else lambda: since)
    link = HubLink(key(1), 1, 5.0, 0.1, Stops())
    link.connect("127.0.0.1", h.port)
    joined(h, link)
    link._over("cut off")
    assert stops.event.wait(3)
    reason, node = stops.said[0]
    if launcher_heard:
        assert node == 1 and reason.startswith("node 1 (node1) lost")
    else:
        assert node == 0 and "heard from no peer" in reason


def test_a_peer_the_launcher_found_dead_is_lost_at_once() -> None:
    """Its supervisor SIGKILLed: the launcher says so, and the run ends now, not after
    link_timeout of silence."""
    h, stops, links = with_peers(30, peer_timeout=30)
    links[0]._over("SIGKILLed")
    t0 = time.monotonic()
    h.gone(1, 0, "node1's supervisor died (its stream ended without a word)")
    assert stops.said == [("node1's supervisor died (its stream ended without a word)", 1)]
    h.own_end("stopped", "node1's supervisor died")
    links[1].end("stopped", "node1's supervisor died")
    out = h.settle()
    assert time.monotonic() - t0 < 3
    assert (out.status, out.reason, out.node, out.lost) == (
        "failed", "node1's supervisor died", 1, [1],
    )  # fmt: skip


def test_a_peer_that_never_learned_the_hub_leaves_on_its_halt() -> None:
    """No launcher told it where the hub is (two Ctrl-C at the start): its stop or lease ends
    it, with no wait for an address that will not come."""
    link = HubLink(key(1), 1, 30, 0.1, Stops())
    t0 = time.monotonic()
    link.halt("lost", "no launcher heard from for 30 s")
    link.end("stopped", "no launcher heard from for 30 s")
    assert link.word() is None and time.monotonic() - t0 < 1


def test_after_a_halt_the_hub_waits_for_no_peer_that_never_joined() -> None:
    h, _ = hub(3, timeout=30)
    link = HubLink(key(1), 1, 30, 0.1, Stops())
    link.connect("127.0.0.1", h.port)
    joined(h, link)
    t0 = time.monotonic()
    h.halt("stopped", "stopped from the launcher")
    h.own_end("stopped", "stopped from the launcher")
    link.end("stopped", "stopped from the launcher")
    out = h.settle()  # node 2 never joined: it never learned where the hub is
    assert time.monotonic() - t0 < 3
    assert (out.status, out.reason) == ("stopped", "stopped from the launcher")


def mute_peer(h: Hub, node: int) -> socket.socket:
    """A peer that joins, then says nothing more and never hangs up: its link was cut."""
    sock = socket.create_connection(("127.0.0.1", h.port))
    f = sock.makefile("rb")
    nonce, mine = f.readline()[len(CHALLENGE) :].strip(), b"ab" * 16
    session = channel.Session(key(node), nonce, mine, node)
    sock.sendall(b"%d %s %s\n" % (node, mine, session.peer_proof))
    f.readline()  # the hub's proof
    Channel(sock, f, session.key, b"peer", b"hub").send(t="join", since=0, attempt=0)
    return sock


def test_the_end_waits_for_no_lost_peer_to_hang_up() -> None:
    """node2 cut: the run is over once it is lost; the hub does not give its silent link the
    time it gives live peers to hang up (before, node 0 ended 10 s later)."""
    h, stops = hub(3, timeout=0.6)
    link = HubLink(key(1), 1, 5.0, 0.1, Stops())
    link.connect("127.0.0.1", h.port)
    cut = mute_peer(h, 2)
    joined(h, link)
    assert stops.event.wait(3) and stops.said[0][1] == 2
    h.own_end("stopped", stops.said[0][0])
    link.end("stopped", stops.said[0][0])
    assert h.settle().lost == [2]
    t0 = time.monotonic()
    h.finish("node2 was lost", 10)
    assert time.monotonic() - t0 < 2 and link.word() is None
    cut.close()


def test_the_hub_asks_every_peer_for_a_sample_and_a_hang_fails_the_attempt() -> None:
    """The hang watch's round trip over the hub link, then its verdict: every node stops for
    the culprit's node, and the attempt's outcome is a failure that ends the run (on_hang:
    stop)."""
    h, hub_stops = hub(2)
    asked: list[bool] = []

    def sample(stacks: bool) -> dict[str, Any]:
        asked.append(stacks)
        return {"quiet": 31.0, "ranks": {"1": {"cpu": 1.5, "io": 10, "frames": [["f", "a.py", 3]]}}}

    peer = Stops()
    link = HubLink(key(1), 1, 5.0, 0.1, peer, on_sample=sample)
    link.connect("127.0.0.1", h.port)
    joined(h, link)
    got = threading.Event()
    seen: list[Any] = []
    h.sampled = lambda node, seq, s: (seen.append((node, seq, s)), got.set())
    h.ask(7, True)
    assert got.wait(3)
    assert seen == [(1, 7, sample(True))] and asked[0] is True

    h.fail("hung: rank 1 on node1 stuck in f (a.py:3)", 1, final=True)
    assert peer.event.wait(3) and hub_stops.said == [
        ("hung: rank 1 on node1 stuck in f (a.py:3)", 1)
    ]
    h.own_end("stopped", "hung")
    link.end("stopped", "hung")
    out = h.settle()
    assert (out.status, out.reason, out.node, out.final) == (
        "failed",
        "hung: rank 1 on node1 stuck in f (a.py:3)",
        1,
        True,
    )
    assert policy.decide(out, 0, 3, 0) == policy.Decision(False, "failed", "job.on_hang: stop")


# -- hot spares' standbys (remote/host/standby.py, hotspares.py) --------------------------------


def standing(n: int, spares: int) -> tuple[Hub, HotSpares, list[str], list[HubLink]]:
    """A hub of n nodes (node 1 never comes: lost) with `spares` standbys connected; the news
    its hot spares tell of them."""
    news: list[str] = []
    names = [f"node{k}" for k in range(n + spares)]
    h = Hub(SECRET, names[:n], 0.6, 0.1, Stops(), "127.0.0.1", None)
    hot = HotSpares(h, names[n:], news.append)
    h.start()
    hot.start()
    links = [HubLink(key(n + i), n + i, 5.0, 0.1, Stops()) for i in range(spares)]
    for link in links:
        link.connect("127.0.0.1", h.port)
    until(lambda: len(hot.live) == spares)
    return h, hot, news, links


def until(cond: Any, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def lost_node1(h: Hub) -> None:
    until(lambda: 1 in h.lost)
    h.own_end("stopped", "node 1 lost")
    assert h.settle().lost == [1]


def test_a_standby_takes_a_lost_nodes_place_and_its_supervisor_joins() -> None:
    h, hot, news, (standby,) = standing(2, 1)
    lost_node1(h)
    assert hot.take(1) == [(1, "node2")]
    until(lambda: standby.take == (1, 1))
    standby.say(t="took", ok=True, why=None)
    standby.leave("its part is over")
    node1 = HubLink(channel.spare_key(key(2), 1), 1, 5.0, 0.1, Stops(), since=1)  # its node's
    node1.connect("127.0.0.1", h.port)
    assert h.wait_replaced() is None and h.replaced == 1
    assert hot.take(1) == [] and news == []  # taken, not lost


def test_a_standby_that_dies_is_named_and_never_taken() -> None:
    h, hot, news, (standby,) = standing(2, 1)
    standby.leave("killed")
    until(lambda: news)
    assert news == ["spare node2 no longer stands by (its standby died or was cut off): 0 hot "
                    "spare(s) left; an attach may still bring it in"]  # fmt: skip
    lost_node1(h)
    assert hot.take(1) == []  # the hub waits for an attach, as without standbys
    again = HubLink(key(2), 2, 5.0, 0.1, Stops())
    again.connect("127.0.0.1", h.port)
    assert again.word() is None and again.over == "given up for lost"


def test_a_silent_standby_is_given_up_at_its_link_timeout() -> None:
    _, _, news, (standby,) = standing(2, 1)
    standby.beat = 60.0  # its heartbeats stop (the next one is a minute away)
    until(lambda: news, 10)
    assert news[0].startswith("spare node2 no longer stands by")


def test_a_standby_that_could_not_take_its_node_passes_it_on() -> None:
    h, hot, news, (first, second) = standing(2, 2)
    lost_node1(h)
    assert hot.take(1) == [(1, "node2")]
    until(lambda: first.take == (1, 1))
    first.say(t="took", ok=False, why="cannot make the node's directory")
    first.leave("its part is over")
    until(lambda: second.take == (1, 1))
    assert news == ["spare node2 could not take the lost node's place: cannot make the "
                    "node's directory"]  # fmt: skip


def test_every_standby_is_told_the_run_is_over() -> None:
    h, hot, _, links = standing(2, 2)
    lost_node1(h)
    hot.finish("every rank succeeded")
    h.finish("every rank succeeded", 1.0)
    for link in links:
        assert link.word() is None and link.over == "every rank succeeded"


@pytest.mark.parametrize("spares", [0, 1])
def test_a_straggler_to_replace_later_is_a_bad_host_once_the_attempt_fails(spares: int) -> None:
    """job.on_straggler: replace with no spare or restart to spend at once: node2 is swapped
    when the attempt fails of something else, if a spare is left; its supervisor is told over."""
    h, _, links = with_peers(5.0)
    h.replace_later(2, "rank 3 on node2 is a straggler")
    links[0].end("failed", "node 1 (node1) failed: exit 1")
    h.own_end("stopped", "node 1 (node1) failed: exit 1")
    links[1].end("stopped", "node 1 (node1) failed: exit 1")
    spec = {"spares": spares}
    hot = HotSpares(h, [], print)
    pol = policy.Policy(h, hot, spec, lambda **k: None, lambda **k: None, lambda *w: None, 0.1)
    out = pol.swap(h.settle())
    if spares:
        assert out.lost == [2] and out.bad == {2: ("node2", "rank 3 on node2 is a straggler")}
        assert out.cause == "failed" and links[1].word() is None  # over: it leaves
    else:
        assert out.lost == [] and out.bad == {} and h.swaps == {2: "rank 3 on node2 is a straggler"}


def test_a_straggler_replaced_now_ends_the_attempt_and_restarts_whatever_restart_on_says() -> None:
    h, _, links = with_peers(5.0)
    h.fail("straggler: rank 3 on node2 is a straggler", 2, bad=True, cause="straggler")
    assert links[1].word() is None  # node2's supervisor is told it is over: it leaves
    h.own_end("stopped", "straggler")
    links[0].end("stopped", "straggler")
    out = h.settle()
    assert (out.kind, out.node, out.lost, list(out.bad)) == ("straggler", 2, [2], [2])
    assert policy.decide(out, 0, 3, 1, ["failed"]) == policy.Decision(True, replace=(2,))
    assert policy.decide(out, 0, 3, 0, None).why == policy.NO_SPARE
