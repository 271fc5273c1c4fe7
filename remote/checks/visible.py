"""Which GPUs a CUDA job on a host will see: `nvidia-smi -L` read with CUDA_VISIBLE_DEVICES, the
way CUDA reads it. Pure. `nproc_per_node: auto` starts one process per visible device.

CUDA's rules are remote/host/gpuinfo.py's (the host's leases read the variable the same way);
here, what the check says of them. A CUDA process enumerates one MIG device at most, and no
whole GPU once it has a MIG device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ddptui.remote.host import gpuinfo

VAR = gpuinfo.VAR
Gpu = gpuinfo.Gpu  # index, uuid, migs (MIG devices' UUIDs, in MIG mode), name
parse_list = gpuinfo.parse_list  # `nvidia-smi -L`: each GPU, with its MIG devices
devices = gpuinfo.devices  # CUDA's devices before the variable


@dataclass(frozen=True)
class Visible:
    count: int  # devices the job sees: processes for `auto`
    message: str | None  # for the check; None when the job sees every GPU, nothing more to say
    dropped: bool = False  # CUDA ignores some of what the variable names


def visible(gpus: Sequence[Gpu], value: str | None, source: str = "") -> Visible:
    """What a job sees with CUDA_VISIBLE_DEVICES=value (None: unset); source says where the
    value came from, for the message (`the inventory's env`)."""
    every = devices(gpus)
    chosen, stop = gpuinfo.select(gpus, value)
    notes = [] if value is None else [_setting(value, source)]
    if stop == "twice":
        notes.append("a device named twice leaves none")
    elif stop:
        notes.append(f"CUDA ignores {stop} and what follows: no such device here")
    migs = [d for d in chosen if d.startswith("MIG-")]
    if migs and len(chosen) > 1:  # one MIG device per process, and then no whole GPU
        notes.append(f"a CUDA process sees one MIG device, {migs[0]}")
    chosen = migs[:1] or chosen
    if not notes:
        return Visible(len(every), None)
    unit = "GPUs" if len(every) == len(gpus) else "GPUs and MIG devices"
    seen = f"{len(chosen)} of {len(every)} {unit}" if chosen else "no GPU"
    return Visible(len(chosen), f"{seen} visible ({'; '.join(notes)})", stop is not None)


def _setting(value: str, source: str) -> str:
    said = f"{VAR}={value}" if value.strip() else f"{VAR} is empty"
    return said + (f" in {source}" if source else "")
