"""The GPUs a job may take on a host, its leases read (remote/host/leaseop.py: for_probe): free
ones among those its inventory entry allows (its `gpus:` pins, or what CUDA_VISIBLE_DEVICES
names). `nproc_per_node: auto` starts one process per GPU it may take; where none is free, one
per GPU it is allowed (the launch then waits for them, or is refused). Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ddptui.remote.events import HostLeases
from ddptui.remote.leases import words


def facts(leases: HostLeases, candidates: Sequence[int], busy_gpus: str) -> dict[str, Any]:
    """`lease_gpus` (what `auto` starts), and `lease_note` and `lease_level` for the check."""
    if leases.error:
        return {"lease_note": f"the GPUs' leases cannot be read: {leases.error}",
                "lease_level": "warning"}  # fmt: skip
    allowed = [g for g in leases.gpus or () if g.index in set(candidates)]
    free = [g for g in allowed if g.state == "free" or (g.state == "busy" and busy_gpus == "share")]
    said: list[str] = []
    holders: dict[tuple[str, str], list[int]] = {}
    for g in allowed:
        if g.holder is not None:
            holders.setdefault((g.holder.user, g.holder.run_id), []).append(g.index)
        elif g in free or g.state != "busy":
            continue
        else:
            procs = ", ".join(f"pid {p.pid} {p.name}" for p in g.processes)
            said.append(f"GPU {g.index} busy ({procs}; busy_gpus: {busy_gpus})")
    for (user, run_id), indices in holders.items():
        holder = next(g.holder for g in allowed if g.holder and g.holder.run_id == run_id)
        about = words.since(holder)
        said.insert(0, f"{words.gpus(indices)} held by {user}'s run {run_id}"
                    + (f" ({about})" if about else ""))  # fmt: skip
    if not said:
        return {"lease_gpus": len(free)}
    if free:
        text = f"; the job may take {words.gpus(g.index for g in free)}"
        return {"lease_gpus": len(free), "lease_note": "; ".join(said) + text, "lease_level": "ok"}
    text = "; none is free: the launch waits for them (--wait) or is refused"
    return {"lease_gpus": len(allowed), "lease_note": "; ".join(said) + text,
            "lease_level": "warning"}  # fmt: skip
