"""Every rank's stack, grouped (`d`): the odd ones out first, each group's frames innermost
first, then the hosts that gave none and the flight recorder's verdict."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from ddptui.remote.host.safetext import clean
from ddptui.remote.stalls.stacks import Report

from .colours import theme_colour
from .plain import plain


class StacksScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape,q", "dismiss", "Close", id="stacks-close", tooltip="Back to the logs"),
        Binding("d", "app.stacks", "Again", id="stacks-again", tooltip="Dump every stack again"),
    ]

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.report: Report | None = None
        self.saved = ""

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="stacks") as box:
            box.border_title = plain(f"every rank's stack · run {self.run_id}")
            yield Static("dumping every rank's stack on every host…", id="stacks-body")
        yield Footer()

    def on_mount(self) -> None:
        self._draw()  # the dump may have answered before the screen was up

    def waiting(self) -> None:
        self.query_one("#stacks-body", Static).update("dumping every rank's stack again…")

    def show(self, report: Report, saved: str) -> None:
        self.report, self.saved = report, saved
        self._draw()

    def _draw(self) -> None:
        body = self.query("#stacks-body").first(Static) if self.query("#stacks-body") else None
        if self.report is None or body is None:
            return
        box = self.query_one("#stacks", VerticalScroll)
        box.border_subtitle = plain(f"{self.report.elapsed:.2f} s · saved to {self.saved}")
        body.update(self.render_report(self.report))

    def render_report(self, report: Report) -> Text:
        """The groups, odd ones out first, each host that gave none, the flight recorder's
        word: what hosts sent (frames, errors, the verdict) shown with no control in it."""
        out = Text()

        def add(piece: str, style: str = "") -> None:
            out.append(clean(piece), style)

        odd = theme_colour(self, "text-warning")
        error = theme_colour(self, "text-error")
        for i, group in enumerate(report.groups):
            style = error if group.error else (odd if i == 0 and len(report.groups) > 1 else "")
            add(group.label(), style=f"bold {style}".strip())
            add(f"  {len(group.ranks)} rank{'s' * (len(group.ranks) > 1)}\n", "dim")
            if group.error:
                add(f"    no stack: {group.error}\n", style=error)
            for frame in group.frames:
                add(f"    {frame.function}", style="bold")
                add(f" ({frame.file}:{frame.line})\n", style="dim")
            add("\n")
        for host, why in report.problems.items():
            add(f"{host}: ", style=f"bold {error}")
            add(f"{why}\n")
        if report.flight is not None:
            add("\n" + "\n".join(report.flight.lines()) + "\n")
        if not report.groups and not report.problems:
            add("no rank of this run was found on any host\n")
        return out
