"""The job dies with its supervisor, by the kernel (PR_SET_PDEATHSIG): with the supervisor, its
guardian and the launcher SIGKILLed at once (a crash, `pkill -9 -f`), no rank goes on using its
GPUs with nobody left to sweep it, whether or not another launch ever comes.

- `preexec`: the process the supervisor starts (torchrun, or the script itself) is KILLed when
  the supervisor dies;
- `RANKS`, in the job's sitecustomize (remote/host/linebuf.py): each child of that process (a
  rank of torchrun, of mp.spawn, of a script that starts its own) asks the same for itself as
  its Python starts: KILLed when that process dies.

The kernel sends the signal when the thread that forked the child ends, not its process: only
children of a main thread (which lives as long as its process) are so bound. A rank whose
launcher died before the rank's Python started, or one that left for another parent, is not:
the next launch on the host kills such leftovers by the run's tags (lease.sweep_dead).
python3 >= 3.8, standard library only; RANKS runs on the job's own python (keep its syntax old).
"""

from __future__ import annotations

import os
import signal
import threading

TYPE_CHECKING = False  # typing costs import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any, Callable

PR_SET_PDEATHSIG = 1
VAR = "DDPTUI_SUPERVISOR"  # the supervisor's pid, in the job's environment (RANKS reads it)


def preexec(libc: Callable[[], Any]) -> Callable[[], None] | None:
    """A Popen preexec_fn: the child is KILLed when this process dies. None off the main thread
    (the child would die with the thread), or where prctl cannot be had from libc() (not Linux:
    the checks refuse such hosts). A parent gone before the prctl: the child leaves at once."""
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = libc().prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def bind() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return bind


RANKS = r"""
def _die_with_launcher():
    # A child of the process ddptui's supervisor started, forked by its main thread: KILLed by
    # the kernel when that process dies (see remote/host/deathsig.py in ddptui).
    supervisor = os.environ.get("DDPTUI_SUPERVISOR")
    if not supervisor:
        return
    parent = os.getppid()
    try:
        with open("/proc/%d/stat" % parent, "rb") as f:
            grandparent = f.read().rpartition(b")")[2].split()[1]
        with open("/proc/%d/task/%d/children" % (parent, parent), "rb") as f:
            forked_by_main = str(os.getpid()).encode() in f.read().split()
    except (OSError, IndexError):
        return
    if grandparent != supervisor.encode() or not forked_by_main:
        return
    import ctypes

    ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
    if os.getppid() != parent:  # it died before we asked
        os._exit(1)


try:
    _die_with_launcher()
except Exception:
    pass
"""
