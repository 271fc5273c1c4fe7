"""The supervisor's viewers: whoever connects to its Unix socket (an agent's relay, for a
launcher) gets the node's spool from where it asks, then live, and may send the launcher's
commands back, a line each (remote/host/daemon.py reads them).

A viewer is also how the supervisor hears a launcher at all: the last word from any is the
lease (`heard`). One that says `hello OFFSET view` only watches (a read-only dashboard, `ddptui
serve`): its words hold no lease and command nothing, so the run stays as it was, attached to
its owner's lease or detached, whatever that viewer does or however it goes. Out of file
descriptors or threads, the accept loop waits and goes on; at the end, every viewer gets the
last bytes before the supervisor leaves (`drain`).
"""

from __future__ import annotations

import errno
import select
import threading
import time

from . import protocol, wire
from .common import close, log, thread
from .spool import Trimmed

TYPE_CHECKING = False  # typing costs import time on every host, for nothing there
if TYPE_CHECKING:
    import socket
    from typing import Any, Callable

    from .spool import Spool

SEND_MAX = 1 << 18  # spool bytes per wire frame
ACCEPT_BACKOFF_S = (0.05, 2.0)  # out of file descriptors: wait, then take viewers again
GONE = (errno.EBADF, errno.ENOTSOCK, errno.EINVAL)  # accept on a socket that was closed
COMMAND_MAX = 4096  # bytes of a launcher's command line read


class Viewers:
    """The viewers of one node: hello() is what each is told first, command(words) gets each
    line a viewer sends."""

    def __init__(
        self, spool: Spool, hello: Callable[[], dict[str, Any]],
        command: Callable[[list[str]], None], beat: float,
    ) -> None:  # fmt: skip
        self.spool, self.hello, self.command, self.beat = spool, hello, command, beat
        self.heard = time.monotonic()  # the last word from any launcher
        self.clients: dict[socket.socket, list[Any]] = {}  # socket -> [last heard, done event]
        # Held from a viewer's accept to its entry in clients: drain then sees it in the
        # backlog or among the clients, never between the two.
        self.accepting = threading.Lock()
        self.server: Any = None  # the viewers' listening socket (serve)
        self.closing = False  # the daemon is leaving: its accept loop ends

    def serve(self, server: socket.socket) -> None:
        self.server = server
        thread(self._accept, server)

    def close_silent(self, link_timeout: float) -> None:
        for sock, (heard, _) in list(self.clients.items()):
            if time.monotonic() - heard > link_timeout:
                close(sock)  # a viewer behind a dead link: its relay must not linger

    def _accept(self, server):
        """Viewers, for as long as the daemon lives: out of file descriptors or threads (a
        flood, a busy host), it says so, waits and goes on; it never stops taking them."""
        pause = ACCEPT_BACKOFF_S[0]
        server.setblocking(False)  # a viewer gone between select and accept blocks no one
        while not self.closing:
            try:
                if not select.select([server], [], [], 0.5)[0]:
                    continue
                with self.accepting:
                    sock, _ = server.accept()
                    done = threading.Event()
                    self.clients[sock] = [time.monotonic(), done]  # before drain can miss it
                    thread(self._client, sock, done)
                pause = ACCEPT_BACKOFF_S[0]
            except BlockingIOError:
                continue
            except (OSError, RuntimeError, ValueError) as exc:
                if self.closing or isinstance(exc, ValueError) or getattr(exc, "errno", 0) in GONE:
                    return  # the socket itself is gone: no wait brings it back
                log(f"viewers: {exc!r}; taking them again in {pause:g} s")
                time.sleep(pause)
                pause = min(pause * 2, ACCEPT_BACKOFF_S[1])

    def _client(self, sock, done):
        rfile = sock.makefile("rb")
        try:
            verb, args = protocol.heard(rfile.readline(256).decode("utf-8", "replace").split())
            offset = int(args[0]) if verb == protocol.SAY_HELLO else 0
        except (OSError, ValueError, IndexError):
            args, offset = [], 0
        view = args[1:2] == [protocol.SAY_VIEW]
        if not view:
            self.heard = time.monotonic()
        hello = self.hello()
        thread(self._send_spool, sock, offset, hello, done)
        try:
            for line in rfile:
                self.clients[sock][0] = time.monotonic()  # still there (close_silent)
                if view:
                    continue
                self.heard = time.monotonic()
                self.command(line[:COMMAND_MAX].decode("utf-8", "replace").split())
        except OSError:
            pass
        finally:
            done.set()
            self.clients.pop(sock, None)
            close(sock)

    def _send_spool(self, sock, offset, hello, done):
        def send(data):
            sock.sendall(data)

        try:
            send_spool(send, self.spool, offset, hello, self.beat, done)
        except OSError:
            pass
        finally:
            done.set()

    def drain(self, deadline: float) -> None:
        """Until every viewer has its last bytes: those connected before the socket's name
        went too (an attach that came as the run ended), not only those seen so far."""
        while time.monotonic() < deadline:
            with self.accepting:  # a viewer is in the backlog or among the clients by now
                live = [done for _, done in list(self.clients.values()) if not done.is_set()]
                waiting = live or select.select([self.server], [], [], 0.05)[0]
            if live:
                live[0].wait(max(0.0, deadline - time.monotonic()))
            elif not waiting:
                return  # no viewer left, none waiting to be let in
            else:
                time.sleep(0.01)  # the accept thread lets it in


def send_spool(
    send: Callable[[bytes], object], spool: Spool, offset: int, hello: dict[str, Any],
    beat: float, done: threading.Event,
) -> None:  # fmt: skip
    """Everything from `offset` on, then live, until the spool closes (or `done`)."""
    send(wire.control(t=protocol.STREAM_HELLO, **hello))
    while not done.is_set():
        try:
            chunk = spool.read(offset, SEND_MAX)
        except Trimmed as gone:
            send(wire.control(t=protocol.TRIMMED, missed=gone.start - offset, at=gone.start))
            offset = gone.start
            continue
        if chunk:
            send(wire.data_frame(offset, chunk))
            offset += len(chunk)
        elif spool.closed:
            send(wire.control(t=protocol.EOF, end=offset))
            return
        elif not spool.wait(offset, beat) and not spool.closed:
            send(wire.control(t=protocol.HEARTBEAT))
