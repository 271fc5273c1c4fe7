"""`ddptui --headless stacks RUN [--json] [--native]`: every rank's Python stack of a running
run, on every host at once, grouped (odd ones out first), printed and saved in its run dir.

RUN is a run directory, a run id, or a unique prefix of one (under the default runs dir). The
hosts are the run's saved inventory when its directory holds one, else `-i`.
TODO: remote/runs.py's resolve() (issue 8) replaces `resolve` and the inventory lookup here.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import TextIO

from remote import inventory
from remote import stacks as dumper
from remote.run import EXIT_FAILED, EXIT_OK, EXIT_USAGE, default_run_dir
from remote.transport import for_host

SAVED_INVENTORY = "inventory.yaml"  # where issue 8 keeps a run's inventory in its directory


class RunNotFound(Exception):
    """RUN names no run, or more than one: one line, exit 2."""


def resolve(spec: str) -> tuple[Path, str]:
    """(run dir, run id) of RUN."""
    path = Path(spec).expanduser()
    if path.is_dir():
        return path, run_id_of(path)
    root = default_run_dir("-").parent
    found = sorted(p for p in root.glob(f"{spec}*") if p.is_dir()) if root.is_dir() else []
    if len(found) != 1:
        what = "no run" if not found else f"{len(found)} runs"
        raise RunNotFound(f"{what} matching {spec!r} (a run directory, a run id or its prefix)")
    return found[0], run_id_of(found[0])


def run_id_of(run_dir: Path) -> str:
    """The run id its events say (the first line is RunStarted), else the directory's name."""
    try:
        with open(run_dir / "events.jsonl", encoding="utf-8") as f:
            first = json.loads(f.readline() or "{}")
    except (OSError, ValueError):
        first = {}
    if first.get("event") == "RunStarted":
        return str(first["run_id"])
    return run_dir.name


async def stacks(
    spec: str, inventory_path: Path, *, as_json: bool, native: bool, out: TextIO | None = None
) -> int:
    """Dump, print (text or JSON), save; exit 0 when every host gave its ranks' stacks."""
    out = out or sys.stdout
    try:
        run_dir, run_id = resolve(spec)
        saved = run_dir / SAVED_INVENTORY
        inv = inventory.load(saved if saved.exists() else inventory_path)
    except (RunNotFound, inventory.InventoryError) as exc:
        print(f"ddptui: {exc}", file=sys.stderr)
        return EXIT_USAGE
    transports = [for_host(h) for h in inv.hosts]

    def show(report: dumper.Report) -> None:  # the stacks at once; the analyser takes seconds
        out.write(report.text(flight=False) + "\n")
        out.flush()

    try:
        report, path = await dumper.capture(
            transports, run_id, run_dir, native=native, flight=inv.job.nccl.flight_recorder,
            connect=True, dumped=None if as_json else show,
        )  # fmt: skip
    finally:
        await asyncio.gather(*(t.close() for t in transports), return_exceptions=True)
    if as_json:
        out.write(json.dumps(report.as_json(), indent=2) + "\n")
    elif report.flight is not None:
        out.write("\n".join(report.flight.lines()) + "\n")
    out.flush()
    print(f"ddptui: saved to {path}", file=sys.stderr)
    complete = report.groups and not report.problems and all(g.error is None for g in report.groups)
    return EXIT_OK if complete else EXIT_FAILED
