"""The supervisors of one run tell each other when to stop, with or without a launcher attached.

Node 0's supervisor is the run's hub: it listens on TCP (any free port; the peers reach it at the
master address, over the network torch's own store already needs); every other supervisor
connects once the launcher tells it where. A peer proves it belongs to the run with an HMAC of
the hub's challenge under the run's secret (it travels in the spec over SSH, never on disk).

Then one JSON line at a time, each way: heartbeats, "my job ended (ok / failed / stopped)", and
from the hub "stop, because ...". A peer silent for link_timeout is lost, which stops the rest;
a peer that loses its hub stops itself. The hub stays up until every peer's job has ended.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import socket
import threading
import time

CHALLENGE = b"ddptui-hub "


def _thread(fn, *args):
    t = threading.Thread(target=fn, args=args, daemon=True)
    t.start()
    return t


def _digest(secret, nonce, node):
    return hmac.new(secret.encode(), nonce + b" %d" % node, hashlib.sha256).hexdigest()


def _send(sock, lock, **msg):
    data = (json.dumps(msg) + "\n").encode()
    with lock:
        try:
            sock.sendall(data)
        except OSError:
            return False
    return True


class Hub:
    """Node 0's side. on_stop(reason, node) stops node 0's own job, for node's sake."""

    def __init__(self, secret, names, link_timeout, beat, on_stop):
        self.secret, self.names, self.link_timeout, self.beat = secret, names, link_timeout, beat
        self.on_stop = on_stop
        self.lock = threading.Lock()
        self.peers = {}  # node -> [socket, send lock]
        self.heard = {k: time.monotonic() for k in range(1, len(names))}
        self.ended = set()
        self.stopping = None  # the reason every node was told to stop
        self.all_ended = threading.Event()
        if len(names) == 1:
            self.all_ended.set()
        self.server = _listen()
        self.port = self.server.getsockname()[1]

    def start(self):
        _thread(self._accept)
        _thread(self._watch)

    def own_end(self, status, reason):
        """Node 0's job ended; a failure of its own stops the others."""
        if status == "failed":
            self.stop_all(reason, 0)

    def stop_all(self, reason, node):
        """Every node stops because of `node` (its failure or loss)."""
        with self.lock:
            if self.stopping is not None:
                return
            self.stopping = (reason, node)
            peers = list(self.peers.values())
        for sock, lock in peers:
            _send(sock, lock, t="stop", reason=reason, node=node)
        self.on_stop(reason, node)

    def _accept(self):
        while True:
            try:
                sock, _ = self.server.accept()
            except OSError:
                return
            _thread(self._peer, sock)

    def _peer(self, sock):
        rfile = sock.makefile("rb")  # one reader: a second would lose what the first read ahead
        node = self._authenticate(sock, rfile)
        if node is None:
            sock.close()
            return
        lock = threading.Lock()
        with self.lock:
            old = self.peers.get(node)
            self.peers[node] = [sock, lock]
            self.heard[node] = time.monotonic()
            stopping = self.stopping
        if old is not None:
            old[0].close()
        if stopping is not None:  # it joined after the stop: it stops too
            _send(sock, lock, t="stop", reason=stopping[0], node=stopping[1])
        with contextlib.suppress(OSError):  # reset by the peer: the same as its going silent
            self._follow(node, rfile, sock, lock)
        # Gone without saying its job ended: its supervisor died or the link broke. A broken
        # link may heal (the peer reconnects); the watchdog decides after link_timeout.

    def _follow(self, node, rfile, sock, lock):
        for line in rfile:
            try:
                msg = json.loads(line)
            except ValueError:
                return
            self.heard[node] = time.monotonic()
            if msg.get("t") == "end":
                self._ended(node, msg.get("status"), msg.get("reason"))
            elif msg.get("t") == "hb":
                _send(sock, lock, t="hb")

    def _authenticate(self, sock, rfile):
        nonce = os.urandom(16).hex().encode()
        try:
            sock.settimeout(10)
            sock.sendall(CHALLENGE + nonce + b"\n")
            line = rfile.readline(256).split()
            node, digest = int(line[0]), line[1].decode()
            sock.settimeout(None)
        except (OSError, ValueError, IndexError):
            return None
        if not 0 < node < len(self.names):
            return None
        if not hmac.compare_digest(digest, _digest(self.secret, nonce, node)):
            return None
        return node

    def _ended(self, node, status, reason):
        with self.lock:
            self.ended.add(node)
            done = len(self.ended) == len(self.names) - 1
        if status == "failed":
            self.stop_all(reason or f"node {node} ({self.names[node]}) failed", node)
        if done:
            self.all_ended.set()

    def _watch(self):
        while not self.all_ended.wait(self.beat):
            now = time.monotonic()
            for node, heard in list(self.heard.items()):
                if node in self.ended or now - heard <= self.link_timeout:
                    continue
                why = (
                    f"node {node} ({self.names[node]}) lost: its supervisor was not heard "
                    f"from for {self.link_timeout:g} s"
                )
                self._ended(node, "failed", why)


class HubLink:
    """A peer's side: connects to the hub, keeps the lease, obeys its stop."""

    def __init__(self, secret, node, link_timeout, beat, on_stop):
        self.secret, self.node, self.link_timeout, self.beat = secret, node, link_timeout, beat
        self.on_stop = on_stop
        self.sock = None
        self.lock = threading.Lock()
        self.heard = time.monotonic()
        self.done = threading.Event()  # our job ended: no more stops to obey
        self.delivered = threading.Event()  # the hub knows it
        self.ending = None
        self.addr = None

    def connect(self, addr, port):
        """Start talking to the hub at addr:port (the launcher says where, once known)."""
        if self.addr is not None:
            return
        self.addr = (addr, port)
        self.heard = time.monotonic()
        _thread(self._run)
        _thread(self._watch)

    def end(self, status, reason):
        """Our job ended: say so (now, or once connected), so the hub need not wait for us."""
        self.ending = {"t": "end", "status": status, "reason": reason}
        self.done.set()
        sock = self.sock
        if sock is not None and _send(sock, self.lock, **self.ending):
            self.delivered.set()

    def _run(self):
        while not self.delivered.is_set():
            with contextlib.suppress(OSError, ValueError, IndexError):
                self._session()
            self.done.wait(1.0)  # the hub is gone or unreachable: the watchdog decides

    def _session(self):
        sock = socket.create_connection(self.addr, timeout=10)
        f = sock.makefile("rb")
        nonce = f.readline(256)
        if not nonce.startswith(CHALLENGE):
            raise ValueError("not a ddptui hub")
        nonce = nonce[len(CHALLENGE) :].strip()
        sock.sendall(b"%d %s\n" % (self.node, _digest(self.secret, nonce, self.node).encode()))
        sock.settimeout(None)
        self.sock = sock
        if self.ending is not None and _send(sock, self.lock, **self.ending):
            self.delivered.set()
            return
        _thread(self._beat, sock)
        for line in f:
            msg = json.loads(line)
            self.heard = time.monotonic()
            if msg.get("t") == "stop":
                self.on_stop(msg.get("reason") or "the run's hub said stop", msg.get("node"))
        self.sock = None

    def _beat(self, sock):
        while self.sock is sock and not self.done.is_set():
            _send(sock, self.lock, t="hb")
            time.sleep(self.beat)

    def _watch(self):
        while not self.done.wait(self.beat):
            if time.monotonic() - self.heard > self.link_timeout:
                self.on_stop(
                    "lost the run's hub (node 0's supervisor): not heard from for "
                    f"{self.link_timeout:g} s",
                    0,
                )
                return


def _listen():
    try:
        return socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True)
    except (OSError, ValueError):
        return socket.create_server(("", 0))
