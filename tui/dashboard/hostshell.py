"""`!` in the dashboard: a shell on the host in view, the app suspended meanwhile.

Which host: the one whose details are open; else the host of the rank (or node) whose log is
shown; else (all ranks shown) the hosts pane's selected row. The command is
remote/agents/shell.py's, the one `ddptui ssh` runs. It runs while the app's loop goes on (the run's
heartbeats and streams must not stop for a shell of an hour), its screen held still until the
shell ends; then the dashboard is back as it was.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from textual.app import App, SuspendNotSupported
from textual.screen import Screen

from ddptui.remote.agents import shell
from ddptui.remote.inventory import Host, Inventory

from .hosts import HostsTable
from .logpane import LogPane
from .screens import HostDetailScreen


def target(
    inv: Inventory | None, screen: Screen[Any], pane: LogPane, hosts: HostsTable
) -> Host | None:
    """The inventory's host in view (see above), or None."""
    if inv is None:
        return None
    node: int | None = None
    view = pane.logs.view
    if isinstance(screen, HostDetailScreen):
        node = screen.info.node_rank
    else:  # a rank's (or a node's) log in view: its host
        node = pane.logs.rank_hosts.get(view.key) if view.kind == "rank" else None
        node = view.key if view.kind == "node" else node
    if node is None and hosts.row_count:
        key = hosts.ordered_rows[hosts.cursor_row].key.value
        node = int(key) if key is not None else None
    info = hosts.info(node) if node is not None else None
    return next((h for h in inv.everyone if info is not None and h.name == info.name), None)


async def open_shell(app: App[Any], host: Host) -> None:
    """The shell on host in the terminal; back to the dashboard when it ends."""
    try:
        command = shell.shell(host)
    except shell.ShellError as exc:
        app.notify(str(exc), severity="error")
        return
    try:
        with app.suspend(), app.batch_update():  # nothing drawn until the shell is done
            print(f"ddptui: {host.name}: {' '.join(command.argv)}", flush=True)
            code = await _run(command)
            if code != 0:  # its words (ssh's, or cd's) stay on screen until read
                print(f"ddptui: the shell on {host.name} ended with status {code}: "
                      "press Enter to go back to the dashboard", flush=True)  # fmt: skip
                await asyncio.to_thread(sys.stdin.readline)
    except SuspendNotSupported:
        app.notify("a shell needs the dashboard's own terminal", severity="warning")
        return
    app.notify(f"back from {host.name}", timeout=2)


async def _run(command: shell.Shell) -> int:
    try:
        proc = await asyncio.create_subprocess_exec(*command.argv, cwd=command.cwd)
    except OSError as exc:
        print(f"ddptui: cannot run {command.argv[0]}: {exc.strerror}", flush=True)
        return 127
    return await proc.wait()
