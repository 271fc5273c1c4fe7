"""job.checkpoint, host side: the newest checkpoint in the directory the job saves to.

The job finds its own checkpoint when it starts again (the field's convention: torchrun's
docs, Composer's autoresume, the HF Trainer, torchtitan); ddptui only looks, never writes
there. A checkpoint is an entry of the directory, a file or a folder (HF's `checkpoint-500/`,
torch.distributed.checkpoint's), leaving out hidden and temporary names (a save written to a tmp
name, then renamed); the newest is the one last written, once nothing in it changed for SETTLE_S
(a save under way is not one yet). Its step is read from its name where it carries one
(`step_000010.pt`, `epoch=3-step=1200.ckpt`, `checkpoint-500`): after `step`, else the name's
last number.

Node 0's supervisor watches it all along (`Saves`, every POLL_S): each new newest is said in
its stream (the console, the dashboard, summary.json), the restart hands it to every rank as
DDPTUI_CHECKPOINT, and a restart chain whose newest did not change over two failed attempts
got no further. The checks ask every host whether it sees the directory node 0 saves to
(`look`, after node 0's `mark`): a spare or a restart that runs node 0 elsewhere resumes only
from shared storage. python3 >= 3.8, stdlib only.
"""

from __future__ import annotations  # py3.8: annotations stay unevaluated

import itertools
import os
import re
import threading
import time

TYPE_CHECKING = False  # typing costs milliseconds of import on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any, Callable

POLL_S = 5.0  # between two looks at the directory
SETTLE_S = 2.0  # a checkpoint is whole once nothing in it changed for this long
ENTRIES_MAX = 10000  # entries of the directory looked at (a folder's own, one level)
MARK = ".ddptui-shared-"  # + a token: the check's mark (hidden: never taken for a checkpoint)
_TEMP = re.compile(r"(?i)^\.|\.(tmp|temp|partial|part|lock|swp)$|~$")
_STEP = re.compile(r"(?i)step[=_-]?(\d+)")
_NUMBER = re.compile(r"(\d+)")


def where(path: str, workdir: str | None) -> str:
    """job.checkpoint on this host: `~` expanded, relative to the job's workdir."""
    path = os.path.expanduser(path)
    if workdir and not os.path.isabs(path):
        path = os.path.join(os.path.expanduser(workdir), path)
    return os.path.normpath(path)


def step_of(name: str) -> int | None:
    """The step a checkpoint's name carries, if any."""
    found = _STEP.findall(name) or _NUMBER.findall(name)
    return int(found[-1]) if found else None


def _written(path: str) -> float | None:
    """When an entry was last written: a file's mtime, a folder's newest of its own and its
    entries' (one level: a save writes its files there). None if it is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not os.path.isdir(path):
        return st.st_mtime
    newest = st.st_mtime
    try:
        with os.scandir(path) as entries:
            for i, entry in enumerate(entries):
                if i >= ENTRIES_MAX:
                    break
                try:
                    newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
                except OSError:
                    continue
    except OSError:
        pass
    return newest


def newest(folder: str, settle: float = SETTLE_S) -> dict[str, Any] | None:
    """The newest whole checkpoint in `folder`: {path, step, at (when written, time.time())};
    None if it holds none (or cannot be read). settle: 0 once the job is over (nobody writes)."""
    now, best = time.time(), None
    try:
        with os.scandir(folder) as entries:
            names = [e.name for e in itertools.islice(entries, ENTRIES_MAX)]
    except OSError:
        return None
    for name in names:
        if _TEMP.search(name):
            continue
        at = _written(os.path.join(folder, name))
        if at is None or now - at < settle:
            continue
        if best is None or at > best[0]:
            best = (at, name)
    if best is None:
        return None
    return {"path": os.path.join(folder, best[1]), "step": step_of(best[1]), "at": best[0]}


def newest_path(path: str, workdir: str | None) -> str:
    """job.checkpoint's newest as this host sees it, for DDPTUI_CHECKPOINT ("": none yet)."""
    found = newest(where(path, workdir))
    return found["path"] if found else ""


def loss(attempt: int, saved: dict[str, Any] | None, reached: int | None) -> dict[str, Any]:
    """A failed attempt against its newest checkpoint: the steps it lost (the step it reached,
    less the checkpoint's; None where either is unknown)."""
    step = saved.get("step") if saved else None
    base = step if saved else 0  # none yet: every step is lost
    lost = max(0, reached - base) if reached is not None and base is not None else None
    return {"attempt": attempt, "path": saved["path"] if saved else "", "step": step,
            "reached": reached, "lost": lost}  # fmt: skip


def same(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Whether two looks found the same checkpoint (a file saved over counts as new)."""
    if a is None or b is None:
        return a is b
    return bool(a["path"] == b["path"] and a["at"] == b["at"])


class Saves:
    """Node 0's look at the job's checkpoints, from its start to the run's end: each new
    newest told to `said(checkpoint)`. `latest` is the newest seen (None before any)."""

    def __init__(self, folder: str, said: Callable[[dict[str, Any]], None]) -> None:
        self.folder, self.said = folder, said
        self.latest: dict[str, Any] | None = None
        self.lock = threading.Lock()
        self.done = threading.Event()

    def run(self, every: float = POLL_S) -> None:
        while True:
            self.look()
            if self.done.wait(every):
                return

    def look(self, settle: float = SETTLE_S) -> dict[str, Any] | None:
        """Look now (settle 0: at an attempt's end): the newest, told if it is new."""
        found = newest(self.folder, settle)
        with self.lock:
            new = found is not None and not same(found, self.latest)
            if new:
                self.latest = found
        if new and found is not None:
            self.said(found)
        return self.latest

    def stop(self) -> None:
        self.done.set()


def _there(folder: str) -> str:
    """The directory itself, or the nearest folder above it that exists: where the job will
    make it (its storage is that folder's)."""
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    return folder


def _mark_path(folder: str, token: Any) -> str:
    token = str(token)
    if not re.match(r"^[0-9a-f]{16,64}$", token):
        raise ValueError("not a token: {!r}".format(token[:80]))
    return os.path.join(_there(folder), MARK + token)


def look(spec: dict[str, Any], workdir: str | None) -> dict[str, Any]:
    """The checks' look at job.checkpoint here ({dir, see?}): the directory as this host
    resolves it, whether it exists, whether the job may write it (or make it), and whether
    node 0's mark of token `see` is there (None: not asked)."""
    folder = where(str(spec["dir"]), workdir)
    there = _there(folder)
    seen = os.path.lexists(_mark_path(folder, spec["see"])) if spec.get("see") else None
    return {"dir": folder, "exists": there == folder, "seen": seen,
            "writable": os.access(there, os.W_OK | os.X_OK)}  # fmt: skip


def mark(req: dict[str, Any]) -> dict[str, Any]:
    """Node 0's part of the look ({dir, workdir, token, unmark?}): its mark written where the
    directory is (or will be made), or taken away. {error}: None, or why it could not."""
    try:
        path = _mark_path(where(str(req["dir"]), req.get("workdir")), req["token"])
        if req.get("unmark"):
            os.unlink(path)
        else:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    except OSError as exc:
        return {"error": "{}: {}".format(exc.filename or req.get("dir"), exc.strerror)}
    return {"error": None}
