"""The hosts pane: one row per host, kept up to date from the engine's events, which it applies
itself (`apply`, `reach`).

From the moment the dashboard opens each row says whether the host answered (or why not), what
its checks found, its GPUs with bars of utilisation and memory over the last minutes, and the
processes on them and whose. `/` in the pane narrows it to the hosts matching a search. Rows
that changed are drawn again once a second, and only those (DataTable draws the visible rows).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from ddptui.remote import fold
from ddptui.remote.events import (
    BadHost,
    Event,
    Finding,
    Gpu,
    GpuStats,
    HostChecked,
    HostState,
    NodeRanks,
    NodeStarted,
    RunStarted,
)
from ddptui.remote.inventory import Host

from .colours import theme_colour
from .figures import GpuHistory, bars

COLUMNS = (
    ("host", "Host"),
    ("address", "Address"),
    ("state", "State"),
    ("ranks", "Ranks"),
    ("gpus", "GPUs"),
    ("util", "Util"),
    ("mem", "GPU mem"),
    ("procs", "GPU processes"),
)
IMAGE_COLUMN = ("image", "Image")  # only when a host's job runs in a container
STATE_WIDTH = 17  # a long reason is cut here; the host's detail view shows all of it
UTIL_BARS, MEM_BARS = 4, 3  # bars of the last minutes before the current figure
PROCS_WIDTH = 18  # the last field, at least: it takes what room the pane has left
ADDRESS_WIDTH = 16
IMAGE_WIDTH = 30
GAP = "  "  # between fields
FIXED_WIDTHS = {
    **{"state": STATE_WIDTH, "ranks": 5, "gpus": 7},
    **{"util": UTIL_BARS + 5, "mem": MEM_BARS + 9, "procs": PROCS_WIDTH},
}
# Engine states as a person reads them; "connected" means ready to start.
STATE_NAMES = {"connected": "ready", "idle": "-"}
REDRAW_EVERY = 1.0  # seconds: the rows that changed
STATE_STYLES = {
    "connecting": "text-warning",
    "starting": "text-warning",
    "connected": "text-success",
    "running": "text-success",
    "done": "text-success",
    "unreachable": "text-error",
    "failed": "text-error",
    "stopped": "text-warning",
}
SHOW_DETAIL = {"unreachable", "failed"}  # other states' details repeat other columns
SHOW_SINCE = {"connecting", "starting"}  # how long a host has been at it: the slow one shows


@dataclass
class HostInfo:
    """What the dashboard knows about one host, from the inventory and the events."""

    node_rank: int
    name: str
    address: str
    state: str = "idle"  # of the run: idle until one starts
    detail: str = ""
    reach: str = ""  # of the dashboard's own connection: connecting, connected, unreachable
    reach_detail: str = ""
    ranks: tuple[int, ...] = ()
    since: float | None = None  # when the run's state began (clock): "starting 12s"
    hostname: str = ""
    ifname: str | None = None
    pid: int | None = None
    gpus: tuple[Gpu, ...] | None = None  # None until checked
    facts: dict[str, Any] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()
    history: GpuHistory = field(default_factory=GpuHistory)
    bad: str = ""  # why the run's hub will not use this host again (its GPUs failed)

    user: str | None = None
    port: int | None = None
    image: str | None = None  # the job's container image, as the inventory names it

    @classmethod
    def from_host(cls, host: Host) -> HostInfo:
        address = host.host if host.transport == "ssh" else "local"
        image = host.container.image if host.container else None
        return cls(host.node_rank, host.name, address, user=host.user, port=host.port, image=image)

    def image_text(self) -> str:
        """`pytorch:24.05-py3 3f1c9a2b`: the image's last path part, and once checked the
        start of its id, so hosts whose tags agree but images differ show it."""
        if not self.image:
            return ""
        text = self.image.rstrip("/").rpartition("/")[2]
        box = self.facts.get("container") or {}
        image_id = str(box.get("image_id") or "").removeprefix("sha256:")
        return f"{text} {image_id[:8]}" if image_id else text

    @property
    def up(self) -> bool:
        if self.state == "idle" and self.reach:
            return self.reach == "connected"
        return self.state in ("connected", "starting", "running", "done") or bool(self.facts)

    def state_text(self, now: float | None = None) -> str:
        text = STATE_NAMES.get(self.state, self.state)
        if self.bad:  # whatever it does next, the run is over for it
            text = f"bad: {self.bad}"
        elif self.state in SHOW_SINCE and self.since is not None and now is not None:
            text = f"{text} {age(now - self.since)}"
        elif self.state == "idle" and self.reach in ("connecting", "unreachable"):
            text = f"{self.reach}: {self.reach_detail}" if self.reach_detail else self.reach
        elif self.state in ("idle", "connected"):
            text = self._check_summary() or text
        elif self.state in SHOW_DETAIL and self.detail:
            text = f"{text}: {self.detail}"
        return text if len(text) <= STATE_WIDTH else text[: STATE_WIDTH - 1] + "…"

    def _check_summary(self) -> str:
        failures = [f for f in self.findings if f.level == "failure"]
        warnings = [f for f in self.findings if f.level == "warning"]
        if failures:
            return f"check failed: {failures[0].message}"
        if warnings:
            return f"ready, {len(warnings)} warning{'s' * (len(warnings) > 1)}"
        return "ready" if self.facts else ""

    def state_style(self) -> str | None:
        if self.bad:
            return "text-error"
        if self.state == "idle" and self.reach in ("connecting", "unreachable"):
            return STATE_STYLES[self.reach]
        if any(f.level == "failure" for f in self.findings) and self.state in ("idle", "connected"):
            return "text-error"
        return STATE_STYLES.get(self.state)

    def matches(self, needle: str) -> bool:
        """The search of the hosts pane: name, address or hostname, any case."""
        return any(needle in v.lower() for v in (self.name, self.address, self.hostname))


def ranks_text(ranks: tuple[int, ...]) -> str:
    return fold.ranks(ranks)


def age(seconds: float) -> str:
    """`4s`, `2m05s`: how long a host has been connecting or starting."""
    s = int(seconds)
    return f"{s}s" if s < 60 else f"{s // 60}m{s % 60:02}s"


def gpu_cells(gpus: tuple[Gpu, ...] | None) -> tuple[str, str, str]:
    """GPUs (count and model), mean utilisation, memory used/total across the host's GPUs."""
    if gpus is None:
        return "", "", ""
    if not gpus:
        return "none", "", ""
    models = {_short_model(g.name) for g in gpus}
    model = models.pop() if len(models) == 1 else "mixed"
    utils = [g.utilization_pct for g in gpus if g.utilization_pct is not None]
    util = f"{sum(utils) / len(utils):.0f}%" if utils else "?"
    used = sum(g.memory_used_mib for g in gpus) / 1024
    total = sum(g.memory_total_mib for g in gpus) / 1024
    return f"{len(gpus)}× {model}", util, f"{used:.0f}/{total:.0f}G"  # noqa: RUF001


def processes_text(gpus: tuple[Gpu, ...] | None, width: int = PROCS_WIDTH) -> str:
    """`2:python3 (alice) 5:python`: each GPU's processes, by program name and owner."""
    out = []
    for g in gpus or ():
        for p in g.processes:
            who = f" ({p.user})" if p.user and p.user != "?" else ""
            out.append(f"{g.index}:{os.path.basename(p.name) or p.pid}{who}")
    text = " ".join(out)
    return text if len(text) <= width else text[: width - 1] + "…"


def _short_model(name: str) -> str:
    """`NVIDIA H100 80GB HBM3` → `H100`: the pane is narrow; the detail view has it all."""
    words = name.split()
    while len(words) > 1 and words[0] in ("NVIDIA", "Tesla", "GeForce", "Quadro"):
        words.pop(0)
    return words[0] if words else "?"


class HostsTable(DataTable[Text]):
    """The hosts pane. Enter (or a click) on a row opens that host's details.

    One DataTable cell per row, laid out here in fixed-width fields: the table renders each
    cell through Rich and every visible cell again after any change, so
    eight columns made 32 hosts answering the checks cost the loop that their logins needed.
    """

    BINDINGS = [
        Binding(
            "slash", "app.find('hosts')", "Find host", id="find-host", key_display="/",
            tooltip="Show only the hosts whose name or address contains the text",
        ),
    ]  # fmt: skip

    def __init__(self, clock: Callable[[], float], *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row")
        self.clock = clock
        self.infos: dict[int, HostInfo] = {}
        self.spares: dict[str, Host] = {}  # by name: each may take a node's row
        self.needle = ""  # the search: only matching hosts have rows
        self._shown: dict[int, Text] = {}  # each row as drawn
        self._dirty: set[int] = set()  # rows to redraw at the next flush
        self._widths: list[int] = []  # of each field
        self._columns: tuple[tuple[str, str], ...] = (
            COLUMNS  # and the image's, when a host's job runs in a container
        )
        self.up: set[int] = set()  # the hosts up (the status bar's count)

    def on_mount(self) -> None:
        self.border_title = "hosts"
        self.set_interval(REDRAW_EVERY, self.flush)

    # -- events -----------------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        """A run's event (or the checks'), on the row of the host it concerns."""
        if isinstance(event, BadHost):  # by name: a spare holds its node rank next
            for bad in self.infos.values():
                if bad.name == event.host:
                    bad.bad = event.why
                    self.refresh_host(bad.node_rank)
            return
        if isinstance(event, RunStarted):  # an attach: the hosts as the run has them now
            for k, name in enumerate(event.hosts):
                self._holds(k, name)
            return
        if isinstance(event, HostState | NodeStarted):  # a spare starting in a node's place
            self._holds(event.node_rank, event.host)
        info = self.infos.get(getattr(event, "node_rank", -1))
        if info is None:
            return
        if isinstance(event, HostState):
            if event.state != info.state:
                info.since = self.clock()
            info.state, info.detail = event.state, event.detail
        elif isinstance(event, NodeStarted):
            info.ranks, info.hostname = event.ranks, event.hostname
            info.ifname, info.pid = event.ifname, event.pid
        elif isinstance(event, NodeRanks):
            info.ranks = event.ranks
        elif isinstance(event, HostChecked):
            info.facts, info.findings = event.facts, event.findings
            info.hostname = event.facts.get("hostname") or info.hostname
            if not info.history.util:  # the live figures, when they came first, stay
                info.gpus = event.gpus
        elif isinstance(event, GpuStats):
            info.gpus = event.gpus
            info.history.add(event.gpus)
        else:
            return
        self.refresh_host(info.node_rank)

    def reach(self, event: HostState) -> None:
        """The dashboard's own connection to the host: connecting, connected, unreachable."""
        info = self.infos.get(event.node_rank)
        if info is not None:
            info.reach, info.reach_detail = event.state, event.detail
            self.refresh_host(info.node_rank)

    def set_hosts(self, hosts: tuple[Host, ...], spares: tuple[Host, ...] = ()) -> None:
        """Rows for a (re)loaded inventory; what is known of hosts that stay is kept. A spare
        gets the row of the node it takes (`_holds`)."""
        old = {info.name: info for info in self.infos.values()}
        self.spares = {h.name: h for h in spares}
        self.clear(columns=True)
        self._add_columns((*hosts, *spares))
        self.infos = {}
        for host in hosts:
            info = HostInfo.from_host(host)
            prev = old.get(host.name)
            if prev is not None and (prev.address, prev.user, prev.port, prev.image) == (
                info.address,
                info.user,
                info.port,
                info.image,
            ):
                info = prev
                info.node_rank = host.node_rank
            self.infos[host.node_rank] = info
        self.up = {k for k, info in self.infos.items() if info.up}
        self._add_rows()

    def _holds(self, k: int, name: str) -> None:
        """Node k's row is the spare `name`'s from now on, if it took that node's place."""
        info, spare = self.infos.get(k), self.spares.get(name)
        if info is None or spare is None or info.name == name:
            return
        del self.spares[name]
        self.infos[k] = HostInfo.from_host(dataclasses.replace(spare, node_rank=k))
        self.refresh_host(k)

    def find(self, needle: str) -> None:
        """Rows for the hosts matching `needle` only ("" shows every host)."""
        if needle.lower() != self.needle:
            self.needle = needle.lower()
            self.clear()
            self._add_rows()

    def _add_rows(self) -> None:
        self._shown = {}
        for k, info in self.infos.items():
            if not self.needle or info.matches(self.needle):
                self._shown[k] = row = self._row(info)
                self.add_row(row, key=str(k))

    def _add_columns(self, hosts: tuple[Host, ...]) -> None:
        """Fixed widths: fields don't jump as states change (and need no re-measuring)."""
        infos = [HostInfo.from_host(h) for h in hosts]
        widths = dict(FIXED_WIDTHS)
        widths["host"] = max(len(h.name) for h in hosts) + 2  # room for a check mark
        widths["address"] = min(max(len(i.address) for i in infos), ADDRESS_WIDTH)
        self._columns = COLUMNS
        if any(i.image for i in infos):
            self._columns = (*COLUMNS[:2], IMAGE_COLUMN, *COLUMNS[2:])
            widths["image"] = min(max(len(i.image_text()) + 9 for i in infos), IMAGE_WIDTH)
        self._widths = [max(widths[key], len(label)) for key, label in self._columns]
        self._widths[-1] = max(self._widths[-1], self._room())
        self._add_header()

    def _add_header(self) -> None:
        header = self._join([Text(label) for _, label in self._columns])
        self.add_column(header, key="host", width=header.cell_len)

    def _room(self) -> int:
        """The width the pane leaves for the last field (the GPU processes)."""
        used = sum(self._widths[:-1]) + len(GAP) * (len(self._widths) - 1)
        return self.scrollable_content_region.width - 2 * self.cell_padding - used

    def on_resize(self) -> None:
        """The processes take the room there is: lay the rows out again if it changed."""
        if self._widths and max(PROCS_WIDTH, self._room()) != self._widths[-1]:
            self._widths[-1] = max(PROCS_WIDTH, self._room())
            self.clear(columns=True)
            self._add_header()
            self._add_rows()

    def _join(self, cells: list[Text]) -> Text:
        """The fields side by side, each cut or padded to its width."""
        row = Text(no_wrap=True, end="")
        for i, (cell, width) in enumerate(zip(cells, self._widths, strict=True)):
            if i:
                row.append(GAP)
            cell.truncate(width, pad=True)
            row.append_text(cell)
        return row

    def info(self, node_rank: int) -> HostInfo | None:
        return self.infos.get(node_rank)

    def refresh_host(self, node_rank: int) -> None:
        """Redraw the host's row at the next flush (once a second), and count it up or not."""
        self._dirty.add(node_rank)
        info = self.infos.get(node_rank)
        if info is not None and info.up:
            self.up.add(node_rank)
        else:
            self.up.discard(node_rank)

    def flush(self) -> None:
        """The rows that changed since the last flush, as their infos say now (timer), and
        those counting how long they have been at it."""
        dirty, self._dirty = self._dirty, set()
        dirty.update(k for k, i in self.infos.items() if i.state in SHOW_SINCE)
        for node_rank in sorted(dirty):
            self._update_row(node_rank)

    def _update_row(self, node_rank: int) -> None:
        """Only if it changed (256 hosts' figures every 2 s: many rows stay)."""
        info = self.infos.get(node_rank)
        if info is None or str(node_rank) not in self.rows:
            return
        row = self._row(info)
        if row != self._shown.get(node_rank):
            self.update_cell(str(node_rank), "host", row)
            self._shown[node_rank] = row

    def reset(self) -> None:
        """A new run: states start over; facts and GPUs stay until refreshed."""
        for info in self.infos.values():
            info.state, info.detail, info.ranks, info.pid = "idle", "", (), None
            info.since = None
            self.refresh_host(info.node_rank)

    def _row(self, info: HostInfo) -> Text:
        style = info.state_style()
        colour = theme_colour(self, style) if style else ""
        state = Text(info.state_text(self.clock()), style=colour)
        name = Text(info.name)
        if any(f.level == "failure" for f in info.findings):
            name.append(" ✗", style=theme_colour(self, "text-error"))
        elif any(f.level == "warning" for f in info.findings):
            name.append(" !", style=theme_colour(self, "text-warning"))
        gpus, util, mem = gpu_cells(info.gpus)
        if util:  # the last minutes, then now
            util = f"{bars(info.history.util, 100, UTIL_BARS)} {util:>4}"
            mem = f"{bars(info.history.memory, 1, MEM_BARS)} {mem}"
        procs = processes_text(info.gpus, self._widths[-1])
        rest = (ranks_text(info.ranks), gpus, util, mem, procs)
        image = [Text(info.image_text())] if len(self._columns) > len(COLUMNS) else []
        return self._join([name, Text(info.address), *image, state, *map(Text, rest)])
