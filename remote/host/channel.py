"""The supervisors' authenticated channel: the handshake, the MAC'd lines, the hub's door.

The run's hub (remote/host/hub.py) coordinates the supervisors of one run over TCP at the
master address, where anyone on that network can connect; this module is how a connection
earns trust, apart from what the supervisors say over it:

- Each node has a key of its own (`node_key`), which the launcher derives from the run's
  secret and sends that node alone, over SSH in its spec (never on disk); only the hub, node 0,
  holds the secret itself. A spare's key is its own too (`spare_key`, a launcher's ticket), good
  only for the node the hub awaits it for. So a host proves who it is, and can speak as no other.
- The handshake proves both ends know the node's key, each under a nonce of the other's: the
  hub sends its nonce, the peer answers with its node, its own nonce and an HMAC of both; the
  hub answers with an HMAC of its own. Both derive a key for this session from the two nonces.
  A peer that proves another node's key instead of its own is refused and named (`refused`).
- Strangers cost little and never lock a peer out: one thread (the `Door`) reads every
  handshake, each gets one deadline for the whole of it, and past 64 at once the oldest is
  dropped (a peer's takes one round trip; a flood that keeps slots busy only pushes out its
  own). The accept loop outlives a full file table (EMFILE, ENFILE) and a thread that won't
  start: it logs, backs off and goes on.

Then one JSON line at a time, each way, each with an HMAC under the session key over its
direction and a counter (`Channel`): nothing can be forged, replayed or reordered.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import json
import os
import selectors
import socket
import sys
import threading
import time

TYPE_CHECKING = False  # typing's names cost import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any, Iterator

CHALLENGE = b"ddptui-hub "
HANDSHAKE_S = 10.0  # the whole handshake, from connect to the hub's proof
MAX_PENDING = 64  # handshakes under way at once; past that, the oldest goes
LINE_MAX = 1 << 16  # an authenticated message (a failure's reason included)
HELLO_MAX = 256  # a handshake line
BACKOFF_MAX = 1.0  # seconds the accept loop waits, at most, after a failed accept


def log(text: str) -> None:
    sys.stderr.write("{} hub: {}\n".format(time.strftime("%Y-%m-%d %H:%M:%S"), text))
    sys.stderr.flush()


def _mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b" ".join(parts), hashlib.sha256).hexdigest().encode()


def node_key(secret: str, node: int) -> str:
    """Node `node`'s own key (a hot spare's standby: its slot's), from the run's secret."""
    return _mac(secret.encode(), b"node", b"%d" % node).decode()


def spare_key(key: str, node: int) -> str:
    """What a hot spare's standby of key `key` proves once it is node `node`: the hub takes it
    only for the node it chose that standby for."""
    return _mac(key.encode(), b"spare", b"%d" % node).decode()


def peer_proof(key: str, hub_nonce: bytes, peer_nonce: bytes, node: int) -> bytes:
    """A peer's proof, alone (the hub names a peer that proved the wrong node's key)."""
    return _mac(key.encode(), b"peer", hub_nonce, peer_nonce, b"%d" % node)


class Session:
    """Both ends' proofs and the session key, from the node's key, both nonces and the node."""

    def __init__(self, key, hub_nonce, peer_nonce, node):
        self.peer_proof = peer_proof(key, hub_nonce, peer_nonce, node)
        key, said = key.encode(), (hub_nonce, peer_nonce, b"%d" % node)
        self.hub_proof = _mac(key, b"hub", *said)
        self.key = _mac(key, b"key", *said)


class Channel:
    """An authenticated connection: each line `MAC JSON`, the MAC over the sender's side, the
    message's number and the JSON; a line that fails it ends the channel."""

    def __init__(self, sock, rfile, key, mine, theirs):
        self.sock, self.rfile, self.key = sock, rfile, key
        self.mine, self.theirs = mine, theirs  # b"hub" / b"peer"
        self.sent = self.read = 0
        self.lock = threading.Lock()

    def send(self, **msg: Any) -> bool:
        data = json.dumps(msg).encode()
        with self.lock:
            line = _mac(self.key, self.mine, b"%d" % self.sent, data) + b" " + data + b"\n"
            self.sent += 1
            try:
                self.sock.sendall(line)
            except OSError:
                return False
        return True

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """The messages as they come, until EOF or a line that is not from the other end."""
        while True:
            line = self.rfile.readline(LINE_MAX)
            mac, _, data = line.rstrip(b"\n").partition(b" ")
            want = _mac(self.key, self.theirs, b"%d" % self.read, data)
            if not line.endswith(b"\n") or not hmac.compare_digest(mac, want):
                return
            self.read += 1
            try:
                msg = json.loads(data)
            except ValueError:
                return
            if isinstance(msg, dict):
                yield msg

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


class Door:
    """The hub's accept loop: every handshake in one thread, non-blocking, each with one
    deadline; admit(node, who, channel, hub's proof) gets the peers that proved themselves.
    keys(node): the (who, key) a peer of that node may prove; refused(node, hub nonce, peer
    nonce, proof): one that proved none of them (a stranger, or a host claiming another's node)."""

    def __init__(self, server, keys, nnodes, admit, refused=None):
        self.server, self.keys, self.nnodes, self.admit = server, keys, nnodes, admit
        self.refused = refused or (lambda *_: None)
        self.pending = {}  # socket -> [deadline, hub nonce, bytes so far], oldest first
        self.sel = selectors.DefaultSelector()
        self.backoff = 0.0
        self.paused_until = 0.0

    def run(self) -> None:
        self.server.setblocking(False)
        self.sel.register(self.server, selectors.EVENT_READ)
        while self.server.fileno() >= 0:  # until the hub's socket is closed
            now = time.monotonic()
            if self.paused_until and now >= self.paused_until:
                self.paused_until = 0.0
                self.sel.register(self.server, selectors.EVENT_READ)
            for key, _ in self.sel.select(self._timeout(now)):
                if key.fileobj is self.server:
                    self._accept()
                else:
                    self._read(key.fileobj)
            now = time.monotonic()
            for sock, (deadline, _, _) in list(self.pending.items()):
                if now < deadline:
                    break  # the rest came later
                self._drop(sock)

    def _timeout(self, now):
        wake = self.paused_until or now + 1.0
        if self.pending:  # the oldest handshake's deadline comes first
            wake = min(wake, next(iter(self.pending.values()))[0])
        return max(0.0, wake - now)

    def _accept(self):
        try:
            sock, _ = self.server.accept()
        except BlockingIOError:
            return
        except OSError as exc:  # EMFILE, ENFILE, ENOBUFS...: the hub must outlive them
            self._pause(f"accept failed: {os.strerror(exc.errno or errno.EIO)}")
            return
        self.backoff = 0.0
        if len(self.pending) >= MAX_PENDING:
            self._drop(next(iter(self.pending)))
        nonce = os.urandom(16).hex().encode()
        try:
            sock.setblocking(False)
            sock.send(CHALLENGE + nonce + b"\n")  # a fresh socket's buffer takes it whole
            self.sel.register(sock, selectors.EVENT_READ)
        except (OSError, ValueError):
            sock.close()
            return
        self.pending[sock] = [time.monotonic() + HANDSHAKE_S, nonce, b""]

    def _pause(self, why):
        self.backoff = min(BACKOFF_MAX, max(0.05, self.backoff * 2))
        if not self.paused_until:
            self.sel.unregister(self.server)
        self.paused_until = time.monotonic() + self.backoff
        log(f"{why}; accepting again in {self.backoff:g} s")

    def _read(self, sock):
        entry = self.pending.get(sock)
        if entry is None:  # dropped by an accept in the same round
            return
        try:
            data = sock.recv(HELLO_MAX)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        entry[2] += data
        if not data or len(entry[2]) > HELLO_MAX:
            self._drop(sock)
        elif entry[2].endswith(b"\n"):
            self._hello(sock, entry[1], entry[2])
        elif b"\n" in entry[2]:
            self._drop(sock)  # a peer says nothing more until the hub has proved itself

    def _hello(self, sock, nonce, line):
        """`NODE NONCE PROOF`: a peer of this run, or a stranger (dropped)."""
        self._forget(sock)
        try:
            words = line.split()
            node, their_nonce, proof = int(words[0]), words[1], words[2]
            if len(words) != 3 or not 0 < node < self.nnodes or len(their_nonce) > 64:
                raise ValueError
        except (ValueError, IndexError):
            sock.close()
            return
        for who, key in self.keys(node):
            session = Session(key, nonce, their_nonce, node)
            if hmac.compare_digest(proof, session.peer_proof):
                return self._let_in(sock, node, who, session)
        sock.close()
        self.refused(node, nonce, their_nonce, proof)

    def _let_in(self, sock, node, who, session):
        chan = Channel(sock, sock.makefile("rb"), session.key, b"hub", b"peer")
        try:
            self.admit(node, who, chan, session.hub_proof)
        except RuntimeError as exc:  # no thread for it (a process limit): it will come again
            chan.close()
            self._pause(f"cannot follow node {node}: {exc}")

    def _drop(self, sock):
        self._forget(sock)
        sock.close()

    def _forget(self, sock):
        del self.pending[sock]
        self.sel.unregister(sock)


def prove(chan: Channel, proof: bytes) -> bool:
    """The hub's proof, sent once a peer proved itself: False (and the channel closed) if it
    could not go."""
    try:
        chan.sock.settimeout(HANDSHAKE_S)
        chan.sock.sendall(proof + b"\n")
        chan.sock.settimeout(None)
    except OSError:
        chan.close()
        return False
    return True


def dial(addr: tuple[str, int], key: str, node: int) -> Channel:
    """A peer's channel to the hub at addr, proving node's key, once both proved themselves
    (OSError, ValueError: not now, or not the hub)."""
    deadline = time.monotonic() + HANDSHAKE_S
    sock = socket.create_connection(addr, timeout=HANDSHAKE_S)
    try:
        return _handshake(sock, deadline, key, node)
    except BaseException:
        sock.close()
        raise


def _handshake(sock: socket.socket, deadline: float, key: str, node: int) -> Channel:
    """The hub's nonce; our node, nonce and proof; the hub's proof, or not the hub."""
    f = sock.makefile("rb")

    def line():
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        return f.readline(HELLO_MAX)

    hello = line()
    if not hello.startswith(CHALLENGE) or not hello.endswith(b"\n"):
        raise ValueError("not a ddptui hub")
    nonce = os.urandom(16).hex().encode()
    session = Session(key, hello[len(CHALLENGE) :].strip(), nonce, node)
    sock.sendall(b"%d %s %s\n" % (node, nonce, session.peer_proof))
    if not hmac.compare_digest(line().rstrip(b"\n"), session.hub_proof):
        raise ValueError("the hub did not prove itself")
    sock.settimeout(None)
    return Channel(sock, f, session.key, b"peer", b"hub")


def listen(bind: str | None, port: int = 0) -> socket.socket:
    """A socket at the master address (the first of a name's addresses this host has), else
    on every interface (an address this host does not have: NAT, a name resolved otherwise);
    on `port` where one was chosen ahead (under Slurm: no launcher tells the peers), else any."""
    if bind:
        try:
            found = socket.getaddrinfo(bind, port, type=socket.SOCK_STREAM)
        except OSError:
            found = []
        for family, _, _, _, addr in found:
            with contextlib.suppress(OSError):
                return socket.create_server(addr, family=family)
        log(f"{bind} is no address of this host's: listening on every interface")
    try:
        return socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
    except (OSError, ValueError):
        return socket.create_server(("", port))
