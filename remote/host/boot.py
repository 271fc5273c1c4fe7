"""A supervisor's own process: detached from the agent that started it, its fds its own.

The agent's `start` op (remote/host/nodes.py) runs `daemon()` in a fresh interpreter (its
command line says `boot.daemon()`, which is how `ps` and the tests tell a supervisor), which
detaches at once and leaves a guardian behind it: the supervisor outlives any one SSH
connection (launchers come and go), and if it dies (OOM, SIGKILL) the guardian sweeps its job.
What the supervisor then does is remote/host/daemon.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket

from . import procs, protocol, state
from .common import log, rmtree
from .daemon import Daemon
from .job import node_tags
from .leasedir import LeaseError


def daemon() -> None:
    """The supervisor's own process (remote/host/nodes.py starts it, maybe ahead of its node).
    On stdin, a line each: its node's directory, the node's early spec (protocol.EARLY), then
    the whole spec, the go. It prepares as soon as it has the first two: detached from
    everything of the agent's, its socket bound, its guardian up; a prepared node waits there
    while the other hosts are still being checked. Its job starts only at the go; "ok" (or why
    not) goes on stdout once it serves. No node, or no go (stdin ends first: the launch did
    not come): it leaves, and leaves nothing."""
    state.prune()  # what needs no node is done first, while the launch's checks still run
    with contextlib.suppress(OSError, AttributeError):
        procs.libc()
    lines = _Lines(0)
    line = lines.readline()
    if not line:
        os._exit(0)
    try:
        ndir = json.loads(line)
        os.chdir(ndir)
        # its own log from here on (before, the agent's stderr said why a boot failed)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        log_fd = os.open("supervisor.log", flags, 0o600)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        early = json.loads(lines.readline())
        tags = node_tags(early["run_id"], early["node"])
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # relative: a deep home must not exceed sun_path's 108 bytes
        server.bind(protocol.CTL_SOCKET)
        server.listen(64)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        os.write(1, "cannot start the supervisor: {}".format(exc).encode())
        os._exit(1)
    if os.fork():  # the agent waits for this parent; the daemon goes on, adopted by init
        os._exit(0)
    os.umask(0o077)
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    # "ok" goes on a descriptor of its own, closed once said: the agent reads to EOF, and the
    # guardian and the job (forked before and after) must hold no copy of it; nor of the go's.
    said_fd, lines.fd = os.dup(1), os.dup(0)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    subreaper = procs.become_subreaper()
    box = early.get("container")
    guard = guardian(tags, early.get("grace", 5.0), box and box["runtime"])
    _preload()
    go = lines.readline()
    os.close(lines.fd)
    if not go.endswith(b"\n"):  # the launch did not come (its checks failed, it was stopped)
        os.write(guard[1], b"k")
        rmtree(ndir)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(ndir))  # the run's, where no other node of it is here
        os._exit(0)
    said = []

    def ready(text):
        said.append(text)
        os.write(said_fd, text.encode())
        os.close(said_fd)

    code = 0
    try:
        spec = protocol.spec(json.loads(go))
        held = _lease(spec, server)
        daemon = Daemon(spec, ndir)
        daemon.subreaper, daemon.guard, daemon.lease = subreaper, guard, held
        daemon.serve(server, ready)
    except LeaseError as exc:  # its GPUs are not its to take: said, nothing started
        log("no lease: {}".format(exc))
        ready("cannot start the job: {}".format(exc))
        code = 1
    except BaseException as exc:  # its log says why, and where
        import traceback

        log("supervisor failed: {!r}\n{}".format(exc, traceback.format_exc()))
        if not said:
            ready("supervisor failed: {!r}".format(exc))
        code = 1
    os._exit(code)


def _preload():
    """What the go will need, loaded while the node waits for it (the other hosts' checks, or
    the queue): a host with GPUs leases them, and their code's imports are most of a lease's
    CPU at the start (its patterns compiled), which 128 nodes would pay at once."""
    if shutil.which("nvidia-smi"):
        from . import lease  # noqa: F401


def _lease(spec, server):
    """The node's GPUs' lease (remote/host/lease.py) before its job: handed over by the agent,
    or taken here; None where it leases none."""
    if not spec["lease"]:
        return None
    from . import lease

    return lease.claim(spec, server)


class _Lines:
    """Lines from a descriptor, which the daemon moves once detached (a buffered file would
    keep what it read ahead on the old one)."""

    def __init__(self, fd):
        self.fd, self.buf = fd, b""

    def readline(self):
        while b"\n" not in self.buf:
            got = os.read(self.fd, 1 << 16)
            if not got:
                break
            self.buf += got
        line, nl, self.buf = self.buf.partition(b"\n")
        return line + nl


def guardian(tags: dict[str, str], grace: float, runtime: str | None = None) -> tuple[int, int]:
    """A tiny watcher that sweeps the job by its tags if this daemon dies (OOM, SIGKILL), and the
    run's containers with it (runtime: docker's or podman's outlive their client).

    Returns its pid and the pipe to write b"k" into on a normal end."""
    if runtime:
        from . import container  # a run in containers alone: loaded now, not once it died
    r, w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(r)
        return pid, w
    try:
        os.closerange(3, r)  # the spool, the control socket: those must die with the daemon
        os.closerange(r + 1, 1 << 16)
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        got = os.read(r, 1)  # b"" (EOF): the daemon died without saying goodbye
        if not got:
            procs.sweep(lambda: procs.tagged_pids(tags), grace)
            if runtime:
                container.sweep(runtime, tags["DDPTUI_RUN_ID"], int(tags["DDPTUI_NODE"]))
    finally:
        os._exit(0)
