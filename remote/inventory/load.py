"""inventory.yaml read: the YAML, its keys validated, every host resolved with its defaults and
its container's keys merged, the checks across keys. Every mistake names the file, the line and the
key.

pydantic does the validation (types, unknown keys, choices); the YAML node tree maps an error's
location back to the line it came from.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ddptui.remote import fold
from ddptui.remote.host.protocol import DAEMONS  # runtimes whose containers outlive us
from ddptui.remote.inventory.errors import InventoryError, describe, dotted, line_of, node_at
from ddptui.remote.inventory.model import (
    Container,
    EnvValue,
    Host,
    Inventory,
    Sync,
    _File,
    _HostEntry,
    _HostFields,
    numbered,
)
from ddptui.remote.inventory.ranges import unfolded


def load(path: str | Path) -> Inventory:
    """Read and validate an inventory file, or raise InventoryError."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InventoryError(path, None, f"cannot read inventory: {exc.strerror}") from None
    return parse(text, path)


def parse(text: str, path: Path) -> Inventory:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        line = mark.line + 1 if mark else None
        raise InventoryError(path, line, f"invalid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise InventoryError(path, 1, "the inventory must be a mapping with hosts: and job:")
    _args_as_written(data, node)
    try:
        raw = _File.model_validate(data)
    except ValidationError as exc:
        # An unknown key usually explains the other errors (a typo leaves a key "missing").
        err = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")[0]
        loc = tuple(err["loc"])
        raise InventoryError(path, line_of(node, loc), describe(loc, err)) from None
    if (nul := _nul_at(data)) is not None:  # no argv or environment can carry one
        raise InventoryError(path, line_of(node, nul), f"`{dotted(nul)}` contains a NUL byte")
    inv = _resolve(raw, path, node)
    _check_sync(inv, node)
    return dataclasses.replace(inv, text=text)


def _args_as_written(data: dict[str, Any], node: yaml.Node | None) -> None:
    """`args: [--epochs, 3, --amp, on]`: a number or flag reaches the script as the file spells
    it ("on", not True; "1.50", not 1.5), as if typed in a shell."""
    job, args = data.get("job"), node_at(node, ("job", "args"))
    if not isinstance(job, dict) or not isinstance(job.get("args"), list):
        return
    if not isinstance(args, yaml.SequenceNode) or len(args.value) != len(job["args"]):
        return  # YAML merge keys and the like: leave it to the validation
    job["args"] = [
        item.value
        if isinstance(value, int | float) and isinstance(item, yaml.ScalarNode)
        else value
        for value, item in zip(job["args"], args.value, strict=True)
    ]  # bool is an int: true, yes and on stay as written too


def _nul_at(value: Any, loc: tuple[Any, ...] = ()) -> tuple[Any, ...] | None:
    """Where the first string (key or value) holding a NUL byte is, if any."""
    if isinstance(value, str):
        return loc if "\0" in value else None
    if isinstance(value, list):
        value = dict(enumerate(value))
    if not isinstance(value, dict):
        return None
    for key, item in value.items():
        if isinstance(key, str) and "\0" in key:
            return (*loc, key)
        if (found := _nul_at(item, (*loc, key))) is not None:
            return found
    return None


def _resolve(raw: _File, path: Path, node: yaml.Node | None) -> Inventory:
    hosts: list[Host] = []
    spares: list[Host] = []
    seen: dict[str, int] = {}
    for i, entry, address, name in unfolded(_entries(raw, path, node), path, node):
        merged = {
            **raw.defaults.model_dump(exclude_unset=True),
            **entry.model_dump(exclude_unset=True),
        }
        env = {**raw.defaults.env, **entry.env}
        if name in seen:
            loc = ("hosts", i, "name" if entry.name else "host")
            msg = f"hosts[{i}]: {name!r} appears twice (first in hosts[{seen[name]}]); "
            raise InventoryError(path, line_of(node, loc), msg + "give each host its own name")
        seen[name] = i
        if entry.skip:
            continue
        (spares if entry.spare else hosts).append(
            Host(
                node_rank=0,  # numbered below, once every host is known
                host=address,
                name=name,
                transport=merged.get("transport") or "ssh",
                user=merged.get("user"),
                port=merged.get("port"),
                identity_file=merged.get("identity_file"),
                known_hosts=merged.get("known_hosts"),
                python=merged.get("python") or _default_python(merged.get("transport")),
                workdir=merged.get("workdir"),
                env={k: env_text(v) for k, v in env.items()},
                gpus=len(gpus) if isinstance(gpus := merged.get("gpus"), list) else gpus,
                pins=tuple(gpus) if isinstance(gpus, list) else (),
                container=_container(raw.defaults, entry, i, path, node),
                ssh_config=_beside(path, merged.get("ssh_config")),
            )
        )
    if not hosts:
        why = "every host is a spare or skipped: the run needs at least one to start on"
        raise InventoryError(path, line_of(node, ("hosts",)), why)
    login = _login(raw, path) if raw.slurm else None
    inv = Inventory(path=path, hosts=tuple(hosts), job=raw.job, spares=tuple(spares),
                    slurm=raw.slurm, login=login)  # fmt: skip
    return numbered(inv)


def _entries(raw: _File, path: Path, node: yaml.Node | None) -> list[_HostEntry]:
    """The hosts as listed; a Slurm job's nodes, named node0... until Slurm says which
    (with_nodes); `hosts: slurm`, the allocation's, from SLURM_JOB_NODELIST."""
    if raw.slurm is not None:
        if raw.defaults.transport == "local":
            where = line_of(node, ("defaults", "transport"))
            why = "defaults.transport: a Slurm job's nodes are Slurm's, not local"
            raise InventoryError(path, where, why)
        return [_HostEntry(host=f"node{k}") for k in range(raw.slurm.nodes)]
    if raw.hosts == "slurm":
        listed = os.environ.get("SLURM_JOB_NODELIST")
        if not listed:
            why = "hosts: slurm takes an allocation's nodes, and SLURM_JOB_NODELIST is not set "
            raise InventoryError(path, line_of(node, ("hosts",)),
                                 why + "(run ddptui inside salloc or a batch script)")  # fmt: skip
        try:
            return [_HostEntry(host=h) for h in fold.names(listed)]
        except (fold.RangeError, ValueError) as exc:
            why = f"hosts: slurm: SLURM_JOB_NODELIST {listed!r} is not a host list: {exc}"
            raise InventoryError(path, line_of(node, ("hosts",)), why) from None
    assert raw.hosts is not None
    return raw.hosts


def _login(raw: _File, path: Path) -> Host:
    """The Slurm login node, with the defaults' keys (the one host ddptui logs into)."""
    assert raw.slurm is not None
    d = raw.defaults
    return Host(
        node_rank=0, host=raw.slurm.login, name=raw.slurm.login, transport="ssh", user=d.user,
        port=d.port, identity_file=d.identity_file, known_hosts=d.known_hosts,
        python=d.python or "python3", workdir=d.workdir, env={}, gpus=None,
        ssh_config=_beside(path, d.ssh_config),
    )  # fmt: skip


DEFAULT_ULIMITS = {"memlock": "-1:-1"}  # NCCL registers memory with the IB devices
# Keys that only some runtimes have a flag for: said for another runtime, they would be ignored.
ONLY_FOR: dict[str, tuple[Callable[[Any], bool], tuple[str, ...]]] = {
    "pull": (lambda v: v != "never", DAEMONS),
    "shm_size": (lambda v: v is not None, DAEMONS),
    "ulimits": (lambda v: bool(v), DAEMONS),
    "devices": (lambda v: bool(v), DAEMONS),
    "user": (lambda v: v == "image", DAEMONS),
    "cap_add": (lambda v: bool(v), (*DAEMONS, "apptainer")),
    "ipc": (lambda v: v == "private", (*DAEMONS, "apptainer")),
}
EXAMPLE = {"runtime": "`runtime: docker`", "image": "`image: nvcr.io/nvidia/pytorch:24.05-py3`"}


def _container(
    defaults: _HostFields, entry: _HostEntry, i: int, path: Path, node: yaml.Node | None
) -> Container | None:
    """defaults' `container:` with the host's keys over it, key by key (as env)."""
    said = [
        (loc, fields.model_dump(exclude_unset=True))
        for loc, fields in ((("hosts", i), entry.container), (("defaults",), defaults.container))
        if fields is not None
    ]
    if not said:
        return None
    keys: dict[str, Any] = {
        k: v for _, found in reversed(said) for k, v in found.items() if v is not None
    }

    def fail(key: str, message: str) -> InventoryError:
        loc = (*next((loc for loc, found in said if key in found), said[-1][0]), "container")
        where = dotted((*loc, key))
        return InventoryError(path, line_of(node, (*loc, key)), f"`{where}` {message}")

    for key in ("runtime", "image"):
        if key not in keys:
            raise fail(key, f"is required for hosts[{i}] (in defaults or on it): {EXAMPLE[key]}")
    runtime = keys["runtime"]
    for key, (used, runtimes) in ONLY_FOR.items():
        if key in keys and used(keys[key]) and runtime not in runtimes:
            only = ", ".join(runtimes)
            raise fail(key, f"is not for {runtime}, the runtime of hosts[{i}] (only for {only})")
    if "shm_size" in keys and keys.get("ipc") != "private":
        raise fail("shm_size", "needs `ipc: private` (with ipc: host, /dev/shm is the host's)")
    keys.pop("network", None)  # always the host's: said only to be refused otherwise
    keys.setdefault("ulimits", DEFAULT_ULIMITS if runtime in DAEMONS else {})
    final: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in keys.items()}
    return Container(**final)


def with_sync(inv: Inventory, on: bool) -> Inventory:
    """`launch --sync` / `--no-sync` over what the file says (--sync keeps its `from`/`exclude`)."""
    job = inv.job.model_copy(update={"sync": (inv.job.sync or Sync()) if on else None})
    changed = dataclasses.replace(inv, job=job)
    _check_sync(changed, None)
    return changed


def _check_sync(inv: Inventory, node: yaml.Node | None) -> None:
    """job.sync writes into each SSH host's workdir: without one, a project would be spread
    over the login directory. (A local host runs in the source itself by default.)"""
    if inv.job.sync is None:
        return
    for h in inv.everyone:
        if h.transport == "ssh" and not h.workdir:
            raise InventoryError(
                inv.path,
                line_of(node, ("job", "sync")),
                f"`job.sync` needs a workdir for every SSH host: hosts[{h.node_rank}] "
                f"({h.name}) has none (set `workdir:` in defaults or on the host)",
            )


def _beside(path: Path, name: str | None) -> str | None:
    """A file the inventory names: `~` expanded, a relative name beside the inventory."""
    return str(path.parent / Path(name).expanduser()) if name else None


def _default_python(transport: str | None) -> str:
    """A local node runs on ddptui's own interpreter (its venv); remote hosts on python3."""
    return sys.executable if transport == "local" else "python3"


def env_text(value: EnvValue) -> str:
    """YAML scalars become the text a shell user would have exported (true → 1)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)
