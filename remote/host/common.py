"""What the supervisor's modules share: a thread, a dated log line, a socket shut, a tree gone.

The supervisor (remote/host/daemon.py) logs to its stderr, which boot points at its node's
supervisor.log; its threads never keep it alive once it leaves.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time

TYPE_CHECKING = False  # typing's names cost import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any, Callable


def thread(fn: Callable[..., object], *args: Any) -> threading.Thread:
    t = threading.Thread(target=fn, args=args, daemon=True)
    t.start()
    return t


def log(text: str) -> None:
    sys.stderr.write("{} {}\n".format(time.strftime("%Y-%m-%d %H:%M:%S"), text))
    sys.stderr.flush()


def rmtree(path: str) -> None:
    import shutil  # here: most supervisors never remove a tree

    shutil.rmtree(path, ignore_errors=True)


def close(sock: socket.socket) -> None:
    """Shut both ways, then closed: a reader blocked on it wakes."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
