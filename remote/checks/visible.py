"""Which GPUs a CUDA job on a host will see: `nvidia-smi -L` read with CUDA_VISIBLE_DEVICES, the
way CUDA reads it. Pure. `nproc_per_node: auto` starts one process per visible device.

CUDA's rules (the CUDA programming guide's environment variables; the MIG user guide's "CUDA
device enumeration"; torch.cuda's own parser, `_parse_visible_devices`, follows the same):
- unset: every GPU; a GPU in MIG mode shows its MIG devices instead of itself;
- a comma-separated list of indices, `GPU-` UUIDs or `MIG-` UUIDs (the first entry says which;
  a unique prefix of a UUID will do); an entry that names nothing ends the list there; a device
  named twice leaves none; an empty value leaves none;
- a CUDA process enumerates one MIG device at most, and no whole GPU once it has a MIG device.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

VAR = "CUDA_VISIBLE_DEVICES"
_GPU = re.compile(r"^GPU (\d+): .*\(UUID: (GPU-[^)\s]+)\)")
_MIG = re.compile(r"^\s+MIG .*Device\s+\d+: \(UUID: (MIG-[^)\s]+)\)")


@dataclass(frozen=True)
class Gpu:
    index: int  # nvidia-smi's
    uuid: str
    migs: tuple[str, ...] = ()  # its MIG devices' UUIDs, in MIG mode


@dataclass(frozen=True)
class Visible:
    count: int  # devices the job sees: processes for `auto`
    message: str | None  # for the check; None when the job sees every GPU, nothing more to say
    dropped: bool = False  # CUDA ignores some of what the variable names


def parse_list(text: str) -> list[Gpu]:
    """`nvidia-smi -L`: each GPU, with the MIG devices listed under it."""
    gpus: list[Gpu] = []
    for line in text.splitlines():
        if m := _GPU.match(line):
            gpus.append(Gpu(int(m[1]), m[2]))
        elif (m := _MIG.match(line)) and gpus:
            last = gpus[-1]
            gpus[-1] = Gpu(last.index, last.uuid, (*last.migs, m[1]))
    return gpus


def devices(gpus: Sequence[Gpu]) -> list[str]:
    """CUDA's devices before the variable: whole GPUs, and MIG devices for GPUs in MIG mode."""
    return [d for g in gpus for d in (g.migs or (g.uuid,))]


def visible(gpus: Sequence[Gpu], value: str | None, source: str = "") -> Visible:
    """What a job sees with CUDA_VISIBLE_DEVICES=value (None: unset); source says where the
    value came from, for the message (`the inventory's env`)."""
    every = devices(gpus)
    chosen, stop = (every, None) if value is None else _select(gpus, every, value)
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


def _select(gpus: Sequence[Gpu], every: list[str], value: str) -> tuple[list[str], str | None]:
    """The devices the entries name, in order; and the entry CUDA stopped at, or `twice`."""
    if not value.strip():
        return [], None
    entries = [e.strip() for e in value.split(",")]
    kind = next((k for k in ("GPU-", "MIG-") if entries[0].startswith(k)), "")
    chosen: list[str] = []
    for entry in entries:
        named = _named(gpus, every, entry, kind)
        if named is None:
            return chosen, repr(entry)
        if set(named) & set(chosen):
            return [], "twice"
        chosen += named
    return chosen, None


def _named(gpus: Sequence[Gpu], every: list[str], entry: str, kind: str) -> list[str] | None:
    """The devices one entry names; None when it names none (or, a prefix, more than one)."""
    if not kind:
        digits = re.match(r"\+?(\d+)", entry)  # read as strtoul reads it: `1gpu` is 1
        index = int(digits[1]) if digits else -1
        return [every[index]] if 0 <= index < len(every) else None
    if not entry.startswith(kind):
        return None
    if kind == "MIG-":
        found = [[d] for d in every if d.startswith(entry)]
    else:  # a GPU in MIG mode stands for its MIG devices
        found = [list(g.migs or (g.uuid,)) for g in gpus if g.uuid.startswith(entry)]
    return found[0] if len(found) == 1 else None
