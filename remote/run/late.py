"""Lines that came late: what a host printed after the launcher gave up on it (a cut longer
than the lease), read from its spool once it can be reached again (`attach`, `runs`).

The run's summary names each stream its end left unread, with where the logs stop in it
(remote/run/gang.py's unread). Here each such host is asked, once its supervisor is over, for its
spool from there; the lines go into rank-N.log (node-K.log), each log's first late line
preceded by one that says they came late, from which host, and when they were read. A host
still unreachable stays in the list for the next time. The launcher looks once itself, at the
run's end, for the hosts spares replaced (`at_end`): lost an attempt or more before, they had
time to come back, and nobody may ask after the run again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddptui.remote.agents import ops
from ddptui.remote.agents.agent import Agent
from ddptui.remote.agents.fleet import Fleet
from ddptui.remote.agents.link import Item, NodeLink, Record
from ddptui.remote.agents.transport import HostError
from ddptui.remote.events import Event, LogBatch, Notice
from ddptui.remote.host import protocol
from ddptui.remote.inventory import Host
from ddptui.remote.run.gang import STREAMS
from ddptui.remote.run.ranktag import Lines, untag
from ddptui.remote.store.record import Recorder, replace_private
from ddptui.remote.store.runs import SUMMARY, RunError, RunRecord, read

READ_TIMEOUT = 120.0  # one host's spool, from where the logs stop to its end
END_S = 10.0  # at a run's end, how long its launcher tries the replaced hosts' spools
END_AGAIN_S = 1.0  # between two tries (a replaced host's supervisor may be leaving still)

Emit = Callable[[Event], None]
Batches = list[tuple[bytes, Lines]]  # (stream, lines) as the spool holds them


@dataclass(frozen=True)
class Unread:
    """A stream the run's end left unread: node k's (of the supervisor started at attempt
    `since`) on `host`, whose spool the logs hold up to `offset`."""

    node: int
    since: int
    host: str
    offset: int

    @classmethod
    def parse(cls, entry: Any) -> Unread | None:
        """From summary.json's `unread`; None for what is not one."""
        try:
            return cls(int(entry["node"]), int(entry.get("since") or 0), str(entry["host"]),
                       int(entry["offset"]))  # fmt: skip
        except (AttributeError, KeyError, TypeError, ValueError):
            return None


async def at_end(run_dir: Path) -> None:
    """A run's end, in its launcher: the late lines of the hosts spares replaced, read into its
    logs if they can be within END_S (tried again while such a host's supervisor is still
    leaving); what is left waits for the next look (`runs`, `attach`)."""
    deadline = time.monotonic() + END_S
    while True:
        try:
            record = read(run_dir)
            replaced = set(record.inventory().retired)
        except RunError:
            return
        left = [u for u in _unread(record) if u.host in replaced]
        if not left or time.monotonic() + END_AGAIN_S > deadline:
            return
        try:
            await asyncio.wait_for(fetch(record, among=replaced), deadline - time.monotonic())
        except TimeoutError:
            return
        await asyncio.sleep(END_AGAIN_S)


def _unread(record: RunRecord) -> list[Unread]:
    found = map(Unread.parse, (record.summary or {}).get("unread") or ())
    return [u for u in found if u is not None]


async def fetch(record: RunRecord, emit: Emit | None = None, among: set[str] | None = None) -> int:
    """Read the late lines of every stream the run left unread into its logs (`among`: of
    those hosts only); how many came. emit hears a notice per host (never the lines: they are
    in the logs now)."""
    summary = record.summary or {}
    unread = _unread(record)
    if not unread:
        return 0
    try:
        hosts = {h.name: h for h in record.inventory().everyone if among is None or h.name in among}
    except RunError:
        return 0
    got = await asyncio.gather(*(_read(record.run_id, hosts.get(u.host), u) for u in unread))
    if all(batches is None for batches in got):  # none reachable yet: nothing changes
        return 0
    rec = Recorder(record.dir, resume=True)
    if rec.passive:  # another ddptui writes this run's logs now: it is theirs to do
        rec.close()
        return 0
    came = 0
    try:
        for u, batches in zip(unread, got, strict=True):
            came += _store(rec, u, batches or [])
            lines = sum(len(lines) for _, lines in batches or [])
            if emit is not None and lines:
                text = f"{lines} lines it printed while cut off came late: now in the run's logs"
                emit(Notice("warning", text, host=u.host))
        rec.checkpoint({})
    finally:
        rec.close()
    left = [u for u, batches in zip(unread, got, strict=True) if batches is None]
    summary["unread"] = [dataclasses.asdict(u) for u in left]
    replace_private(record.dir / SUMMARY, json.dumps(summary, indent=2) + "\n")
    return came


async def _read(run_id: str, host: Host | None, u: Unread) -> Batches | None:
    """The stream's spool past where the logs stop ([] if the host keeps nothing of it any
    more); None if it cannot be read yet: the host unreachable, or its supervisor still
    going (its end comes later)."""
    if host is None:
        return None
    fleet = Fleet([host])
    try:
        agent = await fleet.agent(0, lambda event: None)
        runs_there = await ops.status(agent, [(run_id, u.node, u.since)])
        state = runs_there.get(run_id, {}).get(u.node)
        if not isinstance(state, dict):
            return []
        if state.get("alive"):
            return None
        return await _spool(agent, NodeLink(run_id, u.node, u.offset), u.since)
    except HostError:
        return None
    finally:
        await fleet.close()


async def _spool(agent: Agent, link: NodeLink, since: int) -> Batches | None:
    """The spool from the link's offset to its end (its supervisor is over: all is there)."""
    batches: Batches = []
    done: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()

    def items(found: list[Item]) -> None:
        for item in found:
            if isinstance(item, Record) and item.kind in STREAMS:
                batches.append((item.kind, untag(item.data.decode("utf-8", "surrogateescape"))))

    def ended(why: str | None) -> None:
        if not done.done():
            done.set_result(why)

    args = {"run_id": link.run_id, "node": link.node, "since": since}
    link.open(agent, protocol.ATTACH, args, items, ended)
    try:
        why = await asyncio.wait_for(done, READ_TIMEOUT)
    except TimeoutError:
        why = "timed out"
    finally:
        link.close()
    return batches if why is None and link.ended else None


def _store(rec: Recorder, u: Unread, batches: Batches) -> int:
    """Each log's late lines after one line saying so; how many lines."""
    when = time.strftime("%Y-%m-%d %H:%M:%S")
    mark = (
        f"ddptui: the lines below came late: {u.host} printed them while cut off from the "
        f"launcher (read from its spool at {when})"
    )
    marked: set[int | None] = set()
    count = 0
    for kind, lines in batches:
        first = [(rank, mark) for rank in dict.fromkeys(r for r, _ in lines) if rank not in marked]
        marked.update(rank for rank, _ in first)
        rec(LogBatch(u.host, u.node, STREAMS[kind], (*first, *lines)))
        count += len(lines)
    return count
