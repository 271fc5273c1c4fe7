"""The run history in the dashboard: every run, newest first; Enter opens one.

The same rows as `ddptui --headless runs`: a run that may still be going is asked of its hosts,
which can take a moment, so the table fills in from a worker and says it is asking meanwhile.
Dismissed with the chosen run id (or None).
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Static

from ddptui.remote.slurm import status
from ddptui.remote.store import runs

from ..text import RUN_COLUMNS, run_cells, run_row, shown


class HistoryScreen(ModalScreen[str | None]):
    BINDINGS = [
        Binding("escape,q", "dismiss(None)", "Back", id="history-back", tooltip="Close"),
        Binding("r", "refresh", "Refresh", id="history-refresh", tooltip="Ask the hosts again"),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(id="history"):
            yield Static("runs, newest first: Enter opens one (a live run is attached to)")
            yield DataTable(id="history-table", cursor_type="row", zebra_stripes=True)
            yield Static("", id="history-note")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns(*RUN_COLUMNS)
        self.action_refresh()

    def action_refresh(self) -> None:
        self.query_one("#history-note", Static).update("asking the hosts of unfinished runs…")
        self.run_worker(self._load(), name="history", group="history", exclusive=True)

    async def _load(self) -> None:
        records = runs.all_runs()
        self._fill([run_row(r) for r in records])  # local facts first, statuses as they come
        await status.fill(records)
        self._fill([run_row(r) for r in records])
        self.query_one("#history-note", Static).update(f"{len(records)} runs")

    def _fill(self, rows: list[dict[str, Any]]) -> None:
        table = self.query_one(DataTable)
        cursor = table.cursor_row
        table.clear()
        for r in rows:
            table.add_row(*(Text(shown(cell)) for cell in run_cells(r)), key=r["id"])
        if rows:
            table.move_cursor(row=min(cursor, len(rows) - 1))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.dismiss(event.row_key.value)
