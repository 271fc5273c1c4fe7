"""`ddptui --headless check`: the hosts' facts as a table (one row per host), then the findings;
or the same facts as JSON with `--json`. Renders events; knows nothing of how they were found.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any, TextIO

from remote.checks import gpu_summary, is_busy
from remote.events import ChecksDone, DeepChecked, Finding, HostChecked

NOT_A_TERMINAL_WIDTH = 400  # logs and CI: a row stays on one line, greppable
LEVEL_TAGS = {"failure": "FAIL", "warning": "warn", "ok": "ok"}
SAID_WHEN_OK = {"gpu-visible"}  # what `nproc_per_node: auto` will start, and why
COLUMNS = (
    *("host", "login", "hostname", "os", "python", "torch"),
    *("GPUs", "driver / CUDA", "network", "disk free", "code", "result"),
)


def finding_line(f: Finding) -> str:
    """`FAIL node3 gpu: nvidia-smi failed ...`: one finding on one line."""
    where = f"{f.host} " if f.host else ""
    return f"{LEVEL_TAGS[f.level]} {where}{f.check}: {f.message}"


def print_table(hosts: Sequence[HostChecked], done: ChecksDone, out: TextIO) -> None:
    from rich import box  # here: a launch, which prints no table, need not pay for rich
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for name in COLUMNS:
        table.add_column(name, overflow="fold")
    for h in sorted(hosts, key=lambda h: h.node_rank):
        table.add_row(*row(h))
    width = None if out.isatty() else NOT_A_TERMINAL_WIDTH
    Console(file=out, width=width, highlight=False).print(table)
    shown = [f for f in done.findings if f.level != "ok" or f.check in SAID_WHEN_OK]
    for f in shown:
        out.write(finding_line(f) + "\n")
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


def print_deep(deep: DeepChecked, out: TextIO) -> None:
    """The deep check's findings, then its verdict in a line (with the all-reduce's figure)."""
    for f in deep.findings:
        out.write(finding_line(f) + "\n")
    failures = sum(f.level == "failure" for f in deep.findings)
    verdict = "passed" if deep.ok else f"failed ({failures} failures)"
    out.write(f"deep check {verdict} in {deep.seconds:.1f} s\n")
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
