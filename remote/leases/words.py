"""The words of GPU leases, as the console, the dashboard and `ddptui who` say them. Pure.

A holder's age is by its host's own clock (remote/agents/ops.py: read_holder), so a host whose
clock is off says how long, and `since` is this machine's clock less that: skew between hosts
never shows as a lease taken in the future.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence

from ddptui.remote import fold
from ddptui.remote.agents.ops import Leasing
from ddptui.remote.events import GpuProcess, LeaseHolder


def age(seconds: float) -> str:
    """`40 s`, `5 min`, `2 h 5 min`, `3 d 4 h`."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def since(holder: LeaseHolder, now: float | None = None) -> str:
    """`since 12:01 (5 min)`, this machine's clock; `` when its host did not say."""
    if holder.age is None:
        return ""
    at = (time.time() if now is None else now) - holder.age
    return f"since {time.strftime('%H:%M', time.localtime(at))} ({age(holder.age)})"


def gpus(indices: Iterable[int]) -> str:
    found = sorted(set(indices))
    return f"GPU {found[0]}" if len(found) == 1 else f"GPUs {fold.ranks(found) or 'none'}"


def run_of(holder: LeaseHolder) -> str:
    """`bob's run 20240101-120000-ab12`."""
    return f"{holder.user}'s run {holder.run_id}"


def holds(holder: LeaseHolder, where: Mapping[str, Sequence[int]]) -> str:
    """`bob's run R holds GPUs 0-3 on node[0-1] (since 12:01 (5 min), detached)`: each set of
    GPUs with the hosts that hold it folded."""
    by_set: dict[tuple[int, ...], list[str]] = {}
    for host, indices in where.items():
        by_set.setdefault(tuple(sorted(set(indices))), []).append(host)
    places = ", ".join(f"{gpus(s)} on {fold.hosts(h)}" if s else fold.hosts(h)
                       for s, h in by_set.items())  # fmt: skip
    about = ", ".join(x for x in (since(holder), holder.mode) if x)
    return f"{run_of(holder)} holds {places}" + (f" ({about})" if about else "")


def busy(host: str, gpu: int, proc: GpuProcess) -> str:
    """`GPU 2 on node0 is busy: pid 48211 (/usr/bin/python3, alice)`."""
    owner = f", {proc.user}" if proc.user and proc.user != "?" else ""
    return f"GPU {gpu} on {host} is busy: pid {proc.pid} ({proc.name or '?'}{owner})"


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


class Shortage:
    """What stands between a launch and its GPUs, over every host: who holds them, what work
    keeps them busy, which launches wait first."""

    def __init__(self, found: Mapping[str, Leasing]) -> None:
        self.holders: dict[tuple[str, str], tuple[LeaseHolder, dict[str, list[int]]]] = {}
        self.busy: list[str] = []
        self.ahead: dict[tuple[str, str], LeaseHolder] = {}
        self.never = any(f.never for f in found.values())
        for host, f in found.items():
            for h in f.held:
                _, where = self.holders.setdefault((h.user, h.run_id), (h, {}))
                where.setdefault(host, []).extend(h.gpus)
            self.busy += [busy(host, gpu, proc) for gpu, proc in f.busy]
            for t in f.ahead:
                self.ahead.setdefault((t.user, t.run_id), t)

    @property
    def place(self) -> int:
        """Its place in the queue: after every launch waiting before it."""
        return len(self.ahead) + 1

    def reasons(self) -> list[str]:
        said = [holds(h, where) for h, where in self.holders.values()]
        said += self.busy
        if self.ahead:
            said.append("first come: " + ", ".join(run_of(t) for t in self.ahead.values()))
        return said

    def refused(self) -> str:
        """The launch refused, naming who holds what (the reason's one line)."""
        hint = (
            "; busy_gpus: wait (or share) takes them once that work is gone (or now)"
            if self.never
            else "; --wait queues for them"
        )
        return "not starting: its GPUs are taken: " + "; ".join(self.reasons() or ["?"]) + hint

    def waiting(self) -> str:
        """`waiting for GPUs, 2nd in line: ...`."""
        return f"waiting for GPUs, {ordinal(self.place)} in line: " + "; ".join(self.reasons())


def dead(found: Mapping[str, Leasing]) -> list[str]:
    """The runs that died holding GPUs this launch took, each named once."""
    runs: dict[tuple[str, str], tuple[LeaseHolder, dict[str, list[int]], list[int]]] = {}
    for host, f in found.items():
        for h in f.dead:
            _, where, swept = runs.setdefault((h.user, h.run_id), (h, {}, []))
            where.setdefault(host, []).extend(h.gpus)
            swept.append(h.swept)
    return [
        holds(h, where).replace(" holds ", " held ", 1)
        + ": it died holding them (its supervisor was killed); taken"
        + _swept(sum(swept))
        for h, where, swept in runs.values()
    ]


def _swept(n: int) -> str:
    """Its processes that outlived it, killed by the launch that took its GPUs."""
    return f", and its {n} leftover process{'es' if n > 1 else ''} killed" if n else ""


def leased(found: Mapping[str, Leasing]) -> str:
    """`leased GPUs 0-1 on node[0-1], GPU 3 on node2`."""
    by_set: dict[tuple[int, ...], list[str]] = {}
    for host, f in found.items():
        by_set.setdefault(tuple(sorted(f.gpus)), []).append(host)
    return "leased " + ", ".join(f"{gpus(s)} on {fold.hosts(h)}" for s, h in by_set.items())
