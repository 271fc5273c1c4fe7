"""The history's word on runs handed to Slurm (`runs`, the dashboard's history): Slurm's state
of each one's job, and its supervisors' own, read on the login node (a cluster's shared home).
One login per login node, whatever the number of runs; the runs on SSH hosts are
remote/run/statuses.py's."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from ddptui.remote import fold
from ddptui.remote.agents import ops
from ddptui.remote.agents.transport import HostError
from ddptui.remote.run import statuses
from ddptui.remote.slurm import queue
from ddptui.remote.slurm.login import Login
from ddptui.remote.slurm.run import job_of
from ddptui.remote.store import runs
from ddptui.remote.store.runs import RunError, RunRecord


async def fill(records: Sequence[RunRecord]) -> None:
    """Every record's status: a Slurm run's from Slurm and its login node, the rest's as
    remote/run/statuses.py says."""
    mine = [r for r in records if job_of(r) and r.summary is None]
    by_login: dict[str, list[RunRecord]] = {}
    for r in mine:
        by_login.setdefault(str(job_of(r).get("login")), []).append(r)
    await asyncio.gather(*(_ask(group) for group in by_login.values()))
    await statuses.fill([r for r in records if r not in mine])


async def _ask(records: list[RunRecord]) -> None:
    try:
        inv = records[0].inventory()
    except RunError as exc:
        for r in records:
            r.status, r.detail = "lost", str(exc)
        return
    assert inv.login is not None
    login = Login(inv.login, lambda event: None)
    try:
        for r in records:
            await _one(login, r)
    except HostError as exc:
        for r in records:
            r.status = r.status or "lost"
            r.detail = r.detail or f"the login node: {exc.reason}"
    finally:
        await login.close()


async def _one(login: Login, r: RunRecord) -> None:
    info = job_of(r)
    job = await login.job(str(info.get("job") or ""))
    if job is not None and not job.mine(queue.job_name(r.run_id)):
        job = None  # the id counted again: another's job now
    if job is not None and job.state == "PENDING":
        r.status, r.detail = "pending", queue.pending_text(job)
        return
    if job is not None and job.running:
        r.status, r.detail = "running", f"job {job.id} running on {fold.hosts(job.nodes)}"
    else:
        since = int(info.get("since") or 0)
        count = len(info.get("nodes") or ()) or len(job.nodes if job else ()) or 1
        with contextlib.suppress(HostError):
            found = await ops.status(
                await login.agent(), [(r.run_id, k, since) for k in range(count)]
            )
            r.states = dict(found.get(r.run_id) or {})
        said = queue.ended_text(job) if job else "its job is no longer known to Slurm"
        r.status, r.detail = runs.judge(r.states) if any(r.states.values()) else ("lost", said)
        r.detail = r.detail or said
    if job is not None:
        r.info["slurm"] = {**info, "state": job.state, "nodes": list(job.nodes)}
        r.info["hosts"] = list(job.nodes) or r.info.get("hosts")
