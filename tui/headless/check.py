"""`ddptui --headless check`: the hosts' facts as a table (one row per host), then the findings;
or the same facts as JSON with `--json`. Renders events; knows nothing of how they were found.
Exit 1 when a check failed, 3 when a host could not be reached (as launch).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from ddptui.remote.checks.judge import gpu_summary, is_busy
from ddptui.remote.events import (
    ChecksDone,
    DeepChecked,
    DeepProgress,
    Event,
    HostChecked,
    Notice,
)
from ddptui.remote.exits import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE
from ddptui.remote.host.safetext import clean
from ddptui.remote.inventory import Inventory
from ddptui.remote.run import checkup

from .console import isatty, silence
from .findings import deep_lines, finding_line, finding_lines
from .printer import Printer

NOT_A_TERMINAL_WIDTH = 400  # logs and CI: a row stays on one line, greppable
SAID_WHEN_OK = {"gpu-visible"}  # what `nproc_per_node: auto` will start, and why
COLUMNS = (
    *("host", "login", "hostname", "os", "python", "torch"),
    *("GPUs", "driver / CUDA", "network", "disk free", "code", "result"),
)


def print_table(
    hosts: Sequence[HostChecked],
    done: ChecksDone,
    out: TextIO,
    *,
    addresses: Mapping[str, str] | None = None,
    verbose: bool = False,
) -> None:
    """The table, each finding once for all its hosts (`verbose`: once per host), the verdict.
    What hosts said is text, never markup nor a terminal's command (safetext.py)."""
    from rich import box  # here: a launch, which prints no table, need not pay for rich
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    terminal = isatty(out)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for name in COLUMNS:
        table.add_column(name, overflow="fold")
    for h in sorted(hosts, key=lambda h: h.node_rank):
        table.add_row(*(Text(clean(cell)) for cell in row(h)))
    width = None if terminal else NOT_A_TERMINAL_WIDTH
    Console(file=out, width=width, highlight=False).print(table)
    shown = [f for f in done.findings if f.level != "ok" or f.check in SAID_WHEN_OK]
    if verbose:
        lines = [finding_line(f.level, f.host or "", f.check, f.message) for f in shown]
    else:
        lines = finding_lines(shown, addresses)
    for line in lines:
        out.write(clean(line) + "\n")
    out.write(summary(hosts, done) + "\n")
    out.flush()


def row(h: HostChecked) -> tuple[str, ...]:
    f = h.facts
    if not f.get("reachable", True):
        return (h.host, "unreachable", *[""] * (len(COLUMNS) - 3), _result(h))
    took = f.get("connect_s")
    login = "local" if took in (None, 0) else f"{took:.2f} s"
    torch = f.get("torch") or "-"
    if f.get("torch_cuda"):
        torch += f" (CUDA {f['torch_cuda']}{'' if f.get('cuda_available') else ', unusable'})"
    net = f.get("ifname") or "no route"
    if f.get("port") is not None:
        net += f", port {f['port']} {'free' if f.get('port_free') else 'in use'}"
    disk = f.get("disk")
    return (
        h.host,
        login,
        f.get("hostname") or "-",
        f.get("os") or "-",
        f.get("python") or "-",
        torch,
        _gpus(h),
        " / ".join(v for v in (f.get("driver"), f.get("cuda")) if v) or "-",
        net,
        "-" if disk is None else f"{disk:g} GiB",
        f.get("code") or "-",
        _result(h),
    )


def _gpus(h: HostChecked) -> str:
    state = h.facts.get("nvidia_smi")
    if state == "missing":
        return "none (CPU host)"
    if state == "error" or not h.gpus:
        return "nvidia-smi failed" if state == "error" else "-"
    busy = sum(1 for g in h.gpus if is_busy(g))
    notes = [f"{busy} busy"] if busy else []
    if h.facts.get("visible_note"):  # CUDA_VISIBLE_DEVICES or MIG: the job sees fewer
        notes.append(f"{h.facts.get('visible_gpus')} visible")
    return gpu_summary(h.gpus) + (f" ({', '.join(notes)})" if notes else "")


def _result(h: HostChecked) -> str:
    levels = [f.level for f in h.findings]
    if "failure" in levels:
        return "FAILED"
    warnings = levels.count("warning")
    return f"{warnings} warning{'s' * (warnings != 1)}" if warnings else "ok"


def summary(hosts: Sequence[HostChecked], done: ChecksDone) -> str:
    failed = len({f.host for f in done.findings if f.level == "failure"})
    warnings = sum(1 for f in done.findings if f.level == "warning")
    verdict = "checks passed" if done.ok else f"checks failed on {failed}"
    return f"{len(hosts)} hosts: {verdict}, {warnings} warning{'s' * (warnings != 1)}"


def print_deep(
    deep: DeepChecked, out: TextIO, *, addresses: Mapping[str, str] | None = None
) -> None:
    for line in deep_lines(deep, addresses):
        out.write(clean(line) + "\n")
    out.flush()


def as_json(
    hosts: Sequence[HostChecked], done: ChecksDone, deep: DeepChecked | None = None
) -> dict[str, Any]:
    """The same facts, machine-readable: every host (facts, GPUs, findings) and the verdict;
    with the deep check, its findings and the figures per size and per host."""
    out: dict[str, Any] = {
        "ok": done.ok and (deep is None or deep.ok),
        "hosts": [dataclasses.asdict(h) for h in sorted(hosts, key=lambda h: h.node_rank)],
        "findings": [dataclasses.asdict(f) for f in done.findings],
    }
    if deep is not None:
        out["deep"] = {
            "ok": deep.ok,
            "seconds": deep.seconds,
            "findings": [dataclasses.asdict(f) for f in deep.findings],
            "figures": deep.figures,
        }
    return out


def print_json(
    hosts: Sequence[HostChecked], done: ChecksDone, out: TextIO, deep: DeepChecked | None = None
) -> None:
    out.write(json.dumps(as_json(hosts, done, deep), indent=2) + "\n")
    out.flush()


async def check(
    inv: Inventory,
    as_json: bool = False,
    out: TextIO | None = None,
    *,
    deep: float | None = None,
    runs_root: Path | None = None,
    verbose: bool = False,
) -> int:
    """`ddptui --headless check`: a table (or JSON) of every host; exit 1 when a check failed,
    3 when a host could not be reached (as launch). deep: the deep check too, in so many
    seconds at most, after the checks pass (its progress on stderr)."""
    hosts: list[HostChecked] = []
    printer = Printer(hosts=inv.hosts)

    def collect(event: Event) -> None:
        if isinstance(event, HostChecked):
            hosts.append(event)
        elif isinstance(event, DeepChecked):
            deeps.append(event)
        elif isinstance(event, Notice | DeepProgress) and deep is not None:
            printer(event)

    deeps: list[DeepChecked] = []
    done = await checkup.check(inv, collect, deep=deep, runs_dir=runs_root)
    deep_done = deeps[-1] if deeps else None
    if deep is not None and not done.ok:
        printer.say("deep check skipped: the checks failed")
    out = out or sys.stdout
    addresses = {h.name: h.host for h in inv.hosts}
    try:
        if as_json:
            print_json(hosts, done, out, deep_done)
        else:
            print_table(hosts, done, out, addresses=addresses, verbose=verbose)
            if deep_done is not None:
                print_deep(deep_done, out, addresses=addresses)
    except OSError:  # `| head`: the verdict stands
        silence(out)
    if any(h.facts.get("reachable") is False for h in hosts):
        return EXIT_UNREACHABLE
    return EXIT_OK if done.ok and (deep_done is None or deep_done.ok) else EXIT_FAILED
