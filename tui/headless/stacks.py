"""`ddptui --headless stacks RUN [--json] [--native]`: every rank's Python stack of a running
run, on every host at once, grouped (odd ones out first), printed and saved in its run dir.

RUN is a run directory, a run id, or a unique prefix of one (remote/runs.py); its hosts are the
inventory saved with it. The stacks are printed as soon as they are in; with the flight
recorder, its traces and the analyser's verdict follow (they take seconds).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import TextIO

from remote import runs
from remote import stacks as dumper
from remote.exits import EXIT_FAILED, EXIT_OK
from remote.transport import for_host


async def stacks(spec: str, *, as_json: bool, native: bool, out: TextIO | None = None) -> int:
    """Dump, print (text or JSON), save; exit 0 when every host gave its ranks' stacks.
    Raises runs.RunError when RUN names no run (or several)."""
    out = out or sys.stdout
    record = runs.resolve(spec)
    inv = record.inventory()
    transports = [for_host(h) for h in inv.hosts]

    def show(report: dumper.Report) -> None:  # the stacks at once; the analyser takes seconds
        out.write(report.text(flight=False) + "\n")
        out.flush()

    try:
        report, path = await dumper.capture(
            transports, record.run_id, record.dir, native=native,
            flight=inv.job.nccl.flight_recorder, connect=True, dumped=None if as_json else show,
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
