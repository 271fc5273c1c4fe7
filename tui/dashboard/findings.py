"""The checks' findings, where the logs will go: what the dashboard shows from the moment it
opens, before any run. Failures first, then warnings; the same finding on many hosts is one
line naming them folded (`node[01-64]`); then how many hosts passed everything.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from remote import fold
from remote.events import ChecksDone, HostChecked

from ..text import Fold
from .colours import theme_colour

REDRAW_AFTER = 0.1  # seconds
MARKS = {"failure": ("✗", "text-error"), "warning": ("!", "text-warning")}


class FindingsView(VerticalScroll):
    """The checks' findings of every host, as they arrive."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.hosts = 0
        self.addresses: dict[str, str] = {}  # name → address: folded in a finding's words
        self.checked: dict[int, HostChecked] = {}
        self.done: ChecksDone | None = None
        self._due = False  # a redraw is scheduled

    def compose(self) -> ComposeResult:
        yield Static(id="findings-body")

    def on_mount(self) -> None:
        self.border_title = "checks"
        self._draw()

    def start(self, addresses: dict[str, str]) -> None:
        """A new round of checks on these hosts (name → address)."""
        self.hosts, self.addresses = len(addresses), addresses
        self.checked, self.done = {}, None
        self._draw()

    def host_checked(self, ev: HostChecked) -> None:
        self.checked[ev.node_rank] = ev
        self._draw()

    def checks_done(self, ev: ChecksDone) -> None:
        self.done = ev
        self._draw()

    def mark(self) -> str:
        """`✗` when a check failed on a host, `!` when one warned, else a space."""
        levels = {f.level for h in self.checked.values() for f in h.findings}
        return "✗" if "failure" in levels else "!" if "warning" in levels else " "

    def _draw(self) -> None:
        """Redraw once the events of this moment are in: each redraw lays the screen out
        again, and 32 hosts answer within a few frames."""
        if self.is_mounted and not self._due:
            self._due = True
            self.set_timer(REDRAW_AFTER, self._redraw)

    def _redraw(self) -> None:
        self._due = False
        self.query_one("#findings-body", Static).update(self.render_findings())

    def render_findings(self) -> Text:
        out = Text()
        if self.done is None:
            out.append(f"checking: {len(self.checked)} of {self.hosts} hosts answered\n", "bold")
        findings = [f for h in self.checked.values() for f in h.findings]
        if self.done is not None:  # add those across hosts
            findings += [f for f in self.done.findings if f.host is None]
        for level in ("failure", "warning"):
            same = Fold(self.addresses)
            for f in findings:
                if f.level == level:
                    same.add(f.host, f.message, f.check)
            for check, hosts, message in same.take():
                mark, colour = MARKS[level]
                out.append(f"{mark} ", style=f"bold {theme_colour(self, colour)}")
                out.append(f"{check}", style="bold")
                out.append(f" {hosts}" if hosts else "", style="bold")
                out.append(f": {message}\n")
        bad = {f.host for f in findings if f.level != "ok"}
        clean = [h.host for h in self.checked.values() if h.host not in bad]
        if clean:
            colour = theme_colour(self, "text-success")
            out.append("✓ ", style=f"bold {colour}")
            out.append(f"{len(clean)} of {self.hosts} hosts passed every check")
            out.append(f" ({fold.hosts(clean)})\n", style="dim")
        if self.done is not None:
            out.append("\nl launches the job · c checks again · Enter on a host: its facts", "dim")
        return out
