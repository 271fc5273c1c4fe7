"""`ddptui --headless stacks RUN [--json] [--native]`: every rank's Python stack of a running
run, on every host at once, grouped (odd ones out first), printed and saved in its run dir.

RUN is a run directory, a run id, or a unique prefix of one (remote/store/runs.py); its hosts are
the inventory saved with it. The stacks are printed as soon as they are in; with the flight
recorder, its traces and the analyser's verdict follow (they take seconds). A host that gave
no stacks is named with why; the same reason on many hosts is one line (`--verbose`: a line
each). Frames and reasons are made safe (remote/host/safetext.py): they come from the ranks.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import TextIO

from ddptui.remote.agents.fleet import fleet_for
from ddptui.remote.exits import EXIT_FAILED, EXIT_OK
from ddptui.remote.host.safetext import clean
from ddptui.remote.stalls import stacks
from ddptui.remote.store import runs

from ..text import Fold


async def print_stacks(
    spec: str,
    *,
    as_json: bool,
    native: bool,
    out: TextIO | None = None,
    verbose: bool = False,
) -> int:
    """Dump, print (text or JSON), save; exit 0 when every host gave its ranks' stacks.
    Raises runs.RunError when RUN names no run (or several)."""
    out = out or sys.stdout
    record = runs.resolve(spec)
    inv = record.inventory()
    fleet = fleet_for(inv)  # one login per host

    def show(report: stacks.Report) -> None:  # the stacks at once; the analyser takes seconds
        out.write(clean(text(report, {h.name: h.host for h in inv.hosts}, verbose)) + "\n")
        out.flush()

    try:
        report, path = await stacks.capture(
            fleet, record.run_id, record.dir, native=native,
            flight_recorder=inv.job.nccl.flight_recorder, dumped=None if as_json else show,
        )  # fmt: skip
    finally:
        await fleet.close()
    if as_json:
        out.write(json.dumps(report.as_json(), indent=2) + "\n")
    elif report.flight is not None:
        out.write(clean("\n".join(report.flight.lines())) + "\n")
    out.flush()
    print(f"ddptui: saved to {path}", file=sys.stderr)
    complete = report.groups and not report.problems and all(g.error is None for g in report.groups)
    return EXIT_OK if complete else EXIT_FAILED


def text(report: stacks.Report, addresses: dict[str, str], verbose: bool) -> str:
    """The groups, then each host that gave nothing: once for all the hosts that gave the
    same reason, unless `verbose`."""
    if verbose or not report.problems:
        return report.text(flight_recorder=False)
    same = Fold(addresses)
    for host, why in report.problems.items():
        same.add(host, why)
    groups = (
        dataclasses.replace(report, problems={}).text(flight_recorder=False)
        if report.groups
        else ""
    )
    lines = [f"{hosts}: {why}" for _, hosts, why in same.take()]
    return "\n".join([groups, *lines] if groups else lines)
