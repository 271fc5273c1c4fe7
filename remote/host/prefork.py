"""A supervisor forked from the agent before its threads start: remote/host/nodes.py takes it.

A fresh interpreter costs a supervisor several times the CPU on every host that a fork of the
agent does, which has imported most of what the supervisor needs. A fork must come before any thread
(a lock a thread held would stay held in the child), so the agent makes one prefork as it starts.
It waits, having cost a fork, for the command line the agent hands it. The first op that no
launch sends before its start (a plain check, the dashboard's, an attach, a stop) ends it: no
process of ours idles beside an agent; nor does it outlive its agent (its stdin ends). A
second supervisor of the same agent (a dashboard's launch) is a fresh interpreter, as before.

To nodes.py the prefork is what a `subprocess.Popen` would be: args, pid, stdin, stdout,
returncode, poll, kill, wait and communicate. Its command line (/proc/PID/cmdline, what `ps`
shows) is its own: while it waits, `python ddptui-prefork agent PID`, never the agent's (one
agent a host is what a login costs, and what is counted); once taken, the one a fresh
supervisor has, the run's id in it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import threading
import time

# What both the agent's probe and a supervisor import, costliest first (OpenSSL's hashlib,
# socket, shutil with its compressors, subprocess): loaded once before the fork, the prefork has
# them for nothing. A 32-host launch: 5.6 CPU-s of the machine's before, 4.8-5.1 after.
PRELOAD = ("hashlib", "socket", "shutil", "subprocess")

_waiting: Prefork | None = None  # the one waiting, until taken
_lock = threading.Lock()  # the agent's op threads take it or end it


def fork(code_dir: str) -> None:
    """The agent's prefork, forked now: call before any thread starts."""
    global _waiting
    for name in PRELOAD:
        __import__(name)
    r_in, w_in = os.pipe()
    r_out, w_out = os.pipe()
    r_named, w_named = os.pipe()
    for f in (sys.stdout, sys.stderr):  # nothing buffered may be written twice
        with contextlib.suppress(OSError, ValueError):
            f.flush()
    agent = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            _retitle([sys.executable, "ddptui-prefork", "agent", str(agent)])
            os.close(w_named)  # named: no one counting the host's agents counts this one
            _wait_then_boot(r_in, w_out)
        finally:
            os._exit(1)  # never back into the agent's code
    for fd in (r_in, w_out, w_named):
        os.close(fd)
    with contextlib.suppress(OSError):
        os.read(r_named, 1)  # its end: renamed (or dead)
    os.close(r_named)
    _waiting = Prefork(pid, w_in, r_out, code_dir)


def take(argv: list[str], code_dir: str) -> Prefork | None:
    """The prefork as the supervisor `argv` would start, or None (taken already, dead, or the
    code is not the agent's own)."""
    prefork = _pop()
    if prefork is None or prefork.code_dir != code_dir or prefork.poll() is not None:
        if prefork is not None:
            prefork.end()
        return None
    try:
        prefork.stdin.write(json.dumps(argv).encode() + b"\n")
        prefork.stdin.flush()
    except OSError:
        prefork.end()
        return None
    prefork.args = argv
    return prefork


def discard() -> None:
    """No launch follows: the prefork leaves (its stdin ends) and is reaped."""
    prefork = _pop()
    if prefork is not None:
        prefork.end()


def _pop() -> Prefork | None:
    global _waiting
    with _lock:
        prefork, _waiting = _waiting, None
    return prefork


# -- the child ----------------------------------------------------------------------------------


def _wait_then_boot(r_in, w_out):
    """Stdin and stdout the agent's pipes, nothing else of its kept but stderr (as a Popen's
    close_fds), a session of its own; then its command line, and it is the supervisor."""
    os.dup2(r_in, 0)
    os.dup2(w_out, 1)
    for name in os.listdir("/proc/self/fd"):
        if int(name) > 2:
            with contextlib.suppress(OSError):  # listdir's own is closed already
                os.close(int(name))
    os.setsid()
    line = b""
    while not line.endswith(b"\n"):  # a byte at a time: what follows is the supervisor's
        got = os.read(0, 1)
        if not got:
            os._exit(0)  # the agent left without wanting it
        line += got
    argv = json.loads(line)
    _retitle(argv)
    sys.argv = ["-c", *argv[4:]]  # as `python -S -c DAEMON_BOOT CODE_DIR RUN_ID` has it
    from . import boot

    boot.daemon()


def _retitle(argv):
    """/proc/self/cmdline is read from our memory between arg_start and arg_end (fields 48 and
    49 of /proc/self/stat): `argv` written there through /proc/self/mem, NUL-padded, is what
    `ps` shows. Where it does not fit, the agent's command line stays."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])
        title = b"\0".join(a.encode() for a in argv) + b"\0"
        if len(title) > end - start:
            return
        fd = os.open("/proc/self/mem", os.O_WRONLY)
        try:
            os.pwrite(fd, title.ljust(end - start, b"\0"), start)
        finally:
            os.close(fd)
    except (OSError, ValueError, IndexError):
        return


# -- the agent's handle -------------------------------------------------------------------------


class Prefork:
    def __init__(self, pid, stdin_fd, stdout_fd, code_dir):
        self.pid, self.code_dir, self.args, self.returncode = pid, code_dir, None, None
        self.stdin = os.fdopen(stdin_fd, "wb")
        self.stdout = os.fdopen(stdout_fd, "rb", buffering=0)

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = _code(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        if timeout is None:
            if self.returncode is None:
                self.returncode = _code(os.waitpid(self.pid, 0)[1])
            return self.returncode
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise _timeout(self.args, timeout)
            time.sleep(0.01)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def communicate(self, data: bytes = b"", timeout: float | None = None) -> tuple[bytes, None]:
        """Write data, close stdin, read stdout to its end, wait: (what it said, None)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with contextlib.suppress(OSError):  # it is gone: what it said (or not) tells why
            self.stdin.write(data)
            self.stdin.flush()
        with contextlib.suppress(OSError):
            self.stdin.close()
        out = b""
        while True:
            if deadline is not None and not _readable(self.stdout, deadline):
                raise _timeout(self.args, timeout)
            got = os.read(self.stdout.fileno(), 1 << 16)
            if not got:
                break
            out += got
        self.stdout.close()
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        self.wait(left)
        return out, None

    def end(self) -> None:
        """Unused: stdin closed (it leaves by itself), and reaped."""
        with contextlib.suppress(OSError):
            self.stdin.close()
        self.wait()


def _readable(f, deadline):
    left = deadline - time.monotonic()
    return left > 0 and bool(select.select([f], [], [], left)[0])


def _code(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _timeout(args, timeout):
    import subprocess  # nodes.py, which waits, has it: the agent's other ops need none

    return subprocess.TimeoutExpired(args, timeout)
