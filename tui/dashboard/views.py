"""The views list: the checks' findings first, then every log view (all ranks, each rank, each
node's own lines). While a run goes a rank's row says how long since its last line; `/` in the
list narrows it to the rows containing a text (2,048 ranks don't fit a screen).

Rows are rebuilt only when the set of views changes; otherwise only the prompts that changed
are replaced (a failure mark). The silence is drawn over each row as it is rendered, so a tick
re-renders the visible rows only: replacing 2,048 prompts a second took ~0.5 s a tick.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.segment import Segment
from rich.text import Text
from textual.binding import Binding
from textual.strip import Strip
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from .logbuffer import View

CHECKS = None  # the checks' findings: an entry of the list that is no log view
Entry = View | None
LABEL = 16  # columns of a row
AGE = 4  # columns of a rank's silence at the end of its row
QUIET_S = 5.0  # a rank silent for less than this shows no age


class ViewList(OptionList):
    BINDINGS = [
        Binding(
            "slash", "app.find('views')", "Find view", id="find-view", key_display="/",
            tooltip="Show only the views (ranks, hosts) whose row contains the text",
        ),
    ]  # fmt: skip

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.entries: list[Entry] = []  # what each row shows, in order
        self._all: list[tuple[Entry, Text]] = []
        self._prompts: list[Text] = []
        self.needle = ""
        self.silent: dict[View, float] = {}  # seconds since each rank's last line, while a run goes

    def show_silences(self, silent: dict[View, float]) -> None:
        if silent or self.silent:
            self.silent = silent
            self.refresh()

    def render_line(self, y: int) -> Strip:
        """The row, with its rank's silence over its right end."""
        strip = super().render_line(y)
        index = self.scroll_offset.y + y
        entry = self.entries[index] if 0 <= index < len(self.entries) else CHECKS
        age = age_text(self.silent[entry]) if entry in self.silent else ""
        width = strip.cell_length
        if not age or width < LABEL:
            return strip
        end = strip.crop(width - AGE - 1, width)
        style = next((seg.style for seg in end if seg.style), None)
        return Strip.join(
            [strip.crop(0, width - AGE - 1), Strip([Segment(f"{age:>{AGE}} ", style)])]
        )

    def show(self, entries: Sequence[tuple[Entry, Text]], current: Entry) -> None:
        """The rows for `entries` (those matching the search), `current` highlighted."""
        self._all = list(entries)
        shown = [(e, p) for e, p in entries if e is CHECKS or self._matches(p)]
        views, prompts = [e for e, _ in shown], [p for _, p in shown]
        if views != self.entries:
            self.entries, self._prompts = views, prompts
            self.clear_options()
            self.add_options(Option(p) for p in prompts)
        else:
            for i, (old, new) in enumerate(zip(self._prompts, prompts, strict=True)):
                if old != new:
                    self.replace_option_prompt_at_index(i, new)
            self._prompts = prompts
        if current in self.entries:
            self.highlight(current)
        elif self.needle and len(self.entries) > 1:  # the first match, for Enter to open
            self.highlighted = 1

    def highlight(self, entry: Entry) -> None:
        if entry in self.entries:
            self.highlighted = self.entries.index(entry)

    def find(self, needle: str, current: Entry) -> None:
        self.needle = needle.lower()
        self.show(self._all, current)

    def _matches(self, prompt: Text) -> bool:
        return not self.needle or self.needle in prompt.plain.lower()

    def entry_at(self, index: int) -> tuple[bool, Entry]:
        """(valid, entry) of a row."""
        if 0 <= index < len(self.entries):
            return True, self.entries[index]
        return False, CHECKS


def age_text(seconds: float) -> str:
    """`5s` … `59s`, `1m` … `59m`, `1h` …; nothing under QUIET_S."""
    if seconds < QUIET_S:
        return ""
    if seconds < 60:
        return f"{int(seconds)}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m"
    return f"{int(seconds // 3600)}h"
