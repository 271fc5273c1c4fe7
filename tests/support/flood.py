"""A slow flood, as anyone on the cluster network can send: N connections to ADDR:PORT, each
sending one byte every EVERY seconds; one the server closes is opened again at the next round.

    python flood.py ADDR PORT N EVERY

Each round prints `made M` (connections made so far). Runs until killed.
Standard library only (it runs in another test host's network namespace).
"""

from __future__ import annotations

import socket
import sys
import time


def main() -> int:
    addr, port, n, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    socks: list[socket.socket | None] = [None] * n
    made = 0
    while True:
        for k, sock in enumerate(socks):
            if sock is not None and _alive(sock):
                continue
            if sock is not None:
                sock.close()
            socks[k] = _connect(addr, port)
            made += 1
        print(f"made {made}", flush=True)
        time.sleep(every)


def _alive(sock: socket.socket) -> bool:
    """Read what the server said (its challenge) and send one more byte, if still open."""
    try:
        while sock.recv(4096):
            pass
        return False  # closed by the server
    except BlockingIOError:
        pass
    except OSError:
        return False
    try:
        sock.send(b"1")
    except OSError:
        return False
    return True


def _connect(addr: str, port: int) -> socket.socket:
    """A connection under way (never waited for: a server that stopped accepting must not
    slow the flood down); one that fails shows at the next round."""
    sock = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
    sock.setblocking(False)
    sock.connect_ex((addr, port))
    return sock


if __name__ == "__main__":
    sys.exit(main())
