"""The deep check: the fabric measured before a long run, and the one slow host named.

`ddptui check --deep`, `launch --deep` and the dashboard's `D`: after the checks, ddptui's own
fabric test (remote/host/fabric.py: an all-reduce across every rank, each host's links in rounds
of disjoint pairs, each GPU's matmul and copy, dcgmi where installed) runs as a job of its own
on every rank the job would have: its hosts, nproc_per_node, interface settings, master and
interpreter (gloo on CPU hosts, NCCL where the job would use it). Each host's supervisor starts
and sweeps it like a job (its tags, the subreaper, a container where the job has one), so a
Ctrl-C, or the time bound running out, leaves nothing. Rank 0's progress lines are said as
they come; its result line is judged by remote/checks/fabric.py. The job is launched and
followed like any run, by remote/run/checkup.py's deep_check(); here are its inventory, what is
read of its lines, and its verdict.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from ddptui.remote.checks import fabric
from ddptui.remote.events import (
    DeepChecked,
    DeepProgress,
    Event,
    Finding,
    LogBatch,
    Notice,
    RunFinished,
)
from ddptui.remote.host import protocol
from ddptui.remote.host.fabric import MARK, PROGRESS
from ddptui.remote.inventory import Inventory

SECONDS = 60.0  # --deep-seconds: the whole deep check, start to verdict
STARTUP_S = 15.0  # of it, what torchrun and `import torch` take before the worker's clock
ENDING_S = 10.0  # and what the end takes: the result gathered, every node stopped

Emit = Callable[[Event], None]


def deep_inventory(inv: Inventory, seconds: float) -> Inventory:
    """The job's inventory with the fabric test as its job: the same hosts and settings."""
    budget = max(5.0, seconds - STARTUP_S - ENDING_S)
    job = inv.job.model_copy(
        update={
            "script": f"{protocol.CODE}/ddph/fabric.py",
            "args": ["--seconds", f"{budget:g}"],
            "launcher": "torchrun",
            "rdzv_backend": "static",
            "max_restarts": 0,
            "restarts": 0,  # a test: once, and no word to job.notify's command
            "notify": None,
            "hang_after": None,
            "sync": None,
        }
    )
    return dataclasses.replace(inv, job=job)


class Collector:
    """Rank 0's progress lines said (DeepProgress); its result line kept (bounded)."""

    def __init__(self, emit: Emit) -> None:
        self.emit = emit
        self.result: str | None = None
        self.said: list[str] = []  # the last lines of rank 0's stderr, if it fails

    def __call__(self, event: Event) -> None:
        if isinstance(event, LogBatch):
            for rank, text in event.lines:
                if rank != 0:
                    continue
                if MARK in text and len(text) <= fabric.MAX_LINE:
                    self.result = text
                elif text.startswith(PROGRESS):
                    self.emit(DeepProgress(text[len(PROGRESS) :][:200]))
                elif event.stream == "stderr":
                    self.said = [*self.said[-4:], text[:300]]
        elif isinstance(event, Notice) and event.level == "error":
            self.emit(event)


def verdict(
    collect: Collector, fin: RunFinished | None, names: list[str], seconds: float, t0: float
) -> DeepChecked:
    """The deep check's verdict on its run's end (`fin`; None: out of time), started at t0."""
    findings, figures = judge(collect, fin, names, seconds)
    ok = not any(f.level == "failure" for f in findings)
    return DeepChecked(ok, findings, figures, round(time.monotonic() - t0, 3))


def judge(
    collect: Collector, fin: RunFinished | None, names: list[str], seconds: float
) -> tuple[tuple[Finding, ...], dict[str, object] | None]:
    """The findings and figures of a result line; a failure naming why there is none."""
    if collect.result is None:
        if fin is None:
            why = f"the deep check took longer than {seconds:g} s (--deep-seconds)"
        elif fin.failure is not None:
            where = f"rank {fin.failure.rank} on " if fin.failure.rank is not None else ""
            why = f"the fabric test failed: {where}{fin.failure.host}: {fin.failure.message}"
        else:
            why = f"the fabric test ended {fin.status} without a result"
        return (fabric.failed(why),), None
    try:
        report = fabric.parse(collect.result)
    except fabric.BadResult as exc:
        return (fabric.failed(f"its result line could not be read: {exc}"),), None
    return fabric.findings(report, names), fabric.figures(report, names)
