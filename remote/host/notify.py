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
import subprocess
import threading

from . import protocol
from .owncommands import OwnCommands
from .safetext import bounded, clean

TYPE_CHECKING = False  # typing's names cost import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any, Callable

OUTPUT_KEPT = 2048  # bytes of a failing command's output kept for its log line
# What the command's environment says, each far below the kernel's 128 KiB for one string
# (past it, exec fails with E2BIG: no notify at all).
MESSAGE_MAX = 8 << 10
LINKS_MAX = 32 << 10


class Notifier:
    """notify: the spec's {command, events} or None; failed(event, why) hears of a failure.
    own: the supervisor's own commands (remote/host/owncommands.py), which a command runs as:
    never taken for one of the job's, even one started as the job is stopped (a hang's word
    goes out as its stop begins), its exit code from the supervisor's one reaper."""

    def __init__(
        self, notify: dict[str, Any] | None, run_id: str, failed: Callable[[str, str], None],
        own: OwnCommands | None = None, timeout: float = protocol.NOTIFY_TIMEOUT,
    ) -> None:  # fmt: skip
        notify = notify or {}
        self.command: str = notify.get("command") or ""  # "": none
        self.events = set(notify.get("events") or protocol.NOTIFY_DEFAULT)
        self.run_id, self.failed, self.timeout = run_id, failed, timeout
        self.own = own or OwnCommands()
        self.todo: queue.Queue[tuple[str, str, str] | None] = queue.Queue()
        self.thread: threading.Thread | None = None
        self.links: list[str] = []  # the trackers' links seen so far (remote/host/progress.py)

    def said_links(self, links: list[str]) -> None:
        self.links = links

    def wanted(self, event: str) -> bool:
        """Is word of `event` asked for (whether or not a command is set: the dashboard rings)?"""
        return event in self.events

    def __call__(self, event: str, status: str, message: str) -> None:
        """Run the command for `event` (if asked for), after those before it."""
        if not (self.command and self.wanted(event)):
            return
        if self.thread is None:
            self.thread = threading.Thread(target=self._serve, daemon=True)
            self.thread.start()
        self.todo.put((event, status, message))

    def close(self, timeout: float) -> None:
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
        try:
            proc = self.own.start(["sh", "-c", self.command], env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
        except OSError as exc:
            return "cannot run sh: {}".format(exc.strerror)
        tail: list[bytes] = []
        reader = threading.Thread(target=_keep_tail, args=(proc.stdout, tail), daemon=True)
        reader.start()
        code = self.own.finish(proc, self.timeout)
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


def _keep_tail(pipe, tail):
    """Read the command's output to its end, keeping only the last OUTPUT_KEPT bytes."""
    kept = b""
    with contextlib.suppress(OSError, ValueError):
        for chunk in iter(lambda: pipe.read(4096), b""):
            kept = (kept + chunk)[-OUTPUT_KEPT:]
    tail.append(kept)
