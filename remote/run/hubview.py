"""Node 0's hub as the launcher sees it: where it listens, and what it said that waits.

Every other node's supervisor is told where the hub listens (`line`), once a stream
(remote/run/gang.py); the spares stand by at the same address (remote/run/recover.py). A restart
that needs spares waits until node 0's spool is read to its end (an attach replays old words
first); the run's end, with why no restart follows, is kept for the run's outcome.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ddptui.remote.host import protocol
from ddptui.remote.run import nodemsg


@dataclass
class HubView:
    addr: str = ""  # the run's master_addr: where the peers reach node 0
    port: int | None = None  # where node 0's hub listens, once it said so
    heard: asyncio.Event = field(default_factory=asyncio.Event)  # ... and it has
    line: str | None = None  # the word that tells a supervisor where the hub listens
    restart: nodemsg.Restart | None = None  # spares must take lost nodes' places
    run_end: nodemsg.RunEnd | None = None  # the run ends, and why no restart

    def listens(self, port: int) -> bool:
        """Node 0 said its hub's port: True if the supervisors must be told anew."""
        line = protocol.say(protocol.SAY_HUB, self.addr, port)
        self.port = port
        self.heard.set()
        changed, self.line = line != self.line, line
        return changed
