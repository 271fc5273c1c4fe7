"""`!`: the host it opens a shell on (the selected row, the shown rank's, the open details'),
under Pilot; Pilot's terminal cannot be handed over, which the app says. The shell itself runs
in tmux on the test hosts (tests/e2e/test_shell_e2e.py)."""

from __future__ import annotations

from pathlib import Path

from apptools import FakeClusters, fake_app, local_inventory, opening, settle, two_node_script

from ddptui.tui.dashboard import hostshell
from ddptui.tui.dashboard.app import Dashboard
from ddptui.tui.dashboard.screens import HostDetailScreen


def named(app: Dashboard) -> str | None:
    host = hostshell.target(app.inventory, app.screen, app.pane, app.hosts)
    return host.name if host else None


async def test_the_host_in_view_and_a_terminal_it_cannot_have(tmp_path: Path) -> None:
    inv = local_inventory(tmp_path, ["--epochs", "1"])
    app, _ = fake_app(inv, two_node_script, cluster=FakeClusters(opening()))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        assert named(app) == "node0"  # the hosts pane's row
        await pilot.press("down")
        assert named(app) == "node1"
        await pilot.press("l")
        await settle(pilot)
        app.hosts.move_cursor(row=1)  # (the launch read the inventory again: row 0)
        while app.pane.logs.view.kind != "rank" or app.pane.logs.view.key != 0:
            await pilot.press("right_square_bracket")
        assert named(app) == "node0"  # rank 0's host, though node1's row is selected
        await pilot.press("a")  # all ranks: the selected row's
        assert named(app) == "node1"
        app.hosts.focus()
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, HostDetailScreen) and named(app) == "node1"
        await pilot.press("exclamation_mark")
        await settle(pilot)
        said = [n.message for n in app._notifications]
        assert "a shell needs the dashboard's own terminal" in said
        await pilot.press("s")  # on a host's details, s is the shell too, as k9s's s
        await settle(pilot)
        said = [n.message for n in app._notifications]
        assert said.count("a shell needs the dashboard's own terminal") == 2
        assert isinstance(app.screen, HostDetailScreen)  # no stop's question came
