"""GPU figures over the last minutes, per host and per GPU, and how a row draws them as bars.

Samples arrive every few seconds (remote/agents/monitor.py); each host keeps the last HISTORY of
them. The hosts table draws its bars on a fixed scale (0-100 %, 0-total memory) so rows compare at a
glance; each bar is the busiest sample of its slice of time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from ddptui.remote.events import Gpu, HostLeases

HISTORY = 150  # samples kept: 5 minutes at one every 2 s
BARS = "▁▂▃▄▅▆▇█"


@dataclass
class GpuHistory:
    """One host's figures: the mean of its GPUs, and each GPU's own."""

    util: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))  # mean %
    memory: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))  # used, 0-1
    per_gpu: dict[int, tuple[deque[float], deque[float]]] = field(default_factory=dict)
    leases: HostLeases | None = None  # its GPUs' leases, as its monitor last said

    def add(self, gpus: Sequence[Gpu]) -> None:
        if not gpus:
            return
        utils = [g.utilization_pct or 0 for g in gpus]
        self.util.append(sum(utils) / len(utils))
        total = sum(g.memory_total_mib for g in gpus)
        self.memory.append(sum(g.memory_used_mib for g in gpus) / total if total else 0.0)
        for g in gpus:
            util, mem = self.per_gpu.setdefault(
                g.index, (deque(maxlen=HISTORY), deque(maxlen=HISTORY))
            )
            util.append(float(g.utilization_pct or 0))
            mem.append(float(g.memory_used_mib))


def bars(values: Sequence[float], top: float, width: int) -> str:
    """`▁▃█▅`: `width` bars on a fixed scale 0..top, the busiest sample of each slice; the
    newest at the right. Fewer samples than bars: one bar each, padded left with spaces."""
    if not values or top <= 0:
        return " " * width
    slices = _slices(list(values), width)
    out = "".join(BARS[min(len(BARS) - 1, int(max(s) / top * len(BARS)))] for s in slices)
    return out.rjust(width)


def _slices(values: list[float], width: int) -> list[list[float]]:
    if len(values) <= width:
        return [[v] for v in values]
    step = len(values) / width
    return [values[int(i * step) : int((i + 1) * step)] or [values[-1]] for i in range(width)]
