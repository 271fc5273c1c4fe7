"""The dashboard's other screens: quit while a job runs, a bad inventory, one host's details
(its GPUs live, each with sparklines of its utilisation and memory over the last minutes)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Footer, Label, Sparkline, Static

from ddptui.remote import inventory
from ddptui.remote.events import Gpu, GpuLease

from ..text import lease_holder, lease_waiter
from .colours import theme_colour
from .figures import HISTORY
from .hosts import HostInfo, gpu_cells, ranks_text
from .plain import plain

EXCERPT = 3  # lines shown around the line of an inventory mistake
REDRAW_S = 2.0  # the detail screen's GPU figures follow the live ones


class QuitScreen(ModalScreen[str | None]):
    """Asked when the user quits while a job runs: "stop" (then quit), "detach" (quit and
    leave it running on its hosts), or None (stay)."""

    AUTO_FOCUS = "#stay"
    BINDINGS = [
        Binding("s", "answer('stop')", "Stop and quit", id="quit-stop", tooltip="Stop the job"),
        Binding(
            "x", "answer('detach')", "Detach", id="quit-detach",
            tooltip="Quit; the job runs on (ddptui attach RUN to come back)",
        ),
        Binding("escape,n", "answer(None)", "Stay", id="quit-stay", tooltip="Keep watching"),
    ]  # fmt: skip

    def __init__(self, hosts: int) -> None:
        super().__init__()
        self.hosts = hosts

    def compose(self) -> ComposeResult:
        with Vertical(id="quit-dialog"):
            where = f"{self.hosts} host{'s' * (self.hosts != 1)}"
            yield Label(f"A job is running on {where}.", id="quit-question")
            yield Label("Stop it on every host (TERM, then KILL after the grace), or detach:")
            yield Label("it runs on by itself, and `ddptui attach` comes back to it.")
            with Horizontal(id="quit-buttons"):
                yield Button("Stop the job and quit", id="stop", variant="error")
                yield Button("Detach", id="detach", variant="warning")
                yield Button("Stay", id="stay", variant="primary")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id if event.button.id != "stay" else None)

    def action_answer(self, answer: str | None) -> None:
        self.dismiss(answer)


class WaitScreen(ModalScreen[bool | None]):
    """Asked when a launch's GPUs are held by other runs (or busy): wait in the queue for
    them (True), or not start (None)."""

    AUTO_FOCUS = "#wait"
    BINDINGS = [
        Binding("w", "answer(True)", "Wait", id="wait-yes", tooltip="Queue: start once free"),
        Binding("escape,n", "answer(None)", "Don't start", id="wait-no"),
    ]  # fmt: skip

    def __init__(self, why: str) -> None:
        super().__init__()
        self.why = why

    def compose(self) -> ComposeResult:
        with Vertical(id="quit-dialog"):
            yield Label(plain(self.why.removeprefix("not starting: ")), id="quit-question")
            yield Label("Wait in the queue for them (first come, first served, across users)?")
            with Horizontal(id="quit-buttons"):
                yield Button("Wait", id="wait", variant="primary")
                yield Button("Don't start", id="no", variant="default")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(True if event.button.id == "wait" else None)

    def action_answer(self, answer: bool | None) -> None:
        self.dismiss(answer)


class InventoryErrorScreen(Screen[inventory.Inventory]):
    """A bad inventory, shown where it is wrong; dismissed with the inventory once fixed."""

    BINDINGS = [
        Binding("r", "reload", "Reload", id="reload", tooltip="Read the inventory file again"),
    ]

    def __init__(self, error: inventory.InventoryError) -> None:
        super().__init__()
        self.error = error

    def compose(self) -> ComposeResult:
        with Vertical(id="inventory-error"):
            yield Static("The inventory has a mistake", id="inventory-error-title")
            yield Static(id="inventory-error-body")
            yield Static(
                "Fix the file, then press r to read it again (q quits).",
                id="inventory-error-hint",
            )
        yield Footer()

    def on_mount(self) -> None:
        self.show(self.error)

    def show(self, error: inventory.InventoryError) -> None:
        self.error = error
        self.query_one("#inventory-error-body", Static).update(self._describe(error))

    def _describe(self, error: inventory.InventoryError) -> RenderableType:
        facts = Table.grid(padding=(0, 2))
        facts.add_row(Text("file", style="bold"), Text(str(error.path)))
        if error.line:
            facts.add_row(Text("line", style="bold"), Text(str(error.line)))
        facts.add_row(Text("error", style="bold"), Text(error.message))
        excerpt = _excerpt(error.path, error.line, theme_colour(self, "text-error"))
        return Group(facts, Text(), excerpt) if excerpt else facts

    def action_reload(self) -> None:
        try:
            inv = inventory.load(self.error.path)
        except inventory.InventoryError as exc:
            self.show(exc)
            self.notify("the inventory still has a mistake", severity="error", timeout=3)
            return
        self.dismiss(inv)


def _excerpt(path: Path, line: int | None, colour: str) -> Text | None:
    """The lines around `line`, numbered, the wrong one marked."""
    if not line:
        return None
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    first, last = max(1, line - EXCERPT), min(len(lines), line + EXCERPT)
    width = len(str(last))
    out = Text()
    for n in range(first, last + 1):
        mark = "▶" if n == line else " "
        row = Text(f"{mark} {n:>{width}} │ {lines[n - 1]}\n")
        if n == line:
            row.stylize(f"bold {colour}")
        else:
            row.stylize("dim")
        out.append_text(row)
    return out


class HostDetailScreen(ModalScreen[None]):
    """Everything known about one host: state, checks (facts, findings), GPUs."""

    BINDINGS = [
        Binding("escape,enter,q", "dismiss", "Close", id="host-close", tooltip="Back"),
        Binding(
            "s,exclamation_mark", "app.shell", "Shell", id="host-shell", key_display="s",
            tooltip="ssh to this host, in the job's workdir (here s is no stop: a host is chosen)",
        ),
    ]  # fmt: skip

    def __init__(self, info: HostInfo) -> None:
        super().__init__()
        self.info = info

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="host-detail") as box:
            box.border_title = plain(f"{self.info.name} (node {self.info.node_rank})")
            yield Static(self._state(), id="host-state")
            yield Static(self._findings(), id="host-findings")
            yield Static(self._facts(), id="host-facts")
            yield Static(self._gpus(), id="host-gpus")
            for index in sorted(self.info.history.per_gpu):
                with Horizontal(classes="gpu-sparks"):
                    yield Label(f"GPU {index}", classes="gpu-name")
                    for what in ("util", "mem"):
                        yield Label(what, classes="gpu-what")
                        yield Sparkline(id=f"gpu-{index}-{what}", classes="gpu-spark")
                        yield Label(id=f"gpu-{index}-{what}-now", classes="gpu-now")
        yield Footer()

    def on_mount(self) -> None:
        self._redraw_gpus()
        self.set_interval(REDRAW_S, self._redraw_gpus)

    def _redraw_gpus(self) -> None:
        """The figures as they are now (the app keeps updating this host's info)."""
        self.query_one("#host-gpus", Static).update(self._gpus())
        minutes = HISTORY * 2 // 60
        for index, (util, mem) in self.info.history.per_gpu.items():
            gpu = next((g for g in self.info.gpus or () if g.index == index), None)
            for what, data in (("util", util), ("mem", mem)):
                found = self.query(f"#gpu-{index}-{what}")
                if not found or not data:
                    continue
                found.first(Sparkline).data = list(data)
                now = self.query_one(f"#gpu-{index}-{what}-now", Label)
                now.update(plain(_spark_label(what, data, gpu, minutes)))

    def _state(self) -> Table:
        info = self.info
        grid = Table.grid(padding=(0, 2))
        where = f"{info.user}@{info.address}" if info.user else info.address
        rows = [
            ("address", f"{where}:{info.port}" if info.port else where),
            ("state", f"{info.state}: {info.detail}" if info.detail else info.state),
            ("ranks", ranks_text(info.ranks)),
            ("hostname", info.hostname),
            ("image", info.image or ""),
            ("interface", info.ifname or ""),
            ("supervisor pid", str(info.pid) if info.pid else ""),
        ]
        for key, value in rows:
            if value:
                grid.add_row(Text(key, style="bold"), Text(value))
        return grid

    def _findings(self) -> RenderableType:
        if not self.info.findings:
            return Text("checks: none yet" if not self.info.facts else "checks: all passed")
        out = Text("checks\n", style="bold")
        marks = {"ok": ("✓", "text-success"), "warning": ("!", "text-warning")}
        for f in self.info.findings:
            mark, colour = marks.get(f.level, ("✗", "text-error"))
            out.append(f" {mark} ", style=theme_colour(self, colour))
            out.append(f"{f.check}: ", style="bold")
            out.append(f"{f.message}\n")
        return out

    def _facts(self) -> RenderableType:
        if not self.info.facts:
            return Text()
        grid = Table.grid(padding=(0, 2))
        for key, value in self.info.facts.items():
            grid.add_row(Text(str(key), style="bold"), Text(_fact(value)))
        return Group(Text("facts", style="bold"), grid)

    def _gpus(self) -> RenderableType:
        gpus = self.info.gpus
        if not gpus:
            return Text("GPUs: none" if gpus == () else "")
        leases = {
            g.index: g for g in (self.info.history.leases and self.info.history.leases.gpus) or ()
        }
        table = Table("#", "model", "util", "memory", "temp", "processes", box=None)
        if leases:  # each GPU's holder, once the host's leases are known
            table.add_column("lease")
        for g in gpus:
            lease = [Text(_lease_cell(leases.get(g.index)))] if leases else []
            table.add_row(*map(Text, _gpu_row(g)), *lease)
        count, util, mem = gpu_cells(gpus)
        queue = self.info.history.leases.queue if self.info.history.leases else ()
        waiting = [Text(f"waiting for its GPUs: {lease_waiter(q)}") for q in queue]
        return Group(Text(f"GPUs: {count}, {util} busy, {mem}", style="bold"), table, *waiting)


def _spark_label(what: str, values: Sequence[float], gpu: Gpu | None, minutes: int) -> str:
    """The figure now, and the range the sparkline spans (it scales to its own min..max)."""
    low, high = min(values), max(values)
    if what == "util":
        return f"{values[-1]:.0f}% ({low:.0f}-{high:.0f}, {minutes} min)"
    total = gpu.memory_total_mib if gpu else 0
    return f"{values[-1] / 1024:.0f}/{total / 1024:.0f}G ({low / 1024:.0f}-{high / 1024:.0f})"


def _gpu_row(g: Gpu) -> tuple[str, ...]:
    util = f"{g.utilization_pct}%" if g.utilization_pct is not None else "?"
    temp = f"{g.temperature_c} °C" if g.temperature_c is not None else ""
    procs = ", ".join(
        f"{p.pid} {p.name} {p.memory_mib} MiB{f' ({p.user})' if p.user else ''}".strip()
        for p in g.processes
    )
    mem = f"{g.memory_used_mib}/{g.memory_total_mib} MiB"
    return str(g.index), g.name, util, mem, temp, procs


def _lease_cell(lease: GpuLease | None) -> str:
    """`held: bob's run R (node 1, since 12:01 (5 min), detached)`, `busy`, `free`."""
    if lease is None:
        return ""
    if lease.holder is not None:
        return f"held: {lease_holder(lease.holder)}"
    return lease.state


def _fact(value: object) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value))
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)
