"""A host's GPUs as nvidia-smi lists them, and the devices CUDA_VISIBLE_DEVICES names, both ends.

The launcher's checks (remote/checks/visible.py) and the host's leases (remote/host/lease.py)
read `nvidia-smi -L` and the variable the same way, here: python3 >= 3.8, standard library only.

CUDA's rules (the CUDA programming guide's environment variables; the MIG user guide's "CUDA
device enumeration"; torch.cuda's own parser, `_parse_visible_devices`, follows the same):
- unset: every GPU; a GPU in MIG mode shows its MIG devices instead of itself;
- a comma-separated list of indices, `GPU-` UUIDs or `MIG-` UUIDs (the first entry says which;
  a unique prefix of a UUID will do); an entry that names nothing ends the list there; a device
  named twice leaves none; an empty value leaves none.
"""

from __future__ import annotations

import re
from collections import namedtuple

TYPE_CHECKING = False  # typing costs import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Sequence

VAR = "CUDA_VISIBLE_DEVICES"
LIST = ("-L",)  # nvidia-smi's list: index, model and UUID of each GPU, MIG devices under it
APP_FIELDS = ("gpu_uuid", "pid", "used_memory", "process_name")
QUERY_HEAD = ("index", "uuid", "name")  # the first fields of the launcher's --query-gpu
APPS = ("--query-compute-apps=" + ",".join(APP_FIELDS), "--format=csv,noheader,nounits")

_GPU = re.compile(r"^GPU (\d+): (.*?) \(UUID: (GPU-[^)\s]+)\)")
_MIG = re.compile(r"^\s+MIG .*Device\s+\d+: \(UUID: (MIG-[^)\s]+)\)")

# One GPU of `nvidia-smi -L`: its index, its UUID, its MIG devices' UUIDs (in MIG mode), model.
Gpu = namedtuple("Gpu", "index uuid migs name", defaults=((), ""))


def parse_list(text: str) -> list[Gpu]:
    """`nvidia-smi -L`: each GPU, with the MIG devices listed under it."""
    gpus: list[Gpu] = []
    for line in text.splitlines():
        m = _GPU.match(line)
        if m:
            gpus.append(Gpu(int(m.group(1)), m.group(3), (), m.group(2)))
            continue
        m = _MIG.match(line)
        if m and gpus:
            gpus[-1] = gpus[-1]._replace(migs=(*gpus[-1].migs, m.group(1)))
    return gpus


def parse_query(text: str) -> list[Gpu]:
    """The GPUs of a `--query-gpu=index,uuid,name,...` answer (no MIG devices: `-L` has those)."""
    gpus = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(", ")]
        if len(fields) >= len(QUERY_HEAD) and fields[0].isdigit() and fields[1].startswith("GPU-"):
            gpus.append(Gpu(int(fields[0]), fields[1], (), fields[2]))
    return gpus


def parse_apps(text: str) -> list[tuple[str, int, int | None, str]]:
    """(gpu uuid, pid, used MiB or None, process name) of each compute app; none, no lines."""
    apps = []
    for line in text.splitlines():
        fields = line.split(", ", 3)  # a process name may hold ", "
        if len(fields) != len(APP_FIELDS):
            continue  # "No running processes found" on some versions
        uuid, pid, used, name = (f.strip() for f in fields)
        if pid.isdigit():
            apps.append((uuid, int(pid), int(used) if used.isdigit() else None, name))
    return apps


def devices(gpus: Sequence[Gpu]) -> list[str]:
    """CUDA's devices before the variable: whole GPUs, and MIG devices for GPUs in MIG mode."""
    return [d for g in gpus for d in (g.migs or (g.uuid,))]


def select(gpus: Sequence[Gpu], value: str | None) -> tuple[list[str], str | None]:
    """The devices CUDA_VISIBLE_DEVICES=value names (None: every device), in order; and the
    entry CUDA stopped at (its repr), `twice`, or None."""
    every = devices(gpus)
    if value is None:
        return every, None
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


def _named(gpus, every, entry, kind):
    """The devices one entry names; None when it names none (or, a prefix, more than one)."""
    if not kind:
        digits = re.match(r"\+?(\d+)", entry)  # read as strtoul reads it: `1gpu` is 1
        index = int(digits.group(1)) if digits else -1
        return [every[index]] if 0 <= index < len(every) else None
    if not entry.startswith(kind):
        return None
    if kind == "MIG-":
        found = [[d] for d in every if d.startswith(entry)]
    else:  # a GPU in MIG mode stands for its MIG devices
        found = [list(g.migs or (g.uuid,)) for g in gpus if g.uuid.startswith(entry)]
    return found[0] if len(found) == 1 else None


def owner(gpus, device):
    """The GPU a device is, or holds it (a MIG device's GPU); None if none here."""
    return next((g for g in gpus if device == g.uuid or device in g.migs), None)
