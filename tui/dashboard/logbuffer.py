"""The dashboard's logs in memory: bounded buffers per rank, the views over them, and the lines
waiting to be drawn. No Textual here, so it is tested on its own.

The full logs are on disk (rank-N.log, written by the engine); this keeps only recent lines, so
memory stays bounded however fast the ranks print, and however many ranks there are: each rank
keeps PER_RANK lines, or its share of BUDGET when there are many (244 lines each at 2,048
ranks). Errors (stderr and traceback lines) have buffers of their own: a flood of stdout must
not push a traceback out of the errors view.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Final, Literal, NamedTuple

from remote.events import LogBatch, Stream
from remote.failures import TRACEBACK_START

PER_RANK = 10_000  # lines kept per rank (and per node's own lines), with few ranks
BUDGET = 500_000  # lines kept by every rank together, with many (~150 bytes a line)
ALL_RANKS = 20_000  # lines kept for the all-ranks view
ERRORS_PER_RANK = 2_000
ERRORS_BUDGET = 100_000
ERRORS_ALL = 10_000
SHOWN = 5_000  # lines a view draws at most (the log widget's scrollback)

# torch's excepthook prefixes a worker's traceback lines with "[rankN]: ".
_RANK_PREFIX = re.compile(r"^\[rank\d+\]: ?")
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]")
# str.splitlines() breaks on these too; the log widget would show one line as several.
_BREAKS = re.compile("[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
# Any other control character would reach the terminal as it is (a bell, a C1 CSI): shown as �.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\udc80-\udc9f]")

_TB_STARTS = ("Traceback", "[rank")  # lines worth a closer look for a traceback
Kind = Literal["out", "err", "tb"]  # stdout, stderr, a traceback line (on either stream)


# A line is a plain tuple, not a NamedTuple: CPython's cycle collector stops tracking an exact
# tuple of atoms, but never a subclass's. With ~300k lines kept, tracked lines made each full
# collection take ~150 ms: the dashboard's worst stalls under a flood (bench_dashboard.py).
Line = tuple[int | None, int, str, Kind, str]  # rank (None: the node's own), node, host, kind, text
RANK: Final = 0
NODE: Final = 1
HOST: Final = 2
KIND: Final = 3
TEXT: Final = 4


class View(NamedTuple):
    """What the log pane shows: every line, one rank's, or one node's own (untagged) lines.
    A tuple: hashed in C (looked up for every batch of every rank)."""

    kind: Literal["all", "rank", "node"]
    key: int = -1

    def label(self, hosts: dict[int, str]) -> str:
        if self.kind == "all":
            return "all ranks"
        if self.kind == "rank":
            return f"rank {self.key}"
        return f"{hosts.get(self.key, f'node {self.key}')} (launcher)"

    def wants(self, line: Line) -> bool:
        if self.kind == "all":
            return True
        if self.kind == "rank":
            return line[RANK] == self.key
        return line[RANK] is None and line[NODE] == self.key


ALL = View("all")


def clean(text: str) -> str:
    """One display line: colour codes dropped, a carriage return keeps what a terminal would,
    tabs expanded, any other control character shown as �."""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "\r" in text:  # progress bars redraw with \r: the terminal shows the last drawing
        parts = [p for p in text.split("\r") if p]
        text = parts[-1] if parts else ""
    return _CONTROLS.sub("\ufffd", _BREAKS.sub(" ", text).expandtabs())


class Cap:
    """How many lines each buffer of a kind keeps: shared, so that a new rank's share of the
    budget applies to every rank's buffer at once."""

    __slots__ = ("budget", "most", "n")

    def __init__(self, most: int, budget: int | None = None) -> None:
        self.most, self.budget, self.n = most, budget, most

    def share(self, buffers: int) -> None:
        if self.budget is not None:
            self.n = max(1, min(self.most, self.budget // max(1, buffers)))


class Lines:
    """The last `cap` lines of one buffer, kept in the chunks they arrived in.

    Chunks, not single lines: the cycle collector visits every element of every container on
    a full collection. 300k single lines made each one take 20-90 ms (a stall the user feels);
    a few thousand chunks cost nothing. A buffer may hold up to one chunk more than its cap.
    """

    __slots__ = ("cap", "chunks", "count")

    def __init__(self, limit: int | Cap) -> None:
        self.chunks: deque[tuple[Line, ...]] = deque()
        self.count = 0
        self.cap = limit if isinstance(limit, Cap) else Cap(limit)

    @property
    def limit(self) -> int:
        return self.cap.n

    def extend(self, lines: tuple[Line, ...]) -> None:
        if not lines:
            return
        limit = self.cap.n
        if len(lines) > limit:
            lines = lines[-limit:]
        chunks = self.chunks
        chunks.append(lines)
        self.count += len(lines)
        while self.count - len(chunks[0]) >= limit:
            self.count -= len(chunks.popleft())

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Line]:
        for chunk in self.chunks:
            yield from chunk

    def newest_first(self) -> Iterator[Line]:
        for chunk in reversed(self.chunks):
            yield from reversed(chunk)


class _Source:
    """One rank's (or node's own) lines on one stream: where they go, and traceback state."""

    __slots__ = ("batch", "buf", "error_batch", "errors", "in_traceback", "view")

    def __init__(self, view: View, buf: Lines, errors: Lines) -> None:
        self.view, self.buf, self.errors = view, buf, errors
        self.batch: list[Line] = []  # this LogBatch's lines, stored as one chunk at its end
        self.error_batch: list[Line] = []
        self.in_traceback = False

    def kind(self, text: str, stream: Stream) -> Kind:
        body = _RANK_PREFIX.sub("", text, count=1) if text.startswith("[rank") else text
        if body.startswith(TRACEBACK_START):
            self.in_traceback = True
            return "tb"
        if self.in_traceback:
            if not body[:1].isspace():  # the exception line closes the traceback
                self.in_traceback = False
            return "tb"
        return "err" if stream == "stderr" else "out"


class LogBuffer:
    """Every rank's recent lines, and the lines of the current view not drawn yet."""

    def __init__(
        self,
        per_rank: int = PER_RANK,
        all_ranks: int = ALL_RANKS,
        errors_per_rank: int = ERRORS_PER_RANK,
        errors_all: int = ERRORS_ALL,
        shown: int = SHOWN,
        clock: Callable[[], float] = time.monotonic,
        budget: int = BUDGET,
        errors_budget: int = ERRORS_BUDGET,
    ) -> None:
        self.per_rank, self.shown = Cap(per_rank, budget), shown
        self.errors_per_rank = Cap(errors_per_rank, errors_budget)
        self.all = Lines(all_ranks)
        self.errors = Lines(errors_all)
        self.by_view: dict[View, Lines] = {}
        self.errors_by_view: dict[View, Lines] = {}
        self.hosts: dict[int, str] = {}  # node rank -> host name
        self.rank_hosts: dict[int, int] = {}  # rank -> node rank
        self._sources: dict[tuple[int, Stream], dict[int | None, _Source]] = {}
        self.view = ALL
        self.errors_only = False
        self.pattern: re.Pattern[str] | None = None
        self.pending: deque[Line] = deque(maxlen=shown)
        self.received = 0
        self.clock = clock
        self.last_seen: dict[View, float] = {}  # when each view's last line arrived (clock)

    # -- input ------------------------------------------------------------------------------

    def add_ranks(self, node_rank: int, host: str, ranks: Iterable[int]) -> None:
        """Ranks a node runs, known at its start: their views exist before they print."""
        self.hosts[node_rank] = host
        for rank in ranks:
            self.rank_hosts[rank] = node_rank
            self._buffers(View("rank", rank))

    def add(self, batch: LogBatch) -> None:
        # The hot path (every line of every rank): locals only, one dict lookup per line.
        k, host, stream = batch.node_rank, batch.host, batch.stream
        self.hosts.setdefault(k, host)
        sources = self._sources.setdefault((k, stream), {})
        view, errors_only, pattern = self.view, self.errors_only, self.pattern
        everything, by_rank, target = view.kind == "all", view.kind == "rank", view.key
        own_lines = view.kind == "node" and target == k  # this node's untagged lines
        plain: Kind = "err" if stream == "stderr" else "out"
        add_pending = self.pending.append
        touched: list[_Source] = []
        every: list[Line] = []
        errors: list[Line] = []
        for rank, text in batch.lines:
            src = sources.get(rank)
            if src is None:
                src = sources[rank] = self._source(k, rank)
            if src.in_traceback or text.startswith(_TB_STARTS):
                kind = src.kind(text, stream)
            else:
                kind = plain
            line: Line = (rank, k, host, kind, text)
            if not src.batch:
                touched.append(src)
            src.batch.append(line)
            every.append(line)
            if kind != "out":
                src.error_batch.append(line)
                errors.append(line)
            if (
                (everything or (rank == target if by_rank else own_lines and rank is None))
                and (not errors_only or kind != "out")
                and (pattern is None or pattern.search(text))
            ):
                add_pending(line)
        last_seen, now = self.last_seen, self.clock()
        for src in touched:
            last_seen[src.view] = now
            src.buf.extend(tuple(src.batch))
            src.batch.clear()
            if src.error_batch:
                src.errors.extend(tuple(src.error_batch))
                src.error_batch.clear()
        self.all.extend(tuple(every))
        self.errors.extend(tuple(errors))
        self.received += len(batch.lines)

    def _source(self, node_rank: int, rank: int | None) -> _Source:
        if rank is None:
            key = View("node", node_rank)
        else:
            key = View("rank", rank)
            self.rank_hosts.setdefault(rank, node_rank)
        return _Source(key, self._buffers(key), self.errors_by_view[key])

    def _buffers(self, key: View) -> Lines:
        buf = self.by_view.get(key)
        if buf is None:
            buf = self.by_view[key] = Lines(self.per_rank)
            self.errors_by_view[key] = Lines(self.errors_per_rank)
            self.per_rank.share(len(self.by_view))
            self.errors_per_rank.share(len(self.by_view))
        return buf

    # -- views ------------------------------------------------------------------------------

    def views(self) -> list[View]:
        """All ranks first, then each rank, then each node's own lines."""
        return [ALL, *sorted(self.by_view, key=lambda v: (v.kind != "rank", v.key))]

    def select(self) -> list[Line]:
        """After view, errors_only or pattern changed: the lines to draw from scratch."""
        self.pending.clear()
        return self.visible()

    def visible(self) -> list[Line]:
        """The current view's last `shown` lines that pass the filters, oldest first."""
        view = self.view
        if view.kind == "all":
            source = self.errors if self.errors_only else self.all
        else:
            by_view = self.errors_by_view if self.errors_only else self.by_view
            source = by_view.get(view) or Lines(1)
        pattern, out = self.pattern, []
        for line in source.newest_first():
            if pattern is None or pattern.search(line[TEXT]):
                out.append(line)
                if len(out) >= self.shown:
                    break
        out.reverse()
        return out

    def take(self) -> list[Line]:
        """The lines of the current view that arrived since the last take."""
        lines = list(self.pending)
        self.pending.clear()
        return lines

    def tag_widths(self) -> tuple[int, int]:
        """Widths of the rank and host parts of the all-ranks view's `r12 node3` tag."""
        ranks = max((len(str(r)) for r in self.rank_hosts), default=1)
        hosts = max((len(h) for h in self.hosts.values()), default=4)
        return 1 + ranks, min(hosts, HOST_WIDTH)


HOST_WIDTH = 12  # a long host name is cut in the tag; the hosts pane shows it in full


def tag(line: Line, widths: tuple[int, int]) -> str:
    """`r3  node1` (`--  node1` for a node's own line), padded to the widths."""
    rank_w, host_w = widths
    rank = "--" if line[RANK] is None else f"r{line[RANK]}"
    return f"{rank:<{rank_w}} {line[HOST][:host_w]:<{host_w}}"
