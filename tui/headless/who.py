"""`ddptui who`: every host's GPUs, free, held (by whom, since when, attached or detached) or busy
(with what), then the launches waiting for them in order; or the same as JSON with `--json`.
Hosts whose rows read the same are one row (`node[0-127]  0-7  free`). Exit 0 when every host
answered, 1 when one could not say (named).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import TextIO

from ddptui.remote import fold
from ddptui.remote.events import GpuLease, HostLeases, LeaseHolder
from ddptui.remote.exits import EXIT_FAILED, EXIT_OK
from ddptui.remote.inventory import Inventory
from ddptui.remote.leases import who as gather
from ddptui.remote.leases import words

from ..text import lease_holder
from .console import isatty, terminal_safe


async def who(inv: Inventory, *, as_json: bool = False, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    found = await gather.gather(inv)
    if as_json:
        doc = {"hosts": [dataclasses.asdict(h) for h in found],
               "queue": [dataclasses.asdict(t) for t in queue(found)]}  # fmt: skip
        out.write(json.dumps(doc, indent=2) + "\n")
    else:
        safe = terminal_safe if isatty(out) else str  # what hosts said is text, never escapes
        out.write(safe(text(found)))
    return EXIT_FAILED if any(h.error for h in found) else EXIT_OK


def text(found: list[HostLeases]) -> str:
    """The table, then the queue."""
    rows: list[tuple[str, str, str, str]] = [("host", "GPUs", "state", "who")]
    by_rows: dict[tuple[tuple[str, str, str], ...], list[str]] = {}
    for h in found:
        by_rows.setdefault(tuple(host_rows(h)), []).append(h.host)
    for same, hosts in by_rows.items():
        rows += [(fold.hosts(hosts), *row) for row in same]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = ["   ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[3]]).rstrip()
             for r in rows]  # fmt: skip
    waiting = queue(found)
    if waiting:
        lines.append("queue (first come, first served on every host):")
        lines += [f"  {i}. {waiter(t, found)}" for i, t in enumerate(waiting, 1)]
    else:
        lines.append("queue: nobody waits")
    return "\n".join(lines) + "\n"


def host_rows(h: HostLeases) -> list[tuple[str, str, str]]:
    """(GPUs, state, who) for each run of GPUs in the same state, held by the same run."""
    if h.error:
        return [("-", "unknown", h.error)]
    if h.gpus is None:
        return [("-", "none", "no nvidia-smi: no GPU to lease")]
    groups: list[tuple[list[int], str, str]] = []
    for g in h.gpus:
        state, said = g.state, gpu_who(g)
        if groups and groups[-1][1:] == (state, said):
            groups[-1][0].append(g.index)
        else:
            groups.append(([g.index], state, said))
    return [(fold.ranks(i), state, said) for i, state, said in groups]


def gpu_who(g: GpuLease) -> str:
    if g.holder is not None:
        return lease_holder(g.holder)
    if g.state == "busy":
        return "; ".join(
            f"pid {p.pid} {p.name or '?'}" + (f" ({p.user})" if p.user not in ("", "?") else "")
            for p in g.processes
        )
    if g.dead is not None:
        return f"(last {words.run_of(g.dead)}, which died holding it)"
    return ""


def queue(found: list[HostLeases]) -> list[LeaseHolder]:
    """The launches waiting, each once (its first node's ticket), in the queue's order."""
    seen: dict[str, LeaseHolder] = {}
    for h in found:
        for t in h.queue:
            seen.setdefault(t.run_id, t)
    return sorted(seen.values(), key=lambda t: (t.key is None, t.key or 0, t.run_id))


def waiter(t: LeaseHolder, found: list[HostLeases]) -> str:
    """`alice's run Q for 4 GPUs on node[0-1] (waiting since 12:05 (1 min), from alice@desk)`."""
    wants: dict[int, list[str]] = {}
    for h in found:
        for mine in h.queue:
            if mine.run_id == t.run_id:
                wants.setdefault(mine.count, []).append(h.host)
    where = ", ".join(f"{n} GPU(s) on {fold.hosts(hosts)}" for n, hosts in wants.items())
    about = [words.since(t).replace("since", "waiting since"), f"from {t.launcher}"]
    return f"{words.run_of(t)} for {where} ({', '.join(a for a in about if a)})"
