"""The checks' findings, where the logs will go: what the dashboard shows from the moment it
opens, before any run. Failures first, then warnings; the same finding on many hosts is one
line naming them folded (`node[01-64]`); then how many hosts passed everything.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ddptui.remote import fold
from ddptui.remote.events import ChecksDone, DeepChecked, Finding, HostChecked

from ..text import Fold
from .colours import theme_colour

REDRAW_AFTER = 0.1  # seconds
MARKS = {
    "failure": ("✗", "text-error"),
    "warning": ("!", "text-warning"),
    "ok": ("✓", "text-success"),
}


class FindingsView(VerticalScroll):
    """The checks' findings of every host, as they arrive."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.hosts = 0
        self.addresses: dict[str, str] = {}  # name → address: folded in a finding's words
        self.checked: dict[int, HostChecked] = {}
        self.done: ChecksDone | None = None
        self.deep: DeepChecked | None = None  # the deep check's verdict (D)
        self.deep_said: str | None = None  # while it runs: the last it said
        self._due = False  # a redraw is scheduled
        self.keys = (
            "l launches the job · c checks again · D deep check · Enter on a host: its facts"
        )

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

    def deep_started(self) -> None:
        self.deep, self.deep_said = None, "starting on every rank"
        self._draw()

    def deep_progress(self, text: str) -> None:
        self.deep_said = text
        self._draw()

    def deep_checked(self, ev: DeepChecked) -> None:
        self.deep, self.deep_said = ev, None
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
        self._append(out, findings, ("failure", "warning"))
        bad = {f.host for f in findings if f.level != "ok"}
        clean = [h.host for h in self.checked.values() if h.host not in bad]
        if clean:
            colour = theme_colour(self, "text-success")
            out.append("✓ ", style=f"bold {colour}")
            out.append(f"{len(clean)} of {self.hosts} hosts passed every check")
            out.append(f" ({fold.hosts(clean)})\n", style="dim")
        self._append_deep(out)
        if self.done is not None:
            out.append(f"\n{self.keys}", "dim")
        return out

    def _append_deep(self, out: Text) -> None:
        if self.deep_said is not None:
            out.append(f"\ndeep check: {self.deep_said}\n", "bold")
        if self.deep is None:
            return
        failures = sum(f.level == "failure" for f in self.deep.findings)
        verdict = "passed" if self.deep.ok else f"failed ({failures} failures)"
        out.append(f"\ndeep check {verdict} in {self.deep.seconds:.1f} s\n", "bold")
        self._append(out, self.deep.findings, ("failure", "warning", "ok"))

    def _append(self, out: Text, findings: Sequence[Finding], levels: Sequence[str]) -> None:
        """Each finding once for every host it was found on (folded), by level."""
        for level in levels:
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
