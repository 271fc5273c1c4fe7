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

from ddptui.remote.events import LogBatch, Stream
from ddptui.remote.host import safetext
from ddptui.remote.run.failures import TRACEBACK_START

PER_RANK = 10_000  # lines kept per rank (and per node's own lines), with few ranks
BUDGET = 500_000  # lines kept by every rank together, with many (~150 bytes a line)
ALL_RANKS = 20_000  # lines kept for the all-ranks view
ERRORS_PER_RANK = 2_000
ERRORS_BUDGET = 100_000
ERRORS_ALL = 10_000
SHOWN = 5_000  # lines a view draws at most (the log widget's scrollback)

# torch's excepthook prefixes a worker's traceback lines with "[rankN]: ".
_RANK_PREFIX = re.compile(r"^\[rank\d+\]: ?")

_TB_STARTS = ("Traceback", "[rank")  # lines worth a closer look for a traceback
Kind = Literal["out", "err", "tb"]  # stdout, stderr, a traceback line (on either stream)


# A line is a plain tuple, not a NamedTuple: CPython's cycle collector stops tracking an exact
# tuple of atoms, but never a subclass's. With hundreds of thousands of lines kept, tracked lines
# made full collections the dashboard's worst stalls under a flood (bench_dashboard.py).
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
    """One display line: every escape sequence and control character out (the one cleaner,
    remote/host/safetext.py), colour codes too; a carriage return keeps what a terminal would,
    tabs expanded, the breaks str.splitlines() knows shown as spaces (one line, never several)."""
    text = safetext.clean(text, colours=True)
    if "\r" in text:  # progress bars redraw with \r: the terminal shows the last drawing
        parts = [p for p in text.split("\r") if p]
        text = parts[-1] if parts else ""
    if "\x1b" in text:
        text = safetext.clean(text)
    return text.replace("\u2028", " ").replace("\u2029", " ").replace("\n", " ").expandtabs()


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
    """The last lines of one buffer (`cap` times `scale`), kept in the chunks they came in.

    Chunks, not single lines: the cycle collector visits every element of every container on
    a full collection. Hundreds of thousands of single lines made each one a stall the user
    feels; a few thousand chunks cost nothing. A buffer may hold up to one chunk more than its
    limit.
    """

    __slots__ = ("cap", "chunks", "count", "scale")

    def __init__(self, limit: int | Cap, scale: int = 1) -> None:
        self.chunks: deque[tuple[Line, ...]] = deque()
        self.count, self.scale = 0, scale
        self.cap = limit if isinstance(limit, Cap) else Cap(limit)

    @property
    def limit(self) -> int:
        return self.cap.n * self.scale

    def extend(self, lines: tuple[Line, ...]) -> None:
        if not lines:
            return
        limit = self.cap.n * self.scale
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


class LogBuffer:
    """Every rank's recent lines, and the lines of the current view not drawn yet.

    Lines are kept per node, in the batches they came in (a node's ranks and its own lines
    together): a batch is stored once, not once per rank it holds, and a rank's view takes its
    lines from its node's when shown. Each node keeps its ranks' share of the budget.
    """

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
        self.by_node: dict[int, Lines] = {}
        self.errors_by_node: dict[int, Lines] = {}
        self.hosts: dict[int, str] = {}  # node rank -> host name
        self.rank_hosts: dict[int, int] = {}  # rank -> node rank
        self.own: set[int] = set()  # nodes that printed lines of their own (untagged)
        self._rank_digits = 1  # of the highest rank: the tag's width
        # (node, stream) -> its ranks in the middle of a traceback (None: the node's own)
        self._tracebacks: dict[tuple[int, Stream], set[int | None]] = {}
        self.view = ALL
        self.errors_only = False
        self.pattern: re.Pattern[str] | None = None
        self.pending: deque[Line] = deque(maxlen=shown)
        self.received = 0
        self.clock = clock
        self.last_seen: dict[int, float] = {}  # when each rank's last line arrived (clock)

    # -- input ------------------------------------------------------------------------------

    def add_ranks(self, node_rank: int, host: str, ranks: Iterable[int]) -> None:
        """Ranks a node runs, known at its start: their views exist before they print."""
        self.hosts[node_rank] = host
        for rank in ranks:
            self._rank(rank, node_rank)

    def add(self, batch: LogBatch) -> None:
        # The hot path (every line of every rank): locals only, a dict lookup or two a line.
        k, host, stream = batch.node_rank, batch.host, batch.stream
        self.hosts.setdefault(k, host)
        tracebacks = self._tracebacks.setdefault((k, stream), set())
        view, errors_only, pattern = self.view, self.errors_only, self.pattern
        everything, by_rank, target = view.kind == "all", view.kind == "rank", view.key
        own_lines = view.kind == "node" and target == k  # this node's untagged lines
        plain: Kind = "err" if stream == "stderr" else "out"
        add_pending = self.pending.append
        rank_hosts, seen, now = self.rank_hosts, self.last_seen, self.clock()
        every: list[Line] = []
        errors: list[Line] = []
        for rank, text in batch.lines:
            if (tracebacks and rank in tracebacks) or text.startswith(_TB_STARTS):
                kind = _kind(text, stream, rank, tracebacks)
            else:
                kind = plain
            line: Line = (rank, k, host, kind, text)
            every.append(line)
            if kind != "out":
                errors.append(line)
            if rank is None:
                self.own.add(k)
            else:
                if rank not in rank_hosts:
                    self._rank(rank, k)
                seen[rank] = now
            if (
                (everything or (rank == target if by_rank else own_lines and rank is None))
                and (not errors_only or kind != "out")
                and (pattern is None or pattern.search(text))
            ):
                add_pending(line)
        chunk = tuple(every)
        self._node(k).extend(chunk)
        self.all.extend(chunk)
        if errors:
            chunk = tuple(errors)
            self.errors_by_node[k].extend(chunk)
            self.errors.extend(chunk)
        self.received += len(batch.lines)

    def _rank(self, rank: int, node_rank: int) -> None:
        """A rank's view: its node keeps its share of the lines."""
        self.rank_hosts[rank] = node_rank
        self._rank_digits = max(self._rank_digits, len(str(rank)))
        self._node(node_rank).scale += 1
        self.errors_by_node[node_rank].scale += 1
        self._share()

    def _node(self, node_rank: int) -> Lines:
        """A node's lines: a share for its own lines, and one for each of its ranks."""
        buf = self.by_node.get(node_rank)
        if buf is None:
            buf = self.by_node[node_rank] = Lines(self.per_rank)
            self.errors_by_node[node_rank] = Lines(self.errors_per_rank)
            self._share()
        return buf

    def _share(self) -> None:
        shares = len(self.rank_hosts) + len(self.by_node)
        self.per_rank.share(shares)
        self.errors_per_rank.share(shares)

    # -- views ------------------------------------------------------------------------------

    @property
    def view_count(self) -> int:
        """Views besides all ranks: each rank's, each node's own."""
        return len(self.rank_hosts) + len(self.own)

    def views(self) -> list[View]:
        """All ranks first, then each rank, then each node's own lines."""
        ranks = [View("rank", r) for r in sorted(self.rank_hosts)]
        return [ALL, *ranks, *(View("node", k) for k in sorted(self.own))]

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
            node = self.rank_hosts.get(view.key, -1) if view.kind == "rank" else view.key
            by_node = self.errors_by_node if self.errors_only else self.by_node
            source = by_node.get(node) or Lines(1)
        rank = view.key if view.kind == "rank" else None
        pattern, out = self.pattern, []
        for line in source.newest_first():
            if view.kind != "all" and line[RANK] != rank:
                continue
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
        hosts = max(map(len, self.hosts.values()), default=4)
        return 1 + self._rank_digits, min(hosts, HOST_WIDTH)


def _kind(text: str, stream: Stream, rank: int | None, tracebacks: set[int | None]) -> Kind:
    """A line that may start, go on with or end a rank's traceback (`tracebacks`: the ranks
    of this node and stream in the middle of one)."""
    body = _RANK_PREFIX.sub("", text, count=1) if text.startswith("[rank") else text
    if body.startswith(TRACEBACK_START):
        tracebacks.add(rank)
        return "tb"
    if rank in tracebacks:
        if not body[:1].isspace():  # the exception line closes the traceback
            tracebacks.discard(rank)
        return "tb"
    return "err" if stream == "stderr" else "out"


HOST_WIDTH = 12  # a long host name is cut in the tag; the hosts pane shows it in full


def tag(line: Line, widths: tuple[int, int]) -> str:
    """`r3  node1` (`--  node1` for a node's own line), padded to the widths."""
    rank_w, host_w = widths
    rank = "--" if line[RANK] is None else f"r{line[RANK]}"
    return f"{rank:<{rank_w}} {line[HOST][:host_w]:<{host_w}}"
