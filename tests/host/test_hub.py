"""The run's hub: supervisors telling each other to stop, with nobody attached (in-process)."""

from __future__ import annotations

import socket
import threading
import time

from remote.host.hub import Hub, HubLink

SECRET = "s3cret"


class Stops:
    def __init__(self) -> None:
        self.said: list[tuple[str, int | None]] = []
        self.event = threading.Event()

    def __call__(self, reason: str, node: int | None) -> None:
        self.said.append((reason, node))
        self.event.set()


def hub(n: int, timeout: float = 5.0) -> tuple[Hub, Stops]:
    stops = Stops()
    h = Hub(SECRET, [f"node{k}" for k in range(n)], timeout, 0.1, stops)
    h.start()
    return h, stops


def test_a_peer_that_ended_before_it_knew_the_hub_is_heard() -> None:
    for _ in range(20):  # its `end` follows its login at once: the hub must not lose it
        h, _ = hub(2)
        link = HubLink(SECRET, 1, 5.0, 0.1, Stops())
        link.end("succeeded", None)
        link.connect("127.0.0.1", h.port)
        assert h.all_ended.wait(3)
        assert link.delivered.wait(3)


def test_a_failed_peer_stops_every_other_node() -> None:
    h, hub_stops = hub(3)
    peers = [Stops(), Stops()]
    links = [HubLink(SECRET, k + 1, 5.0, 0.1, peers[k]) for k in range(2)]
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
    link = HubLink(SECRET, 1, 0.6, 0.1, stops)
    link.connect("127.0.0.1", h.port)
    time.sleep(0.2)
    h.server.close()
    for sock, _ in list(h.peers.values()):  # the hub's host is gone: nothing answers
        sock.shutdown(socket.SHUT_RDWR)
    assert stops.event.wait(3)
    assert "lost the run's hub" in stops.said[0][0]


def test_a_wrong_secret_is_turned_away() -> None:
    h, _ = hub(2)
    intruder = HubLink("guess", 1, 5.0, 0.1, Stops())
    intruder.connect("127.0.0.1", h.port)
    time.sleep(0.5)
    assert not h.peers
