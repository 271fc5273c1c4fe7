"""The supervisors of one run tell each other when to stop, with or without a launcher attached.

Node 0's supervisor is the run's hub: it listens on TCP at the master address (any free port;
the peers reach it there, over the network torch's own store already needs); every other
supervisor connects once the launcher tells it where. Anyone on that network can connect, so:

- The handshake proves both ends know the run's secret (it travels in the spec over SSH, never
  on disk), each under a nonce of the other's: the hub sends its nonce, the peer answers with
  its node, its own nonce and an HMAC of both; the hub answers with an HMAC of its own. Both
  derive a key for this session from the two nonces.
- Strangers cost little and never lock a peer out: one thread reads every handshake, each gets
  one deadline for the whole of it, and past 64 at once the oldest is dropped (a peer's takes
  one round trip; a flood that keeps slots busy only pushes out its own). The accept loop
  outlives a full file table (EMFILE, ENFILE) and a thread that won't start: it logs, backs
  off and goes on.

Then one JSON line at a time, each way, each with an HMAC under the session key over its
direction and a counter: nothing can be forged, replayed or reordered. Heartbeats, "my job
ended (ok / failed / stopped)", and from the hub "stop, because ...". A peer silent for
link_timeout is lost, which stops the rest; a peer that loses its hub stops itself. The hub
stays up until every peer's job has ended.
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

CHALLENGE = b"ddptui-hub "
HANDSHAKE_S = 10.0  # the whole handshake, from connect to the hub's proof
MAX_PENDING = 64  # handshakes under way at once; past that, the oldest goes
LINE_MAX = 1 << 16  # an authenticated message (a failure's reason included)
HELLO_MAX = 256  # a handshake line
BACKOFF_MAX = 1.0  # seconds the accept loop waits, at most, after a failed accept
RETRY_S = 1.0  # a peer's wait before it connects again


def _thread(fn, *args):
    t = threading.Thread(target=fn, args=args, daemon=True)
    t.start()
    return t


def log(text):
    sys.stderr.write("{} hub: {}\n".format(time.strftime("%Y-%m-%d %H:%M:%S"), text))
    sys.stderr.flush()


def _mac(key, *parts):
    return hmac.new(key, b" ".join(parts), hashlib.sha256).hexdigest().encode()


class Session:
    """Both ends' proofs and the session key, from the secret, both nonces and the node."""

    def __init__(self, secret, hub_nonce, peer_nonce, node):
        secret, said = secret.encode(), (hub_nonce, peer_nonce, b"%d" % node)
        self.peer_proof = _mac(secret, b"peer", *said)
        self.hub_proof = _mac(secret, b"hub", *said)
        self.key = _mac(secret, b"key", *said)


class Channel:
    """An authenticated connection: each line `MAC JSON`, the MAC over the sender's side, the
    message's number and the JSON; a line that fails it ends the channel."""

    def __init__(self, sock, rfile, key, mine, theirs):
        self.sock, self.rfile, self.key = sock, rfile, key
        self.mine, self.theirs = mine, theirs  # b"hub" / b"peer"
        self.sent = self.read = 0
        self.lock = threading.Lock()

    def send(self, **msg):
        data = json.dumps(msg).encode()
        with self.lock:
            line = _mac(self.key, self.mine, b"%d" % self.sent, data) + b" " + data + b"\n"
            self.sent += 1
            try:
                self.sock.sendall(line)
            except OSError:
                return False
        return True

    def __iter__(self):
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

    def close(self):
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


class Hub:
    """Node 0's side. on_stop(reason, node) stops node 0's own job, for node's sake.
    bind: the master address (a name is resolved here); None: every interface."""

    def __init__(self, secret, names, link_timeout, beat, on_stop, bind=None):
        self.secret, self.names, self.link_timeout, self.beat = secret, names, link_timeout, beat
        self.on_stop = on_stop
        self.lock = threading.Lock()
        self.peers = {}  # node -> its Channel
        self.heard = {k: time.monotonic() for k in range(1, len(names))}
        self.ended = set()
        self.stopping = None  # the reason every node was told to stop
        self.all_ended = threading.Event()
        if len(names) == 1:
            self.all_ended.set()
        self.server = _listen(bind)
        self.port = self.server.getsockname()[1]

    def start(self):
        _thread(Door(self.server, self.secret, len(self.names), self._admit).run)
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
        for chan in peers:
            chan.send(t="stop", reason=reason, node=node)
        self.on_stop(reason, node)

    def _admit(self, node, chan, proof):
        """A peer proved itself (the door's thread): follow it in a thread of its own."""
        _thread(self._peer, node, chan, proof)

    def _peer(self, node, chan, proof):
        try:  # the hub's proof: only now, so a peer never takes a hub without a thread for it
            chan.sock.settimeout(HANDSHAKE_S)
            chan.sock.sendall(proof + b"\n")
            chan.sock.settimeout(None)
        except OSError:
            chan.close()
            return
        with self.lock:
            old = self.peers.get(node)
            self.peers[node] = chan
            self.heard[node] = time.monotonic()
            stopping = self.stopping
        if old is not None:
            old.close()
        if stopping is not None:  # it joined after the stop: it stops too
            chan.send(t="stop", reason=stopping[0], node=stopping[1])
        with contextlib.suppress(OSError):  # reset by the peer: the same as its going silent
            self._follow(node, chan)
        # Gone without saying its job ended: its supervisor died or the link broke. A broken
        # link may heal (the peer reconnects); the watchdog decides after link_timeout.
        chan.close()

    def _follow(self, node, chan):
        for msg in chan:
            self.heard[node] = time.monotonic()
            if msg.get("t") == "end":
                self._ended(node, msg.get("status"), msg.get("reason"))
            elif msg.get("t") == "hb":
                chan.send(t="hb")

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


class Door:
    """The hub's accept loop: every handshake in one thread, non-blocking, each with one
    deadline; admit(node, channel, hub's proof) gets the peers that proved themselves."""

    def __init__(self, server, secret, nnodes, admit):
        self.server, self.secret, self.nnodes, self.admit = server, secret, nnodes, admit
        self.pending = {}  # socket -> [deadline, hub nonce, bytes so far], oldest first
        self.sel = selectors.DefaultSelector()
        self.backoff = 0.0
        self.paused_until = 0.0

    def run(self):
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
        session = Session(self.secret, nonce, their_nonce, node)
        if not hmac.compare_digest(proof, session.peer_proof):
            sock.close()
            return
        chan = Channel(sock, sock.makefile("rb"), session.key, b"hub", b"peer")
        try:
            self.admit(node, chan, session.hub_proof)
        except RuntimeError as exc:  # no thread for it (a process limit): it will come again
            chan.close()
            self._pause(f"cannot follow node {node}: {exc}")

    def _drop(self, sock):
        self._forget(sock)
        sock.close()

    def _forget(self, sock):
        del self.pending[sock]
        self.sel.unregister(sock)


class HubLink:
    """A peer's side: connects to the hub, keeps the lease, obeys its stop."""

    def __init__(self, secret, node, link_timeout, beat, on_stop):
        self.secret, self.node, self.link_timeout, self.beat = secret, node, link_timeout, beat
        self.on_stop = on_stop
        self.chan = None
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
        chan = self.chan
        if chan is not None and chan.send(**self.ending):
            self.delivered.set()

    def _run(self):
        while not self.delivered.is_set():
            with contextlib.suppress(OSError, ValueError, IndexError, RuntimeError):
                self._session()
            time.sleep(RETRY_S)  # the hub is gone or unreachable: the watchdog decides

    def _session(self):
        deadline = time.monotonic() + HANDSHAKE_S
        sock = socket.create_connection(self.addr, timeout=HANDSHAKE_S)
        try:
            chan = self._handshake(sock, deadline)
        except BaseException:
            sock.close()
            raise
        self.chan = chan
        if self.ending is not None and chan.send(**self.ending):
            self.delivered.set()
            return  # left open: a close with the hub's words unread would reset what we sent
        try:
            _thread(self._beat, chan)
            for msg in chan:
                self.heard = time.monotonic()
                if msg.get("t") == "stop":
                    self.on_stop(msg.get("reason") or "the run's hub said stop", msg.get("node"))
        finally:
            self.chan = None
            chan.close()

    def _handshake(self, sock, deadline):
        """The hub's nonce; our node, nonce and proof; the hub's proof, or not the hub."""
        f = sock.makefile("rb")

        def line():
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            return f.readline(HELLO_MAX)

        hello = line()
        if not hello.startswith(CHALLENGE) or not hello.endswith(b"\n"):
            raise ValueError("not a ddptui hub")
        nonce = os.urandom(16).hex().encode()
        session = Session(self.secret, hello[len(CHALLENGE) :].strip(), nonce, self.node)
        sock.sendall(b"%d %s %s\n" % (self.node, nonce, session.peer_proof))
        if not hmac.compare_digest(line().rstrip(b"\n"), session.hub_proof):
            raise ValueError("the hub did not prove itself")
        sock.settimeout(None)
        return Channel(sock, f, session.key, b"peer", b"hub")

    def _beat(self, chan):
        while self.chan is chan and not self.done.is_set():
            chan.send(t="hb")
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


def _listen(bind):
    """A socket at the master address (the first of a name's addresses this host has), else
    on every interface (an address this host does not have: NAT, a name resolved otherwise)."""
    if bind:
        try:
            found = socket.getaddrinfo(bind, 0, type=socket.SOCK_STREAM)
        except OSError:
            found = []
        for family, _, _, _, addr in found:
            with contextlib.suppress(OSError):
                return socket.create_server(addr, family=family)
        log(f"{bind} is no address of this host's: listening on every interface")
    try:
        return socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True)
    except (OSError, ValueError):
        return socket.create_server(("", 0))
