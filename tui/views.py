"""The views list: the checks' findings first, then every log view (all ranks, each rank, each
node's own lines). While a run goes a rank's row says how long since its last line; `/` in the
list narrows it to the rows containing a text (2,048 ranks don't fit a screen).

Rows are rebuilt only when the set of views changes; otherwise only the prompts that changed
are replaced (a silence age, a failure mark), so a tick costs little at thousands of ranks.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.binding import Binding
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
            self.highlighted = self.entries.index(current)

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


def label(text: str, silent_for: float | None) -> str:
    """A row's text, cut to fit, with the rank's silence at its end: `r12 node3    2m`."""
    age = age_text(silent_for) if silent_for is not None else ""
    if not age:
        return text[:LABEL]
    width = LABEL - AGE
    return f"{text[:width]:<{width}}{age:>{AGE}}"


STEPS = (5, 10, 15, 20, 30, 45)  # seconds shown under a minute: a row changes only so often


def age_text(seconds: float) -> str:
    """`5s` … `45s`, `1m` … `59m`, `1h` …: coarse, so a row changes a few times a minute."""
    if seconds < QUIET_S:
        return ""
    if seconds < 60:
        return f"{max(s for s in STEPS if s <= seconds)}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m"
    return f"{int(seconds // 3600)}h"
