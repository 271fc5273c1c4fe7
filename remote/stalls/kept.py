"""The hangs the run's own watch kept on node 0's host, copied into the local run directory.

At a hang, node 0's supervisor writes every rank's last sample and the verdict as
`hang-<attempt>.json` in its node directory (remote/host/watch.py), with or without a launcher
attached, and with the flight recorder on, every rank's trace and torch's verdict on them in
`flight-<attempt>/`. An attached launcher copies each new one into its run directory as the hang is
said, and an attach copies those kept while nobody was attached. What the host sends is data: only
names keep() writes, only valid JSON, written privately.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from ddptui.remote.agents import ops
from ddptui.remote.agents.fleet import Fleet
from ddptui.remote.agents.transport import HostError
from ddptui.remote.events import Event, Notice
from ddptui.remote.host.flightfiles import FOLDER, TRACE, VERDICT
from ddptui.remote.store.record import private_dir, write_private

NAME = re.compile(r"hang-[0-9]{1,6}\.json")
# the flight recorder's traces at that hang, and the analyser's verdict (remote/host/hangtraces.py)
KEPT_TRACE = re.compile(rf"({FOLDER}[0-9]{{1,6}})/({TRACE}[0-9]{{1,7}}\.json|{re.escape(VERDICT)})")


async def fetch(fleet: Fleet, emit: Callable[[Event], None], run_id: str, run_dir: Path) -> None:
    """Node 0's kept hangs not yet in run_dir copied there, each local path said."""
    host = fleet.hosts[0]
    try:
        agent = await fleet.agent(0, emit)
        records = await ops.hangs(agent, run_id, host.since)
    except HostError as exc:
        emit(
            Notice("warning", f"the run's kept hangs could not be copied: {exc.reason}", host.name)
        )
        return
    for name, text in sorted(records.items()):
        path = _local(run_dir, name, text)
        if path is None or path.exists():
            continue
        if path.parent != run_dir:
            private_dir(path.parent)
        write_private(path, text)
        if path.parent == run_dir:
            emit(Notice("info", f"the hang's stacks and verdict, copied here: {path}"))


def _local(run_dir: Path, name: str, text: object) -> Path | None:
    """Where a kept record goes in run_dir: None for a name keep() never writes, or JSON that
    is not."""
    trace = KEPT_TRACE.fullmatch(name)
    if not isinstance(text, str) or not (NAME.fullmatch(name) or trace):
        return None
    if name.endswith(".json"):
        try:
            json.loads(text)
        except ValueError:
            return None
    return run_dir / trace[1] / trace[2] if trace else run_dir / name
