"""Words both front-ends use (the dashboard and the headless commands): how a failure, a path,
a group of findings and a row of the run history read."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from remote import runs
from remote.events import Failure, Finding
from remote.failures import describe_exit


def failure_line(f: Failure) -> str:
    """`rank 3 on node1 (exit code 1): RuntimeError: ...`"""
    who = f"rank {f.rank} on {f.host}" if f.rank is not None else f.host
    code = f" ({describe_exit(f.exit_code)})" if f.exit_code is not None else ""
    return f"{who}{code}: {f.message}"


def tilde(path: str) -> str:
    """`~/...` for a path under the home directory: shorter, and the same for everyone."""
    home = str(Path.home())
    return "~" + path[len(home) :] if path.startswith(home + "/") else path


def grouped(findings: Iterable[Finding], level: str) -> dict[tuple[str, str], list[str]]:
    """(check, message) → the hosts it was found on, in order; [] for findings across hosts:
    the same finding on many hosts is one line."""
    out: dict[tuple[str, str], list[str]] = {}
    for f in findings:
        if f.level == level:
            hosts = out.setdefault((f.check, f.message), [])
            if f.host is not None:
                hosts.append(f.host)
    return out


# -- the run history (`ddptui runs`, the dashboard's `h`) ----------------------------------------

RUN_COLUMNS = ("run", "status", "hosts", "world", "started", "elapsed", "failing rank")


def run_row(r: runs.RunRecord) -> dict[str, Any]:
    s = r.summary or {}
    started = r.started_at
    if s.get("elapsed") is not None:
        elapsed: float | None = float(s["elapsed"])
    elif r.status == "running" and started:
        elapsed = time.time() - started
    else:
        elapsed = None
    return {
        "id": r.run_id,
        "status": r.status,
        "hosts": r.info.get("hosts", []),
        "world_size": s.get("world_size", r.info.get("world_size")),
        "started": started,
        "elapsed": elapsed,
        "failing_rank": s.get("failing_rank"),
        "failing_host": s.get("failing_host"),
        "detail": r.detail or ((s.get("failure") or {}).get("message") or ""),
        "run_dir": str(r.dir),
    }


def run_cells(r: dict[str, Any]) -> tuple[str, ...]:
    hosts = r["hosts"]
    failing = "" if r["failing_rank"] is None else f"{r['failing_rank']} ({r['failing_host']})"
    started = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["started"])) if r["started"] else ""
    return (
        r["id"],
        r["status"] or "…",
        f"{len(hosts)}: {hosts[0]}{'…' if len(hosts) > 1 else ''}" if hosts else "0",
        "" if r["world_size"] is None else str(r["world_size"]),
        started,
        "" if r["elapsed"] is None else runs.age(r["elapsed"]),
        failing or (r["failing_host"] or ""),
    )
