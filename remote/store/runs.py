"""Runs as the launcher keeps them: one directory each, found again by id, prefix or path.

Every run directory holds `run.json` (id, hosts, when, the master address) and `inventory.yaml`
(the inventory it was started with: attach, stop and history need no `-i`). Runs live under the
user data dir's `runs/`; a run whose directory is elsewhere (`--run-dir`) is linked there, so
one place lists them all. A run that may still be going is asked of its hosts, not only of the
local files (a detached run, or one whose launcher died, writes no local summary):
remote/run/statuses.py asks, judge() here reads their answers.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddptui.remote import inventory
from ddptui.remote.host.progress import SERIES
from ddptui.remote.inventory import Inventory
from ddptui.remote.store.record import (
    RunDirError,
    check_private,
    private_dir,
    replace_private,
    write_private,
)
from ddptui.remote.store.runlist import RUN_JSON, root

INVENTORY, SUMMARY = "inventory.yaml", "summary.json"
# A run's status: from its summary, else from its hosts' supervisors.
STATUSES = ("running", "succeeded", "failed", "stopped", "lost")


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


class RunError(Exception):
    """RUN names no run, several, or one whose files are unreadable: for a person."""


def default_dir(run_id: str) -> Path:
    return root() / run_id


def register(run_dir: Path, run_id: str, inv: Inventory, **info: Any) -> None:
    """Keep what attach, stop and history need; link the run under root() if elsewhere."""
    write_private(run_dir / INVENTORY, inv.text)
    write_info(run_dir, run_id=run_id, hosts=[h.name for h in inv.hosts],
               started_at=time.time(), inventory=str(inv.path), excluded=list(inv.excluded),
               **info)  # fmt: skip
    link = root() / run_id
    if run_dir.resolve() != link.resolve():
        private_dir(link.parent)
        link.symlink_to(run_dir.resolve(), target_is_directory=True)


def replaced(run_dir: Path, node: int, spare: str, since: int, lost: str) -> None:
    """A spare took node's place from attempt `since`, the host `lost` had it (attach finds it
    there, and summary.json names both)."""
    path = run_dir / RUN_JSON
    old = json.loads(path.read_text()).get("replaced") or []
    swap = {"node": node, "host": spare, "since": since, "lost": lost}
    write_info(run_dir, replaced=[*old, swap])


def write_info(run_dir: Path, **info: Any) -> None:
    path = run_dir / RUN_JSON
    old = json.loads(path.read_text()) if path.exists() else {}
    replace_private(path, json.dumps({**old, **info}, indent=2) + "\n")


def add_to_summary(run_dir: Path, **info: Any) -> None:
    """Keys added to summary.json, once written (a Slurm job's, known after the run's end)."""
    path = run_dir / SUMMARY
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    replace_private(path, json.dumps({**old, **info}, indent=2) + "\n")


@dataclass
class RunRecord:
    run_id: str
    dir: Path
    info: dict[str, Any]
    summary: dict[str, Any] | None
    status: str = ""  # filled by `statuses`
    detail: str = ""  # e.g. why it is lost
    # per node: its state as its host keeps it (remote/host/protocol.py: NodeState), or
    # {"error": why} where its host was not reached
    states: dict[int, Mapping[str, Any] | None] = field(default_factory=dict)

    @property
    def started_at(self) -> float:
        return float(self.info.get("started_at") or 0)

    def inventory(self) -> Inventory:
        """The inventory it was started with, as the run has it now: hosts left out of this
        launch (--exclude) out, spares in the lost nodes' places."""
        try:
            inv = inventory.load(self.dir / INVENTORY)
            if excluded := self.info.get("excluded"):
                inv = inventory.leave_out(inv, {str(name) for name in excluded})
            for r in self.info.get("replaced") or ():
                inv = inventory.swap_in(inv, int(r["node"]), str(r["host"]), int(r["since"]))
            job = self.info.get("slurm") or {}
            if inv.slurm is not None and job.get("nodes"):  # the nodes Slurm gave it
                inv = inventory.with_nodes(inv, [str(n) for n in job["nodes"]],
                                           int(job.get("since") or 0))  # fmt: skip
        except (inventory.InventoryError, KeyError, TypeError, ValueError) as exc:
            raise RunError(f"run {self.run_id}: its inventory copy is unusable: {exc}") from None
        return inv


def read(run_dir: Path) -> RunRecord:
    try:
        info = json.loads((run_dir / RUN_JSON).read_text())
        check_private(run_dir, run_dir.stat())  # who may write it may swap its inventory copy
    except (OSError, ValueError) as exc:
        raise RunError(f"{run_dir} is not a ddptui run directory ({exc})") from None
    except RunDirError as exc:
        raise RunError(f"run {exc}") from None
    summary = None
    if (run_dir / SUMMARY).exists():
        try:
            summary = json.loads((run_dir / SUMMARY).read_text())
        except (OSError, ValueError):
            summary = None
    return RunRecord(str(info.get("run_id") or run_dir.name), run_dir, info, summary)


def all_runs() -> list[RunRecord]:
    """Every run under root(), newest first (unreadable leftovers are skipped)."""
    found = []
    if root().is_dir():
        for entry in root().iterdir():
            if (entry / RUN_JSON).exists():
                try:
                    record = read(entry)
                except RunError:
                    continue
                if entry.is_symlink() and record.run_id != entry.name:
                    continue  # a --run-dir since reused by another run (linked by its own id)
                found.append(record)
    return sorted(found, key=lambda r: (r.started_at, r.run_id), reverse=True)


def bad_hosts(r: RunRecord) -> dict[str, str]:
    """The hosts the run's hub would not use again, and why: the summary's, else run.json's
    (what an attached launcher heard), else node 0's state (`statuses` asked it)."""
    listed = (r.summary or {}).get("bad_hosts")
    if isinstance(listed, list) and listed:
        return {str(b.get("host")): str(b.get("why")) for b in listed if isinstance(b, dict)}
    heard = r.info.get("bad_hosts")
    if isinstance(heard, dict) and heard:
        return {str(k): str(v) for k, v in heard.items()}
    told = (r.states.get(0) or {}).get("bad_hosts")
    pairs = told.values() if isinstance(told, dict) else ()
    return {str(p[0]): str(p[1]) for p in pairs if isinstance(p, list) and len(p) == 2}


def bad_before(inv: Inventory, run_id: str) -> list[str]:
    """A launch's warnings: this inventory's hosts marked bad in the last run on any of them."""
    names = {h.name for h in inv.everyone}
    last = next((r for r in all_runs() if r.run_id != run_id and names & set(r.info.get("hosts")
                 or ())), None)  # fmt: skip
    if last is None:
        return []
    return [
        f"{name} was marked bad in the last run on these hosts ({last.run_id}): {why}"
        for name, why in bad_hosts(last).items()
        if name in names
    ]


def resolve(spec: str) -> RunRecord:
    """RUN as a user writes it: a run directory, a run id, or a unique prefix of one."""
    path = Path(spec).expanduser()
    if (path / RUN_JSON).exists():
        return read(path)
    matches = [r for r in all_runs() if r.run_id.startswith(spec)]
    exact = [r for r in matches if r.run_id == spec]
    if exact or len(matches) == 1:
        return (exact or matches)[0]
    if not matches:
        raise RunError(f"no run matches {spec!r} (ddptui --headless runs lists them)")
    ids = ", ".join(r.run_id for r in matches[:5])
    raise RunError(f"{spec!r} matches {len(matches)} runs ({ids}...): give more of the id")


# -- status from the hosts ---------------------------------------------------------------


def judge(states: Mapping[int, Mapping[str, Any] | None]) -> tuple[str, str]:
    """A run's status from its nodes' states (None: the host keeps nothing of it): the hub's
    (node 0's) word first, else the worst of the nodes' own."""
    errors = [s["error"] for s in states.values() if s and "error" in s]
    known = [s for s in states.values() if s and "error" not in s]
    if any(s.get("alive") for s in known):
        waiting = [name for s in known for name in s.get("waiting") or ()]
        if waiting:  # node 0's hub: a lost (or bad) node's place for a spare: a launcher's to do
            told = (states.get(0) or {}).get("bad_hosts")
            bad = {str(p[0]) for p in told.values() if isinstance(p, list)} if told else set()
            lost = ", ".join(f"{name} {'bad' if name in bad else 'lost'}" for name in waiting)
            return "running", f"{lost}: waiting for `ddptui attach` to put a spare in its place"
        return "running", ""
    if errors and not known:
        return "lost", f"hosts unreachable: {errors[0]}"
    hub = states.get(0) or {}
    if hub.get("run_status") in STATUSES:  # node 0's hub said how the run ended: its view
        return str(hub["run_status"]), str(hub.get("run_reason") or "")
    got = {s.get("status") for s in known}
    for status in ("failed", "lost", "stopped"):
        if status in got:
            reason = next((s.get("reason") for s in known if s.get("status") == status), "")
            return status, str(reason or "")
    if got == {"succeeded"} and len(known) == len(states):
        return "succeeded", ""
    return "lost", "its supervisors are gone without a word"


def training(r: RunRecord) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The run's training as last known, and its trackers' links: its summary's, else node 0's
    host's word (a run going on, detached too), else series.json (its launcher's last)."""
    s = r.summary or {}
    if s.get("progress") or s.get("links"):
        return s.get("progress"), list(s.get("links") or [])
    hub = r.states.get(0) or {}
    series = hub.get("series") if isinstance(hub.get("series"), dict) else None
    if series is None:
        series = read_series(r.dir)
    return (series.get("last"), list(series.get("links") or [])) if series else (None, [])


def checkpoint(r: RunRecord) -> dict[str, Any] | None:
    """job.checkpoint's newest {path, step, at}: the summary's, else node 0's word (a run going
    on, detached too)."""
    if r.summary is not None:
        found = r.summary.get("checkpoint")
    else:
        found = (r.states.get(0) or {}).get("checkpoint")
    return found if isinstance(found, dict) else None


def read_series(run_dir: Path) -> dict[str, Any] | None:
    """The run dir's series.json (remote/run/progress.py), or None."""
    try:
        found = json.loads((run_dir / SERIES).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def age(seconds: float) -> str:
    """3 d 4 h, 2 h 5 m, 4 m 10 s, 12 s."""
    s = int(seconds)
    for unit, size, sub, subsize in (("d", 86400, "h", 3600), ("h", 3600, "m", 60)):
        if s >= size:
            return f"{s // size} {unit} {(s % size) // subsize} {sub}"
    return f"{s // 60} m {s % 60} s" if s >= 60 else f"{s} s"
