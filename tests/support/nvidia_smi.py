"""The recorded nvidia-smi machines (tests/data/nvidia-smi) and the stand-in that serves them."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

DATA = Path(__file__).parents[1] / "data" / "nvidia-smi"
H100_BUSY, A100, DRIVER_ERROR = "h100x8-busy", "a100x4", "driver-error"
A100_MIG = "a100x2-mig"  # written from the documented formats, not captured (see docs/checks.md)
# captured on a lent H200 by scripts/gpu_check.sh (idle; one process holding 24 GiB)
H200, H200_BUSY = "h200x1", "h200x1-busy"


def stand_in(machine: str) -> str:
    """The text of an executable `nvidia-smi` that answers as `machine` did."""
    head = f"#!/bin/sh\ndata={shlex.quote(str(DATA / machine))}\n"
    return head + (DATA / "stand-in.sh").read_text()


def install(bin_dir: Path, machine: str) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "nvidia-smi"
    path.write_text(stand_in(machine))
    path.chmod(0o755)
    return path


def run(machine: str, args: tuple[str, ...]) -> dict[str, Any]:
    """One query, answered by the stand-in, as the host probe reports it."""
    argv = ["sh", "-c", stand_in(machine), "nvidia-smi", *args]
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    return {"code": res.returncode, "out": res.stdout, "err": res.stderr}
