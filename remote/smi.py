"""What nvidia-smi says: the queries ddptui runs on a host and their parser. Pure.

The checks before launch (remote/checks/probe.py) and the live GPU figures
(remote/agents/monitor.py) read the same queries the same way.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ddptui.remote.events import Gpu, GpuProcess
from ddptui.remote.host import gpuinfo
from ddptui.remote.host.protocol import SMI_CSV as CSV  # as the hosts read their GPUs

GPU_FIELDS = (
    *gpuinfo.QUERY_HEAD,  # index, uuid, name: the host's live leases read these (monitor.py)
    "memory.total",
    "memory.used",
    "utilization.gpu",
    "temperature.gpu",
    "driver_version",
)
APP_FIELDS = ("gpu_uuid", "pid", "used_memory", "process_name")
GPU_QUERY = ("nvidia-smi", "--query-gpu=" + ",".join(GPU_FIELDS), CSV)
APPS_QUERY = ("nvidia-smi", *gpuinfo.APPS)  # the host's leases ask the same (gpuinfo.py)
# What the host runs, by name; plain `nvidia-smi` is the only place naming the driver's CUDA.
# `-L`: the MIG devices, and the UUIDs CUDA_VISIBLE_DEVICES may name (remote/checks/visible.py).
SMI_RUNS = {"gpus": GPU_QUERY[1:], "apps": APPS_QUERY[1:], "summary": (), "list": gpuinfo.LIST}


@dataclass(frozen=True)
class GpuRow:
    """One line of the GPU query: the Gpu, plus what maps processes to it and the driver."""

    gpu: Gpu
    uuid: str | None
    driver: str | None


def smi_error(run: dict[str, Any]) -> str | None:
    """nvidia-smi's own words when it failed (a driver not loaded exits 9), else None."""
    if run.get("code") == 0:
        return None
    text = " ".join(
        line.strip()
        for line in (run.get("out", "") + "\n" + run.get("err", "")).splitlines()
        if line.strip()
    )
    return f"nvidia-smi failed (exit {run.get('code')}): {text or 'no message'}"


def _value(field: str) -> str | None:
    """A CSV field; `[N/A]`, `[Not Supported]`, `[Unknown Error]` and the like mean unknown."""
    field = field.strip()
    return None if not field or (field.startswith("[") and field.endswith("]")) else field


def _int(field: str) -> int | None:
    value = _value(field)
    try:
        return None if value is None else round(float(value))
    except ValueError:
        return None


def parse_gpus(text: str) -> list[GpuRow]:
    """Rows of `--query-gpu=<GPU_FIELDS> --format=csv,noheader,nounits`."""
    rows: list[GpuRow] = []
    for line in text.splitlines():
        fields = line.split(", ")
        if len(fields) != len(GPU_FIELDS):
            continue  # not a data line (a warning nvidia-smi printed first, say)
        index, uuid, name, total, used, util, temp, driver = fields
        number = _int(index)
        gpu = Gpu(
            index=len(rows) if number is None else number,
            name=_value(name) or "unknown GPU",
            memory_total_mib=_int(total) or 0,
            memory_used_mib=_int(used) or 0,
            utilization_pct=_int(util),
            temperature_c=_int(temp),
        )
        rows.append(GpuRow(gpu, _value(uuid), _value(driver)))
    return rows


def parse_apps(text: str) -> list[tuple[str, GpuProcess]]:
    """(gpu uuid, process) pairs of `--query-compute-apps=<APP_FIELDS>`; no lines, no apps."""
    return [
        (uuid, GpuProcess(pid, used or 0, name))
        for uuid, pid, used, name in gpuinfo.parse_apps(text)
    ]


def attach_processes(rows: Sequence[GpuRow], apps_text: str) -> tuple[Gpu, ...]:
    by_uuid: dict[str, list[GpuProcess]] = {}
    for uuid, proc in parse_apps(apps_text):
        by_uuid.setdefault(uuid, []).append(proc)
    return tuple(
        dataclasses.replace(r.gpu, processes=tuple(by_uuid.get(r.uuid or "", ()))) for r in rows
    )


_CUDA = re.compile(r"CUDA Version\s*:\s*([0-9][0-9.]*)")


def cuda_version(summary: str) -> str | None:
    """The CUDA version the driver supports, from plain `nvidia-smi` (or `-q`) output."""
    m = _CUDA.search(summary)
    return m[1] if m else None
