"""Each run's status: its summary's, or what its hosts' supervisors say (`runs`, `plot`, the
dashboard's history). Asking the hosts reads, on the way, the lines a lost host printed while it
was cut off (remote/run/late.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ddptui.remote.agents import ops
from ddptui.remote.agents.fleet import Fleet
from ddptui.remote.agents.transport import HostError
from ddptui.remote.inventory import Host
from ddptui.remote.run import late
from ddptui.remote.store import runs
from ddptui.remote.store.runs import RunError, RunRecord


async def fill(records: Sequence[RunRecord]) -> None:
    """Fill each record's status: its summary's, or what its hosts' supervisors say. A run
    that ended with a host lost has the lines that host printed meanwhile read now, if it
    can be reached (remote/run/late.py)."""
    unread = [r for r in records if r.summary is not None and r.summary.get("unread")]
    await asyncio.gather(*(late.fetch(r) for r in unread))
    ask = [r for r in records if r.summary is None]
    for r in records:
        if r.summary is not None:
            r.status, r.detail = str(r.summary.get("status")), str(r.summary.get("reason") or "")
    if not ask:
        return
    pairs: dict[tuple[Any, ...], tuple[Host, list[tuple[str, int, int]]]] = {}
    for r in ask:
        try:
            hosts = r.inventory().hosts
        except RunError as exc:
            r.status, r.detail = "lost", str(exc)
            continue
        for h in hosts:
            key = _reach(h)
            pairs.setdefault(key, (h, []))[1].append((r.run_id, h.node_rank, h.since))
    answers = await asyncio.gather(*(_ask(h, nodes) for h, nodes in pairs.values()))
    for (_, nodes), got in zip(pairs.values(), answers, strict=True):
        for run_id, node, _ in nodes:
            state = got.get(run_id, {}).get(node) if isinstance(got, dict) else None
            for r in ask:
                if r.run_id == run_id:
                    r.states[node] = state if isinstance(got, dict) else {"error": got}
    for r in ask:
        if not r.status:
            r.status, r.detail = runs.judge(r.states)


def _reach(h: Host) -> tuple[Any, ...]:
    """Hosts reached the same way share one connection."""
    return (h.transport, h.host, h.port, h.user, h.identity_file, h.known_hosts, h.python)


async def _ask(host: Host, nodes: list[tuple[str, int, int]]) -> ops.Runs | str:
    """{run_id: {node: state or None}} from the host's agent (one login), or why not; node 0's
    state holds its training curve (`series`)."""
    fleet = Fleet([host])
    try:
        agent = await fleet.agent(0, lambda event: None)
        return await ops.status(agent, nodes, series=True)
    except HostError as exc:
        return exc.reason
    finally:
        await fleet.close()
