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


def thread(fn, *args):
    t = threading.Thread(target=fn, args=args, daemon=True)
    t.start()
    return t


def log(text):
    sys.stderr.write("{} {}\n".format(time.strftime("%Y-%m-%d %H:%M:%S"), text))
    sys.stderr.flush()


def rmtree(path):
    import shutil  # here: most supervisors never remove a tree

    shutil.rmtree(path, ignore_errors=True)


def close(sock):
    """Shut both ways, then closed: a reader blocked on it wakes."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
