"""The find box: `/` in the hosts pane searches the hosts, in the views list the views. Each key
narrows the one it searches, enter keeps the search and goes back there, escape clears it."""

from __future__ import annotations

from textual.binding import Binding
from textual.widgets import Input

from .hosts import HostsTable
from .logpane import LogPane
from .widgets import ClearableInput

HINTS = {"hosts": "find hosts: name or address", "views": "find views: r12, node3, …"}


class FindInput(ClearableInput):
    BINDINGS = [
        Binding("escape", "clear", "Clear search", id="find-clear", tooltip="Show them all"),
    ]

    def __init__(self, hosts: HostsTable, pane: LogPane, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.hosts, self.pane = hosts, pane
        self.target = ""  # "hosts" or "views"

    def open(self, target: str) -> None:
        self.target = target
        self.placeholder = HINTS[target]
        self.value = self.hosts.needle if target == "hosts" else self.pane.views.needle
        self.add_class("-shown")
        self.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._find(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._find(event.value)
        self.remove_class("-shown")
        (self.hosts if self.target == "hosts" else self.pane.views).focus()

    def _find(self, text: str) -> None:
        if self.target == "hosts":
            self.hosts.find(text)
        else:
            self.pane.find_views(text)
