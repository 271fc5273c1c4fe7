"""job.checkpoint in the checks: is the directory node 0 saves to the one every other host sees?

A restart resumes from the newest checkpoint node 0 saw (DDPTUI_CHECKPOINT, its path), and a
hot spare may take any node, node 0's too: a host that cannot see what node 0 saved resumes
nothing. Paths alone cannot tell (the same path on two hosts may be two local disks), so node 0
writes a mark where the directory is (or will be made: its nearest folder that exists) before
the other hosts' probes, which look for it (remote/host/checkpoints.py: mark, look); the mark
goes once every probe answered. A host that does not see it, or cannot write there, is a
warning naming the host and the path: the run itself does not need it.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Mapping
from typing import Any

from ddptui.remote.agents.agent import Agent
from ddptui.remote.agents.transport import HostError
from ddptui.remote.checks.finding import Add
from ddptui.remote.host import protocol

MARK_TIMEOUT = 20.0
TEXT_MAX = 1000  # characters kept of a path or an error a host sends
UNSHARED = "not shared storage; a restart or a spare running node 0 here resumes from nothing"


async def mark(agent: Agent | None, folder: str, workdir: str | None) -> str | None:
    """Node 0's mark where `folder` is: its token, or None when it could not be written (node
    0's own look then says why: the directory is not writable there)."""
    if agent is None:
        return None
    token = secrets.token_hex(16)
    req = {"dir": folder, "workdir": workdir, "token": token}
    try:
        await agent.request(protocol.MARK, req, timeout=MARK_TIMEOUT)
    except HostError:
        return None
    return token


async def unmark(agent: Agent | None, folder: str, workdir: str | None, token: str) -> None:
    if agent is None:
        return
    req = {"dir": folder, "workdir": workdir, "token": token, "unmark": True}
    with contextlib.suppress(HostError):
        await agent.request(protocol.MARK, req, timeout=MARK_TIMEOUT)


def asked(folder: str | None, token: str | None, node0: bool) -> dict[str, Any] | None:
    """What a host's probe is asked of job.checkpoint (None: no checkpoint, nothing asked)."""
    if folder is None:
        return None
    return {"dir": folder, "see": None if node0 else token}


def facts(found: Any) -> dict[str, Any]:
    """The probe's answer, as judge() reads it (bounded: a host's answer is data)."""
    if not isinstance(found, dict):
        return {}
    return {
        "checkpoint_dir": str(found.get("dir"))[:TEXT_MAX],
        "checkpoint_writable": found.get("writable") is True,
        "checkpoint_seen": found.get("seen") if isinstance(found.get("seen"), bool) else None,
        "checkpoint_error": found.get("error") and str(found["error"])[:TEXT_MAX],
    }


def judge(add: Add, f: Mapping[str, Any]) -> None:
    """A host's checkpoint directory: not readable, not writable, or not node 0's: warnings."""
    if "checkpoint_dir" not in f:
        return
    folder = f["checkpoint_dir"]
    if f.get("checkpoint_error"):
        add("warning", "checkpoint", f"job.checkpoint {folder}: {f['checkpoint_error']}")
    elif not f.get("checkpoint_writable"):
        why = "the job cannot save there"
        add("warning", "checkpoint", f"job.checkpoint {folder} is not writable here: {why}")
    elif f.get("checkpoint_seen") is False:
        add(
            "warning",
            "checkpoint",
            f"job.checkpoint {folder} is not where node 0 saves: {UNSHARED}",
        )
    elif f.get("checkpoint_seen"):
        add("ok", "checkpoint", f"job.checkpoint {folder}: node 0's, shared")
    else:
        add("ok", "checkpoint", f"job.checkpoint {folder}: writable")
