"""The run directory: every line to its log file, every event to events.jsonl, a summary.

rank-<N>.log   every line global rank N printed (stdout and stderr, in arrival order)
node-<K>.log   lines of node K that carry no rank (the launcher's own, or untagged styles)
events.jsonl   the event stream, less the log batches
summary.json   status, exit code, first failure, times, the training's last values and links
series.json    the training's curves: each metric's points, thinned, across attempts
offsets.json   how far into each host's spool the logs go (an attach resumes there)

A run directory holds one run, and only its owner reads it: directories ddptui creates are
0700, files 0600 (rank logs carry whatever the job prints, tokens included).
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import errno
import fcntl
import json
import os
import pwd
import resource
import secrets
import stat
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from operator import itemgetter
from pathlib import Path
from typing import IO, Any

from ddptui.remote.events import (
    AttemptResult,
    BadHost,
    CheckpointSaved,
    Event,
    GpuStats,
    LogBatch,
    NodeRanks,
    NodeStarted,
    Progress,
    RunFinished,
    RunStarted,
    StepsLost,
)
from ddptui.remote.host.progress import SERIES  # the name node 0 writes it by too
from ddptui.remote.store.runlist import RUN_JSON

# Lines are str decoded with surrogateescape: this error handler writes those bytes back as
# they came, and anything else the encoding cannot carry (a lone surrogate, or a console that
# is not UTF-8) as a backslash escape, never an exception in the middle of a run.
BYTES_BACK = "ddptui-bytes"
WAITING_MAX = 4 << 20  # characters of lines that may wait for the logs (see Recorder.waiting)
WRITES_QUEUED = 2  # hand-overs that may wait for the writer thread (see Recorder.written)


def _bytes_back(exc: UnicodeError) -> tuple[bytes | str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    out = bytearray()
    for ch in exc.object[exc.start : exc.end]:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(code - 0xDC00)
        else:
            out += ch.encode("ascii", "backslashreplace")
    return bytes(out), exc.end


codecs.register_error(BYTES_BACK, _bytes_back)


def _open_logs_limit() -> int:
    """How many rank logs stay open at once: a share of the open-files limit (1024 on Linux,
    256 on macOS, raised to the hard limit by `ddptui`), so 1,024 ranks never run the process
    out of file descriptors. Fewer than the ranks, and every batch closes one log and opens
    another: at 2,048 ranks with 128 open, that was most of the dashboard's CPU under a flood."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 8192
    return max(4, min(8192, soft // 4))


class RunDirError(Exception):
    """A run directory that cannot be used, in one line."""


def private_dir(path: Path) -> Path:
    """Make `path` a directory, creating missing parents too, each 0700 (others untouched)."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for p in reversed(missing):
        try:
            p.mkdir(mode=0o700)
        except FileExistsError:
            continue  # made meanwhile (another run starting): not ours to change
        os.chmod(p, 0o700)  # exactly, whatever the umask
    if not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(path))
    return path


def usable_dir(path: Path, *, empty: bool) -> Path:
    """Before anything connects: `path` is (or now is) a writable directory of this user's that
    no one else may write to, and empty if asked (a run directory holds one run: a second
    would mix its logs in). Else RunDirError."""
    try:
        private_dir(path)
    except (FileExistsError, NotADirectoryError):
        raise RunDirError(f"{path}: not a directory (a file is in the way)") from None
    except OSError as exc:
        raise RunDirError(f"{path}: cannot make a directory: {exc.strerror or exc}") from None
    check_private(path, path.stat())
    if not os.access(path, os.W_OK | os.X_OK):
        raise RunDirError(f"{path}: not writable")
    if empty and any(path.iterdir()):
        raise RunDirError(f"{path}: not empty (it holds another run?); name a new directory")
    return path


def check_private(path: Path, st: os.stat_result) -> None:
    """RunDirError unless the directory `st` is this user's and no one else may write to it:
    who can write it can plant a symlink where a log goes, or swap the inventory copy."""
    if st.st_uid != os.geteuid():
        raise RunDirError(f"{path}: owned by {_user(st.st_uid)}, not by you; name your own")
    if st.st_mode & 0o022:
        mode = stat.S_IMODE(st.st_mode)
        raise RunDirError(
            f"{path}: others may write to it (mode {mode:04o}); `chmod go-w` it or name another"
        )


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


# Files are made relative to their directory's descriptor, never through a symlink, and new
# ones exclusively (O_EXCL); a tmp has a random name, so none can be planted ahead of it.
NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW


def open_dir(path: Path) -> int:
    """A descriptor of the directory `path`, for the *at() calls below."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _write_new(dir_fd: int, name: str, text: str, mode: int) -> None:
    fd = os.open(name, NEW, mode, dir_fd=dir_fd)
    os.fchmod(fd, mode)  # the mode meant, whatever the umask
    with open(fd, "w", encoding="utf-8") as f:
        f.write(text)


def write_new(path: Path, text: str, mode: int) -> None:
    """Write a new file; never over, or through, one that is there already (FileExistsError,
    a dangling symlink included)."""
    with _dir_of(path) as fd:
        _write_new(fd, path.name, text, mode)


def replace_whole(path: Path, text: str, mode: int, dir_fd: int | None = None) -> None:
    """Write a whole file at once for readers and other writers: a tmp of a random name, renamed
    over it (a symlink there is replaced, never followed). dir_fd: the directory's, when open
    already."""
    with contextlib.nullcontext(dir_fd) if dir_fd is not None else _dir_of(path) as fd:
        tmp = f".{path.name}.{secrets.token_hex(8)}.tmp"
        _write_new(fd, tmp, text, mode)
        try:
            os.replace(tmp, path.name, src_dir_fd=fd, dst_dir_fd=fd)
        except OSError:
            os.unlink(tmp, dir_fd=fd)
            raise


def write_private(path: Path, text: str) -> None:
    """A new file that only its owner may read (a run's inventory copy): write_new's."""
    write_new(path, text, 0o600)


def replace_private(path: Path, text: str, dir_fd: int | None = None) -> None:
    """A whole file that only its owner may read: replace_whole's."""
    replace_whole(path, text, 0o600, dir_fd)


@contextlib.contextmanager
def _dir_of(path: Path) -> Iterator[int]:
    fd = open_dir(path.parent)
    try:
        yield fd
    finally:
        os.close(fd)


def read_text(dir_fd: int, name: str) -> str:
    """A file of the directory, never read through a symlink."""
    with open(os.open(name, os.O_RDONLY | NOFOLLOW, dir_fd=dir_fd), encoding="utf-8") as f:
        return f.read()


def _writer_lock(dir_fd: int) -> int | None:
    """An flock on the run dir's .writer, held while this process records (None: taken)."""
    fd = os.open(".writer", os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o600, dir_fd=dir_fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


class Recorder:
    def __init__(
        self, run_dir: Path, resume: bool = False, started_at: float | None = None
    ) -> None:
        """resume: a run attached to again; its hosts replay every line from the first, and
        the logs take only what they lack (see checkpoint); events.jsonl goes on. Else the
        directory must hold no run yet: events.jsonl opens with "x", so runs never mix."""
        self.dir = private_dir(run_dir)
        self.fd = open_dir(self.dir)  # every file below is made relative to it
        try:
            check_private(self.dir, os.fstat(self.fd))
        except RunDirError:
            os.close(self.fd)
            raise
        self.known: set[str] = set()  # logs there already (resumed, or made by this process)
        self.node_of: dict[str, int] = {}  # log file → the node whose lines it holds
        self.stored: dict[int, int] = {}  # node → spool offset its logs hold, when resumed
        self.since: dict[int, int] = {}  # node → the attempt the spool's supervisor began at
        # One writer per run dir: a second ddptui on the same run (a `stop` beside an `attach`)
        # shows the run but must not cut back or append to logs another one is writing.
        self.lock = _writer_lock(self.fd)
        self.passive = self.lock is None
        self.sizes: dict[str, int] = {}  # each log's size, counted as written
        # Lines not written yet, per log (a rank's, or ~node for a node's own lines): written
        # at the next checkpoint (a second at most), when WAITING_MAX characters wait, or at
        # close. A batch costs a list append a line, not a write a rank: at 4,096 ranks every
        # batch holds a line or two of each of a few ranks.
        self.waiting: dict[int, list[str]] = {}
        self.names: dict[int, str] = {}  # the same keys: the log's file name
        self.chars = 0  # characters waiting, all logs together
        # The writes (and offsets.json after them) run in a thread of their own, in order:
        # at thousands of ranks a checkpoint is thousands of writes, which the event loop (the
        # dashboard's keys) would otherwise wait for every second. Only that thread touches `logs`
        # and `sizes` once it runs.
        self.writer: ThreadPoolExecutor | None = None
        # The writes handed over and not seen done. The loop waits for the oldest only when
        # WRITES_QUEUED are: while it is busy the writer gets the GIL back only every switch
        # interval, a write a log, so the last writes were now and then unfinished at the
        # next checkpoint, and waiting for them held the loop (the dashboard's keys).
        self.written: deque[Future[None]] = deque()
        if resume and not self.passive:
            self._resume()
        self.events: IO[str] | None = None
        if not self.passive:
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW
            fd = os.open("events.jsonl", flags if resume else flags | os.O_EXCL, 0o600,
                         dir_fd=self.fd)  # fmt: skip
            self.events = open(fd, "a", encoding="utf-8")  # noqa: SIM115
        # The open rank logs, least recently written first; a closed one is reopened to append.
        self.logs: OrderedDict[str, int] = OrderedDict()
        self.max_open = _open_logs_limit()
        self.started: RunStarted | None = None
        self.t0 = started_at or time.time()
        # The streams the run's end left unread (a host lost): remote/run/late.py reads them later.
        self.unread: list[dict[str, Any]] = []
        # The training's curves and last values (remote/run/progress.py), kept at the end.
        self.series: dict[str, Any] | None = None
        self.bad: list[dict[str, Any]] = []  # hosts the run's hub will not use again, and why
        self.saved: dict[str, Any] | None = None  # job.checkpoint's newest {path, step, at}
        self.lost: dict[int, StepsLost] = {}  # a failed attempt's steps since its checkpoint

    def __call__(self, event: Event) -> None:
        if isinstance(event, BadHost):  # a replay (an attach again) says it again
            bad = {"host": event.host, "node": event.node_rank, "why": event.why}
            if bad not in self.bad:
                self.bad.append(bad)
        elif isinstance(event, CheckpointSaved):
            self.saved = {"path": event.path, "step": event.step, "at": event.at}
        elif isinstance(event, StepsLost):
            self.lost[event.attempt] = event
        if self.events is None:  # passive: the other writer stores it all; the end, both
            if isinstance(event, RunStarted):
                self.started = event
            if isinstance(event, RunFinished) and event.status != "detached":
                self._summary(event)
            return
        if isinstance(event, LogBatch):
            self._write_lines(event)
            return
        if isinstance(event, GpuStats | Progress):  # Progress: series.json keeps it
            return
        if isinstance(event, RunStarted):
            self.started = event
        if isinstance(event, NodeStarted | NodeRanks):
            self._make_logs(event.ranks)
        self.events.write(event.to_json() + "\n")
        self.events.flush()
        if isinstance(event, RunFinished) and event.status != "detached":
            self._summary(event)

    def _write_lines(self, batch: LogBatch) -> None:
        if batch.stored:  # an attach's replay of lines these logs already hold
            return
        lines, node, waiting = batch.lines, batch.node_rank, self.waiting
        texts = list(map(itemgetter(1), lines))
        ranks = set(map(itemgetter(0), lines))
        if len(ranks) == 1:  # the usual big batch: one rank's lines, no Python call a line
            rank = ranks.pop()
            self._waiting(rank if rank is not None else ~node, node).extend(texts)
        else:
            for rank, text in lines:
                key = rank if rank is not None else ~node
                got = waiting.get(key)
                if got is None:
                    got = self._waiting(key, node)
                got.append(text)
        self.chars += sum(map(len, texts))
        if self.chars > WAITING_MAX:
            self._hand_over()

    def _make_logs(self, ranks: tuple[int, ...]) -> None:
        """The logs of a node's ranks, made as it starts: made with their first lines, 4,096
        ranks' (~0.5 s of creates) held the dashboard's loop as the job began to print. One
        there already was planted: left unknown, its first line fails as it would have."""
        for rank in ranks:
            name = f"rank-{rank}.log"
            if name not in self.known:
                with contextlib.suppress(FileExistsError):
                    os.close(os.open(name, NEW, 0o600, dir_fd=self.fd))
                    self.known.add(name)

    def _waiting(self, key: int, node: int) -> list[str]:
        """The lines waiting for a log; the log is made with its first line (a file planted
        in its place fails that batch)."""
        got = self.waiting.get(key)
        if got is None:
            name = f"rank-{key}.log" if key >= 0 else f"node-{~key}.log"
            if name not in self.known:  # made now: a file there already was planted
                os.close(os.open(name, NEW, 0o600, dir_fd=self.fd))
                self.known.add(name)
            self.names[key], self.node_of[name] = name, node
            got = self.waiting[key] = []
        return got

    def _hand_over(self, then: Callable[[], None] | None = None) -> None:
        """Every log's waiting lines to the writer, then `then` there. Waits for the oldest
        writes handed over before only when WRITES_QUEUED wait (raising their error): the disk
        sets the pace, memory stays bounded."""
        lines = [(self.names[key], texts) for key, texts in self.waiting.items() if texts]
        for key in self.waiting:
            self.waiting[key] = []
        self.chars = 0
        written = self.written
        while written and (written[0].done() or len(written) >= WRITES_QUEUED):
            written.popleft().result()  # its error raised here
        if self.writer is None:
            self.writer = ThreadPoolExecutor(1, thread_name_prefix="ddptui-logs")
        written.append(self.writer.submit(self._write, lines, then))

    def _write(self, lines: list[tuple[str, list[str]]], then: Callable[[], None] | None) -> None:
        """The writer thread: one write a log."""
        for name, texts in lines:
            texts.append("")  # the last line's newline
            data = "\n".join(texts).encode("utf-8", BYTES_BACK)
            fd, view = self._log(name), memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            self.sizes[name] += len(data)
        if then is not None:
            then()

    def _log(self, name: str) -> int:
        fd = self.logs.get(name)
        if fd is not None:
            self.logs.move_to_end(name)
            return fd
        if len(self.logs) >= self.max_open:
            os.close(self.logs.popitem(last=False)[1])
        fd = self.logs[name] = os.open(name, os.O_WRONLY | os.O_APPEND | NOFOLLOW, dir_fd=self.fd)
        self.sizes[name] = os.fstat(fd).st_size  # then counted as written
        return fd

    def new_stream(self, node: int, since: int) -> None:
        """A spare took the node's place: its spool is another, read from its first byte."""
        self.stored.pop(node, None)
        self.since[node] = since

    def checkpoint(self, offsets: dict[int, int], since: dict[int, int] | None = None) -> None:
        """Note how far into each node's spool the logs now go, with each log's size then.

        The lines waiting for the logs are written first (in the writer thread, which writes
        offsets.json after them), and whole records are emitted before the loop moves on, so
        sizes and offsets agree whenever this runs (between reads). An attach later truncates
        the logs to these sizes and stores only records past these offsets: exactly once, even
        after a launcher killed between two writes."""
        self.since.update(since or {})
        if self.passive:
            return
        nodes: dict[str, dict[str, Any]] = {
            str(k): {
                "offset": max(o, self.stored.get(k, 0)),
                "since": self.since.get(k, 0),
                "files": {},
            }
            for k, o in {**self.stored, **offsets}.items()
        }
        self._hand_over(partial(self._offsets, nodes, dict(self.node_of)))

    def _offsets(self, nodes: dict[str, dict[str, Any]], node_of: dict[str, int]) -> None:
        """The writer thread, the lines before written: the logs hold what their sizes count."""
        for name, k in node_of.items():
            if name in self.sizes:
                node = nodes.setdefault(str(k), {"offset": 0, "files": {}})
                node["files"][name] = self.sizes[name]
        replace_private(self.dir / "offsets.json", json.dumps(nodes), self.fd)

    def _resume(self) -> None:
        """Cut the logs back to the last checkpoint; lines past it come again from the hosts."""
        try:
            nodes = json.loads(read_text(self.fd, "offsets.json"))
        except (OSError, ValueError):
            nodes = {}
        sizes = {}
        for k, node in nodes.items():
            self.stored[int(k)] = int(node.get("offset", 0))
            self.since[int(k)] = int(node.get("since", 0))
            for name, size in node.get("files", {}).items():
                sizes[name] = int(size)
                self.node_of[name] = int(k)
        for name in os.listdir(self.fd):
            if not (name.startswith(("rank-", "node-")) and name.endswith(".log")):
                continue
            if name in sizes:
                fd = os.open(name, os.O_WRONLY | NOFOLLOW, dir_fd=self.fd)
                os.ftruncate(fd, sizes[name])
                os.close(fd)
                self.known.add(name)
                self.sizes[name] = sizes[name]
            else:
                os.unlink(name, dir_fd=self.fd)  # written after the checkpoint: all comes again

    def _summary(self, fin: RunFinished) -> None:
        hosts, replaced = self._hosts()
        summary: dict[str, Any] = {
            "run_id": self.started.run_id if self.started else None,
            "status": fin.status,
            "exit_code": fin.exit_code,
            "started_at": self.t0,
            "finished_at": time.time(),
            "elapsed": fin.elapsed,
            "hosts": hosts,
            "replaced": replaced,
            "world_size": self.started.world_size if self.started else None,
            "failure": dataclasses.asdict(fin.failure) if fin.failure else None,
            "failing_rank": fin.failure.rank if fin.failure else None,
            "failing_host": fin.failure.host if fin.failure else None,
            "reason": fin.reason,
            "attempts": [_attempt(a, self.lost.get(a.attempt)) for a in fin.attempts],
            "checkpoint": self.saved,
            "bad_hosts": self.bad,
            "unread": self.unread,
            "progress": self.series["last"] if self.series else None,
            "links": self.series["links"] if self.series else [],
        }
        if self.series is not None:
            self.write_series(self.series)
        replace_private(self.dir / "summary.json", json.dumps(summary, indent=2) + "\n", self.fd)

    def _hosts(self) -> tuple[list[str], list[dict[str, Any]]]:
        """Each node's host as the run ended (a spare in the place of the host it replaced),
        and the swaps ({node, host: the lost one, by: the spare, attempt: its first}): the same
        whether this launcher saw them live or an attach learned them (run.json's `replaced`,
        written at each swap; a run dir's text is checked, as data)."""
        hosts = list(self.started.hosts) if self.started else []
        try:
            said = json.loads(read_text(self.fd, RUN_JSON)).get("replaced")
        except (OSError, ValueError, AttributeError):  # no run.json (a test's bare dir): none
            said = None
        swaps = []
        for r in said if isinstance(said, list) else ():
            k, spare = (r.get("node"), r.get("host")) if isinstance(r, dict) else (None, None)
            if isinstance(k, int) and 0 <= k < len(hosts) and isinstance(spare, str):
                lost = r.get("lost") if isinstance(r.get("lost"), str) else hosts[k]
                swaps.append({"node": k, "host": lost, "by": spare, "attempt": r.get("since")})
                hosts[k] = spare
        return hosts, swaps

    def write_series(self, series: dict[str, Any]) -> None:
        """series.json: the training's curves, thinned, across attempts (`ddptui plot`)."""
        if not self.passive:
            replace_private(self.dir / SERIES, json.dumps(series) + "\n", self.fd)

    def close(self) -> None:
        if any(self.waiting.values()):
            self._hand_over()
        if self.writer is not None:
            self.writer.shutdown()  # after what was handed over
            self.writer = None
        while self.written:
            self.written.popleft().result()
        for fd in self.logs.values():
            os.close(fd)
        self.logs.clear()
        if self.events is not None:
            self.events.close()
        if self.lock is not None:
            os.close(self.lock)
            self.lock = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _attempt(a: AttemptResult, lost: StepsLost | None) -> dict[str, Any]:
    """An attempt's record; a failed one's against job.checkpoint's newest: the steps lost
    (reached, less the checkpoint's), which the next attempt does again."""
    out: dict[str, Any] = {
        "attempt": a.attempt,
        "started": a.started,
        "finished": a.finished,
        "status": a.status,
        "failure": dataclasses.asdict(a.failure) if a.failure else None,
    }
    if lost is not None:
        out |= {"steps_lost": lost.lost, "reached": lost.reached, "checkpoint": lost.path,
                "checkpoint_step": lost.step}  # fmt: skip
    return out
