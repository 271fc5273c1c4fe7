"""job.notify: a command of the user's, run on node 0's host when something happens to the run.

Node 0's supervisor holds the run (its hub decides restarts), so word goes out from there, with
or without a launcher attached. The command runs through `sh -c` with DDPTUI_EVENT,
DDPTUI_RUN_ID, DDPTUI_STATUS, DDPTUI_MESSAGE and DDPTUI_LINKS in its environment (made safe:
no escape sequence or control character of a job's text, each bounded), one at a time and in
order, each bounded to protocol.NOTIFY_TIMEOUT (its process group killed past that). A command
that fails is logged and said in the stream; it never changes anything about the run.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
import time

from . import procs, protocol
from .safetext import bounded, clean

OUTPUT_KEPT = 2048  # bytes of a failing command's output kept for its log line
# What the command's environment says, each far below the kernel's 128 KiB for one string
# (past it, exec fails with E2BIG: no notify at all).
MESSAGE_MAX = 8 << 10
LINKS_MAX = 32 << 10


class Notifier:
    """notify: the spec's {command, events} or None; failed(event, why) hears of a failure.
    wait(pid, timeout): the exit code of a child, None past the timeout (the supervisor reaps
    every child in one place); None: this module waits itself."""

    def __init__(self, notify, run_id, failed, wait=None, timeout=protocol.NOTIFY_TIMEOUT):
        notify = notify or {}
        self.command = notify.get("command")
        self.events = set(notify.get("events") or protocol.NOTIFY_DEFAULT)
        self.run_id, self.failed, self.timeout = run_id, failed, timeout
        self.wait = wait or _wait
        self.running = set()  # pids of commands under way: never the job's to sweep
        # Held from a command's start to its pid in `running`, and by a sweep while it looks
        # for the job's processes: a command started as the job is stopped is never taken
        # for one of the job's (a hang's word goes out as its stop begins).
        self.starting = threading.Lock()
        self.todo: queue.Queue[tuple[str, str, str] | None] = queue.Queue()
        self.thread = None
        self.links = []  # the trackers' links seen so far (remote/host/progress.py)

    def said_links(self, links):
        self.links = links

    def wanted(self, event):
        """Is word of `event` asked for (whether or not a command is set: the dashboard rings)?"""
        return event in self.events

    def __call__(self, event, status, message):
        """Run the command for `event` (if asked for), after those before it."""
        if not (self.command and self.wanted(event)):
            return
        if self.thread is None:
            self.thread = threading.Thread(target=self._serve, daemon=True)
            self.thread.start()
        self.todo.put((event, status, message))

    def close(self, timeout):
        """Wait (at most `timeout`) for the commands asked for so far."""
        if self.thread is not None:
            self.todo.put(None)
            self.thread.join(timeout)

    def _serve(self):
        while True:
            item = self.todo.get()
            if item is None:
                return
            why = self.run(*item)
            if why:
                self.failed(item[0], why)

    def run(self, event, status, message):
        """One command, to its end or its time limit: None, or why it failed."""
        env = dict(os.environ)
        env.update(
            DDPTUI_EVENT=event, DDPTUI_RUN_ID=self.run_id, DDPTUI_STATUS=clean(status),
            DDPTUI_MESSAGE=bounded(" ".join(clean(message).split()), MESSAGE_MAX),  # one line
            DDPTUI_LINKS=links_text(self.links),  # trackers' links node 0's ranks printed
        )  # fmt: skip
        with self.starting:
            try:
                proc = subprocess.Popen(
                    ["sh", "-c", self.command], env=env, stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                )  # fmt: skip
            except OSError as exc:
                return "cannot run sh: {}".format(exc.strerror)
            self.running.add(proc.pid)
        tail: list[bytes] = []
        reader = threading.Thread(target=_keep_tail, args=(proc.stdout, tail), daemon=True)
        reader.start()
        try:
            code = self.wait(proc.pid, self.timeout)
            if code is None:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                self.wait(proc.pid, 5.0)
        finally:
            self.running.discard(proc.pid)
            proc.returncode = -signal.SIGKILL if code is None else code  # never polled again
        reader.join(1.0)
        said = b"".join(tail).decode("utf-8", "replace").strip().splitlines()
        last = ": " + said[-1][:200] if said else ""
        if code is None:
            return "killed after {:g} s{}".format(self.timeout, last)
        return "exit {}{}".format(code, last) if code else None


def links_text(links):
    """The links, space-separated, as many as LINKS_MAX characters hold, each made safe."""
    kept, size = [], 0
    for url in links:
        url = clean(url)
        size += len(url) + 1
        if size > LINKS_MAX:
            break
        kept.append(url)
    return " ".join(kept)


def _wait(pid, timeout):
    """A child's exit code, None if still running after `timeout` (polled: no other waiter)."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return procs.exit_code(status)
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def _keep_tail(pipe, tail):
    """Read the command's output to its end, keeping only the last OUTPUT_KEPT bytes."""
    kept = b""
    with contextlib.suppress(OSError, ValueError):
        for chunk in iter(lambda: pipe.read(4096), b""):
            kept = (kept + chunk)[-OUTPUT_KEPT:]
    tail.append(kept)
