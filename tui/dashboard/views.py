"""The views list: the checks' findings first, then every log view (all ranks, each rank, each
node's own lines). While a run goes a rank's row says how long since its last line; `/` in the
list narrows it to the rows containing a text (2,048 ranks don't fit a screen).

Virtualised, as k9s and lazygit do it: the rows are a plain list of views, and only the rows
on screen are drawn, each from its label at the moment it is drawn (`label` and `silence`, the
log pane's). A list widget with an object per row (OptionList) measured every one of thousands
of rows again whenever a rank joined, and held them all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.segment import Segment
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from .logbuffer import View

CHECKS = None  # the checks' findings: an entry of the list that is no log view
Entry = View | None
LABEL = 16  # columns of a row
AGE = 4  # columns of a rank's silence at the end of its row
QUIET_S = 5.0  # a rank silent for less than this shows no age


class ViewList(ScrollView, can_focus=True):
    """The views, one row each; Enter or a click shows one (`Chosen`)."""

    DEFAULT_CSS = """
    ViewList {
        background: $surface;
        color: $foreground;
        padding: 0 1;
        overflow-x: hidden;
        & > .view-list--highlighted {
            color: $foreground;
            background: $block-cursor-blurred-background;
        }
        &:focus {
            background-tint: $foreground 5%;
            & > .view-list--highlighted {
                color: $block-cursor-foreground;
                background: $block-cursor-background;
                text-style: $block-cursor-text-style;
            }
        }
    }
    """
    COMPONENT_CLASSES = {"view-list--row", "view-list--highlighted"}
    BINDINGS = [
        Binding("down", "move(1)", "Down", show=False),
        Binding("up", "move(-1)", "Up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("home", "move(-1000000)", "First", show=False),
        Binding("end", "move(1000000)", "Last", show=False),
        Binding("enter", "choose", "Show", show=False),
        Binding(
            "slash", "app.find('views')", "Find view", id="find-view", key_display="/",
            tooltip="Show only the views (ranks, hosts) whose row contains the text",
        ),
    ]  # fmt: skip

    class Chosen(Message):
        """A row was chosen: show its view (or the checks)."""

        def __init__(self, entry: Entry) -> None:
            super().__init__()
            self.entry = entry

    def __init__(
        self,
        label: Callable[[Entry], Text],
        silence: Callable[[View], float | None],
        *,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.label, self.silence = label, silence
        self.all: list[Entry] = []  # every view, in order
        self.entries: list[Entry] = []  # the rows: those matching the search
        self.highlighted = 0
        self.needle = ""

    # -- rows -------------------------------------------------------------------------------

    def show(self, entries: Sequence[Entry], current: Entry) -> None:
        """The rows for `entries` (those matching the search), `current` highlighted."""
        self.all = list(entries)
        self.entries = [e for e in self.all if e is CHECKS or self._matches(e)]
        self.virtual_size = Size(LABEL, len(self.entries))
        if current in self.entries:
            self.highlight(current)
        elif self.needle and len(self.entries) > 1:  # the first match, for Enter to open
            self._move_to(1)
        else:
            self._move_to(min(self.highlighted, len(self.entries) - 1))
        self.refresh()

    def find(self, needle: str, current: Entry) -> None:
        self.needle = needle.lower()
        self.show(self.all, current)

    def _matches(self, entry: Entry) -> bool:
        return not self.needle or self.needle in self.label(entry).plain.lower()

    def highlight(self, entry: Entry) -> None:
        if entry in self.entries:
            self._move_to(self.entries.index(entry))

    def entry_at(self, index: int) -> tuple[bool, Entry]:
        """(valid, entry) of a row."""
        if 0 <= index < len(self.entries):
            return True, self.entries[index]
        return False, CHECKS

    # -- drawing ----------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        index = self.scroll_offset.y + y
        if not 0 <= index < len(self.entries):
            return Strip.blank(width, self.get_visual_style("view-list--row").rich_style)
        entry = self.entries[index]
        classes = ["view-list--row"]
        if index == self.highlighted:
            classes.append("view-list--highlighted")
        style = self.get_visual_style(*classes).rich_style
        text = self.label(entry).copy()
        text.truncate(width, pad=True)
        text.stylize_before(style)
        strip = Strip(text.render(self.app.console), width)
        silent = self.silence(entry) if entry is not CHECKS else None
        age = age_text(silent) if silent is not None else ""
        if not age or width < LABEL:
            return strip
        end = strip.crop(width - AGE - 1, width)
        age_style = next((seg.style for seg in end if seg.style), None)
        return Strip.join(
            [strip.crop(0, width - AGE - 1), Strip([Segment(f"{age:>{AGE}} ", age_style)])]
        )

    # -- keys and mouse ---------------------------------------------------------------------

    def _move_to(self, index: int) -> None:
        self.highlighted = max(0, min(index, len(self.entries) - 1))
        height = self.scrollable_content_region.height
        if height:
            self.scroll_to_region(Region(0, self.highlighted, 1, 1), animate=False, immediate=True)
        self.refresh()

    def action_move(self, step: int) -> None:
        self._move_to(self.highlighted + step)

    def action_page(self, step: int) -> None:
        self._move_to(self.highlighted + step * max(1, self.scrollable_content_region.height - 1))

    def action_choose(self) -> None:
        valid, entry = self.entry_at(self.highlighted)
        if valid:
            self.post_message(self.Chosen(entry))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        index = self.scroll_offset.y + offset.y
        if 0 <= index < len(self.entries):
            self._move_to(index)
            self.action_choose()


def age_text(seconds: float) -> str:
    """`5s` … `59s`, `1m` … `59m`, `1h` …; nothing under QUIET_S."""
    if seconds < QUIET_S:
        return ""
    if seconds < 60:
        return f"{int(seconds)}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m"
    return f"{int(seconds // 3600)}h"
