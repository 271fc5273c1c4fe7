"""Each rank's output in the torchrun styles, read from the files torchrun writes it to.

With `--redirects 3 --log-dir D`, torchrun sends each worker's stdout and stderr to
`D/<run>_<random>/attempt_<n>/<local rank>/{stdout,stderr}.log` and does nothing per line. The
supervisor reads those files as they grow, keeps a half line until its newline, and spools each
batch of whole lines as `[<global rank>]:line` (what the launcher files by rank). So the rank
writes at full speed with no wrapper around its print(), and no line is ever cut or glued.
Standard library only.

The global rank of a local rank is the plan's under static rendezvous; under c10d only the run
knows it, so it is read from the worker's environment (RANK beside LOCAL_RANK and the attempt's
TORCHELASTIC_RESTART_COUNT). A file waits on disk until its rank is known; after UNKNOWN_S its
lines go out as the node's own, marked with the local rank.
"""

from __future__ import annotations

import os
import time

from . import procs, ranktag, wire

TYPE_CHECKING = False  # typing's names cost import time on every host, for nothing there
if TYPE_CHECKING:
    import threading
    from typing import Callable, Mapping, Sequence

CHUNK = 1 << 18
SCAN_S = 0.25  # how often new attempt and rank directories are looked for, once one shows
IDLE_S = (0.005, 0.1)  # the pause after a read that found lines, growing to this when idle
FIRST_S = 0.02  # ... to only this until the first line came: it is not kept waiting
UNKNOWN_S = 10.0
REDRAWN_S = 1.0  # a line redrawn with \r: its last drawing told at most this often
REDRAWN_MAX = 1024  # bytes of a drawing told
STREAMS = (("stdout.log", b"1"), ("stderr.log", b"2"))


class RankFile:
    def __init__(self, path, stream, attempt, local):
        self.path, self.stream, self.attempt, self.local = path, stream, attempt, local
        self.fd = None
        self.rest = b""
        self.rank = None  # its global rank, once known
        self.redrawn = 0.0  # when its line being redrawn (\r) was last told
        self.anonymous = False  # its rank could not be learned: its lines go as the node's
        self.seen = time.monotonic()

    def read(self):
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_RDONLY)
            except OSError:
                return b""
        return os.read(self.fd, CHUNK)

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class RankTail:
    """ranks: the plan's global ranks by local rank ([] under c10d); tags: the job's; emit(kind,
    data) spools whole lines."""

    def __init__(
        self, root: str, ranks: Sequence[int], tags: Mapping[str, str],
        emit: Callable[[bytes, bytes], None],
        redrawn: Callable[[int, bytes], None] | None = None,
    ) -> None:  # fmt: skip
        self.root, self.ranks, self.tags, self.emit = root, list(ranks), tags, emit
        self.redrawn = redrawn  # (rank, text): a line still redrawn with \r, its last drawing
        self.files: dict[str, RankFile] = {}  # path -> RankFile
        self.learned: dict[
            tuple[int, int], int
        ] = {}  # (attempt, local) -> global rank, from the workers' environment
        self.scanned = self.asked = 0.0

    def run(self, done: threading.Event) -> None:
        """Until `done` is set, then once more to the end of every file."""
        pause, idle = IDLE_S[0], FIRST_S
        while not done.wait(pause):
            if self.poll():
                pause, idle = IDLE_S[0], IDLE_S[1]
            else:
                pause = min(pause * 2, idle)
        while self.poll(final=True):
            pass
        for f in self.files.values():
            if f.rest:
                self._lines(f, f.rest + b"\n")
            f.close()

    def poll(self, final: bool = False) -> bool:
        """Read what every file has now; True if anything came. Until a file shows, every
        poll looks for one: the run's first line waits on it."""
        if final or not self.files or time.monotonic() - self.scanned > SCAN_S:
            self._scan()
        got = False
        for f in list(self.files.values()):
            if not self._known(f, final):
                continue  # its lines wait on disk until its rank is known
            data = f.read()
            if data:
                got = True
                self._feed(f, data)
        return got

    def _feed(self, f, data):
        data = f.rest + data
        cut = data.rfind(b"\n") + 1
        f.rest = data[cut:]
        if cut:
            self._lines(f, data[:cut])
        if self.redrawn is not None and b"\r" in f.rest and f.rank is not None:
            self._redrawn(f)
        while len(f.rest) >= wire.RECORD_MAX:  # a runaway line: on in pieces
            piece, f.rest = f.rest[: wire.RECORD_MAX], f.rest[wire.RECORD_MAX :]
            self._lines(f, piece + b"\n")

    def _redrawn(self, f):
        """A tqdm bar goes to its file redrawn with \r and no newline until it closes: its
        last whole drawing, at most once a second, so its progress shows meanwhile."""
        now = time.monotonic()
        end = f.rest.rfind(b"\r")
        if now - f.redrawn < REDRAWN_S or end <= 0:
            return
        f.redrawn = now
        shown = f.rest[max(0, end - REDRAWN_MAX) : end].rpartition(b"\r")[2]
        if shown.strip() and self.redrawn is not None:  # _feed asks only where it is
            self.redrawn(f.rank, shown)

    def _lines(self, f, data):
        tag = b"[local rank %d] " % f.local if f.rank is None else ranktag.tag(f.rank)
        self.emit(f.stream, tag + data[:-1].replace(b"\n", b"\n" + tag) + b"\n")

    def _known(self, f, final):
        """Whether f's lines may go: its rank is known, or will not be."""
        if f.rank is not None or f.anonymous:
            return True
        if f.local < len(self.ranks):  # static rendezvous: the plan's, every attempt
            f.rank = self.ranks[f.local]
            return True
        if time.monotonic() - self.asked > IDLE_S[0]:
            self.asked = time.monotonic()
            self._learn()
        f.rank = self.learned.get((f.attempt, f.local))
        f.anonymous = f.rank is None and (final or time.monotonic() - f.seen > UNKNOWN_S)
        return f.rank is not None or f.anonymous

    def _learn(self):
        for pid in procs.tagged_pids(self.tags):
            env = procs.environ(pid)
            local, rank = _int(env.get("LOCAL_RANK")), _int(env.get("RANK"))
            attempt = _int(env.get("TORCHELASTIC_RESTART_COUNT")) or 0
            if local is not None and rank is not None and "TORCHELASTIC_RUN_ID" in env:
                self.learned[(attempt, local)] = rank

    def _scan(self):
        self.scanned = time.monotonic()
        for run in _dirs(self.root):
            for attempt_dir in _dirs(run):
                name = os.path.basename(attempt_dir)
                attempt = _int(name[len("attempt_") :]) if name.startswith("attempt_") else None
                if attempt is None:
                    continue
                for rank_dir in _dirs(attempt_dir):
                    local = _int(os.path.basename(rank_dir))
                    if local is None:
                        continue
                    for filename, stream in STREAMS:
                        path = os.path.join(rank_dir, filename)
                        if path not in self.files and os.path.exists(path):
                            self.files[path] = RankFile(path, stream, attempt, local)


def _dirs(path):
    try:
        with os.scandir(path) as it:
            return sorted(e.path for e in it if e.is_dir(follow_symlinks=False))
    except OSError:
        return []


def _int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None
