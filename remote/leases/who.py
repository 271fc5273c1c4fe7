"""`ddptui who`: every host of the inventory (its spares too) asked at once for its GPUs' leases
and the queue (remote/host/leaseop.py: view); a host that cannot be reached says why."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ddptui.remote.agents import ops
from ddptui.remote.agents.fleet import Fleet, fleet_for
from ddptui.remote.agents.transport import HostError
from ddptui.remote.events import Event, HostLeases
from ddptui.remote.inventory import Inventory


async def gather(
    inv: Inventory, emit: Callable[[Event], None] | None = None, fleet: Fleet | None = None
) -> list[HostLeases]:
    """Each host's leases, in the inventory's order; over `fleet` if given, else one of its own
    (closed after)."""
    own = fleet is None
    fleet = fleet or fleet_for(inv)
    tell = emit or (lambda event: None)

    async def one(k: int) -> HostLeases:
        host = inv.everyone[k]
        try:
            found = await ops.gpu_leases(await fleet.agent(k, tell), k)
        except HostError as exc:
            found = HostLeases(host.name, k, None, error=exc.reason)
        tell(found)
        return found

    try:
        return list(await asyncio.gather(*(one(k) for k in range(len(inv.everyone)))))
    finally:
        if own:
            await fleet.close()
