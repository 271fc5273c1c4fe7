"""A supervisor's own commands (the health watch's reads, job.notify's), kept apart from its job.

A supervisor (remote/host/daemon.py) finds its job's processes as its own tree (it is a child
subreaper) and reaps every child in one place. Its own short commands are in that tree too, and
were once taken for the job's: the sweep at an attempt's end TERMed a health read under way (the
GPUs then "cannot be read: nvidia-smi failed (exit -15)"), and the reaper took a read's exit
status from under Popen, which then says 0 whatever the command said (an older driver refusing
a field name, read as an answer: "a short row"). So here, which process may signal which:

- a command starts under `lock`, which a sweep holds while it looks for the job's processes:
  what `held()` names (the commands under way and what they started) is never signalled as the
  job's, even one started as the sweep begins;
- it carries none of a run's tags (job.node_tags: what a sweep by tags takes), unless its caller
  gives it an environment of its own;
- its exit code is the reaper's to give (`wait`), never Popen's; where no reaper runs (an agent's
  check), it waits for its own child;
- past its time it is SIGKILLed with its session: the one signal a command of ours gets from us,
  so a read that ended by another signal was ended by someone else (remote/host/health.py reads
  it again).

python3 >= 3.8, standard library only.
"""

from __future__ import annotations  # py3.8: annotations stay unevaluated

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time

from . import job, procs

TYPE_CHECKING = False  # typing costs milliseconds of import on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any, Callable, ContextManager

TAGS = tuple(job.node_tags("", 0))  # what a run's processes carry, and a sweep by tags takes
KEPT = 8 << 20  # bytes of a command's output kept at most (its end: a journal's last lines)
KILL_WAIT_S = 5.0  # after SIGKILL: its status comes, or it is stuck in the kernel (D state)


def wait_child(pid: int, timeout: float) -> int | None:
    """A child's exit code (-N: signal N), None if it still runs after `timeout`: for a process
    with no reaper of its own (nothing else waits on its children)."""
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None  # not ours, or gone: nothing to say of it
        if done:
            code: int = procs.exit_code(status)
            return code
        if time.monotonic() > deadline:
            return None
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def untagged(env: Any) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in TAGS}


class OwnCommands:
    """The commands one process runs for itself. wait(pid, timeout): a child's exit code from
    the process's reaper; guard: held while a command starts, the reaper's lock; codes: the
    exit codes it keeps by pid, where an earlier process's under a new command's pid is dropped
    (pids come round again)."""

    def __init__(self, wait: Callable[[int, float], int | None] | None = None,
                 guard: ContextManager[Any] | None = None,
                 codes: dict[int, int | None] | None = None) -> None:  # fmt: skip
        self.wait = wait or wait_child
        self.guard = guard or contextlib.nullcontext()
        self.codes = {} if codes is None else codes
        self.lock = threading.Lock()  # held from a start to its pid in `running`, and by a sweep
        self.running: set[int] = set()

    def start(self, argv: list[str], env: dict[str, str] | None = None,
              **popen: Any) -> subprocess.Popen[bytes]:  # fmt: skip
        """argv started in a session of its own, known as ours before anyone can look."""
        env = untagged(os.environ) if env is None else env
        with self.lock, self.guard:
            proc = subprocess.Popen(argv, env=env, start_new_session=True, **popen)
            self.codes.pop(proc.pid, None)
            self.running.add(proc.pid)
        return proc

    def finish(self, proc: subprocess.Popen[bytes], timeout: float) -> int | None:
        """Its exit code within `timeout`, else None: then killed with its session."""
        try:
            code = self.wait(proc.pid, max(0.0, timeout))
            if code is None:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                self.wait(proc.pid, KILL_WAIT_S)
        finally:
            self.running.discard(proc.pid)
        proc.returncode = -signal.SIGKILL if code is None else code  # Popen never waits on it
        return code

    def held(self) -> set[int]:
        """Called holding `lock`: the commands under way and everything they started. Read
        from a copy: a command's end (`finish`, another thread) leaves the set meanwhile."""
        pids = set(self.running)
        for pid in list(pids):
            pids.update(procs.descendants(pid))
        return pids

    def run(self, argv: list[str], timeout: float) -> tuple[int | None, str, str]:
        """(exit code, stdout, stderr) of argv; code None when it ran past timeout (killed)."""
        deadline = time.monotonic() + timeout
        try:
            proc = self.start(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)  # fmt: skip
        except OSError as exc:
            return 126, "", "cannot run {}: {}".format(argv[0], exc.strerror)
        out, err = _drain(proc, deadline)
        code = self.finish(proc, deadline - time.monotonic())
        return code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")

    def end(self) -> None:
        """The process is leaving: what still runs of its commands goes first."""
        with self.lock:
            for pid in list(self.running):
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)


def _drain(proc: Any, deadline: float) -> tuple[bytes, bytes]:
    """Both pipes read to their end (or the deadline), the last KEPT bytes of each kept."""
    kept = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    with selectors.DefaultSelector() as sel:
        for pipe in kept:
            sel.register(pipe, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            ready = sel.select(left) if left > 0 else []
            if not ready:
                break
            for key, _ in ready:
                chunk = os.read(key.fd, 1 << 16)
                buf = kept[key.fileobj]
                if not chunk:
                    sel.unregister(key.fileobj)
                buf += chunk
                if len(buf) > 2 * KEPT:
                    del buf[:-KEPT]
    for pipe in kept:
        pipe.close()
    return bytes(kept[proc.stdout][-KEPT:]), bytes(kept[proc.stderr][-KEPT:])
