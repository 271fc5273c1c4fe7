"""The hangs the run's own watch kept on node 0's host, copied into the local run directory.

At a hang, node 0's supervisor writes every rank's last sample and the verdict as
`hang-<attempt>.json` in its node directory (remote/host/watch.py), with or without a launcher
attached. An attached launcher copies each new one into its run directory as the hang is said,
and an attach copies those kept while nobody was attached. What the host sends is data: only
names keep() writes, only valid JSON, written privately.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from ddptui.remote.agents.fleet import Fleet
from ddptui.remote.agents.transport import HostError
from ddptui.remote.events import Event, Notice
from ddptui.remote.host import protocol
from ddptui.remote.store.record import write_private

NAME = re.compile(r"hang-[0-9]{1,6}\.json")


async def fetch(fleet: Fleet, emit: Callable[[Event], None], run_id: str, run_dir: Path) -> None:
    """Node 0's kept hangs not yet in run_dir copied there, each local path said."""
    host = fleet.hosts[0]
    try:
        agent = await fleet.agent(0, emit)
        got = await agent.request(protocol.HANGS, {"run_id": run_id, "since": host.since})
    except HostError as exc:
        emit(
            Notice("warning", f"the run's kept hangs could not be copied: {exc.reason}", host.name)
        )
        return
    records = got.get("records")
    for name, text in sorted(records.items() if isinstance(records, dict) else ()):
        path = run_dir / str(name)
        if not NAME.fullmatch(str(name)) or not isinstance(text, str) or path.exists():
            continue
        try:
            json.loads(text)
        except ValueError:
            continue
        write_private(path, text)
        emit(Notice("info", f"the hang's stacks and verdict, copied here: {path}"))
