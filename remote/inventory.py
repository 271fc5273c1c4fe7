"""inventory.yaml → a typed, resolved model. Every mistake names the file, the line and the key.

pydantic does the validation (types, unknown keys, choices); the YAML node tree maps an error's
location back to the line it came from.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    field_validator,
    model_validator,
)

from . import fold

EnvValue = str | int | float | bool
# Durations and sizes: numbers only (`yes` is not 1 second), finite, and above zero.
Positive = Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)]
NonNegative = Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False)]
Port = Annotated[int, Field(ge=1, le=65535)]
NotifyEvent = Literal["failed", "succeeded", "lost", "stopped", "restarted", "hang"]
NOTIFY_DEFAULT: tuple[NotifyEvent, ...] = ("failed", "lost", "stopped", "restarted", "hang")


class InventoryError(Exception):
    """A mistake in the inventory, worded for the person who wrote it."""

    def __init__(self, path: Path, line: int | None, message: str) -> None:
        self.path, self.line, self.message = path, line, message
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: {message}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _not_ours(arg: str) -> str:
    """`container.args` go to the runtime as-is, but for what ddptui's promises rest on."""
    flag = arg.split("=", 1)[0]
    if flag in ("--network", "--net"):
        raise ValueError(f"{arg!r}: the network is always the host's (ddptui sets it)")
    if flag in ("--name", "--detach", "-d"):
        raise ValueError(f"{arg!r}: ddptui names each container and keeps it attached")
    return arg


def _host_network(value: str) -> str:
    """`network: host` may be said; anything else is refused (the rendezvous and NCCL need the
    host's interfaces, and the checks judged those)."""
    if value != "host":
        raise ValueError(f"{value!r}: the network is always the host's; say `host` or leave it out")
    return value


def _mount(spec: str) -> str:
    """`path` (the same path inside) or `host_path:container_path[:options]`, as `-v` takes it."""
    parts = spec.split(":")
    source, target = parts[0], parts[1] if len(parts) > 1 else "/"
    if len(parts) > 3 or not source.startswith(("/", "~")) or not target.startswith("/"):
        raise ValueError(f"{spec!r} is not `path` or `host_path:container_path[:ro]`")
    return spec


def _device(spec: str) -> str:
    if not spec.startswith("/") or spec.count(":") > 2:
        raise ValueError(f"{spec!r} is not a device like /dev/infiniband (or host:container[:rwm])")
    return spec


Ulimit = Literal[
    "core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice", "nofile", "nproc",
    "rss", "rtprio", "rttime", "sigpending", "stack",
]  # fmt: skip


def _ulimit(value: int | str) -> str:
    """-1 (unlimited), a number, or `soft:hard`: as `--ulimit name=soft:hard` takes it."""
    text = str(value)
    soft, _, hard = text.partition(":")
    if not all(re.fullmatch(r"-1|\d+", v) for v in (soft, hard or soft)):
        raise ValueError(f"{value!r} is not a limit like -1 (unlimited), 65536 or 1024:65536")
    return f"{soft}:{hard or soft}"


def _size(value: int | str) -> str:
    if not re.fullmatch(r"[1-9][0-9]*[bkmgBKMG]?", str(value)):
        raise ValueError(f"{value!r} is not a size like 16g, 512m or a number of bytes")
    return str(value)


def _capability(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z_]+", name):
        raise ValueError(f"{name!r} is not a capability like SYS_PTRACE or IPC_LOCK")
    return name


Runtime = Literal["docker", "podman", "apptainer", "enroot"]


class ContainerFields(_Strict):
    """`container:` in defaults or on a host: a key set on a host overrides defaults' (as env).

    None is "not said here"; Container holds the merged keys with their defaults.
    """

    runtime: Runtime | None = None
    image: str | None = Field(default=None, min_length=1)
    pull: Literal["never", "missing", "always"] | None = None
    python: str | None = Field(default=None, min_length=1)
    mounts: list[Annotated[str, AfterValidator(_mount)]] | None = None
    gpus: Literal["auto", "all", "none"] | None = None
    ipc: Literal["host", "private"] | None = None
    shm_size: Annotated[str | int, AfterValidator(_size)] | None = None
    ulimits: dict[Ulimit, Annotated[int | str, AfterValidator(_ulimit)]] | None = None
    devices: list[Annotated[str, AfterValidator(_device)]] | None = None
    cap_add: list[Annotated[str, AfterValidator(_capability)]] | None = None
    user: Literal["login", "image"] | None = None
    args: list[Annotated[str, AfterValidator(_not_ours)]] | None = None
    network: Annotated[str, AfterValidator(_host_network)] | None = None


class _HostFields(_Strict):
    """Keys that `defaults` sets for every host and any host may override."""

    user: str | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    identity_file: str | None = None
    known_hosts: str | None = None
    python: str | None = None
    workdir: str | None = None
    env: dict[str, EnvValue] = Field(default_factory=dict)
    transport: Literal["ssh", "local"] | None = None
    gpus: int | None = Field(default=None, ge=0)
    container: ContainerFields | None = None  # the job runs in a container (design §11)

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, EnvValue]) -> dict[str, EnvValue]:
        for name in env:
            if not name or "=" in name or "\0" in name:
                raise ValueError(f"{name!r} is not a valid environment variable name")
        return env


class _HostEntry(_HostFields):
    host: str = Field(min_length=1)
    name: str | None = None
    spare: bool = False  # out of the run until a host is lost: then in its node rank
    skip: bool = False  # out of every launch: node ranks close up as if it were not listed

    @field_validator("host")
    @classmethod
    def _no_login(cls, host: str) -> str:
        user, at, rest = host.rpartition("@")
        if at:  # ssh's user@host: the login has its own key, which defaults can set for all
            raise ValueError(f"{host!r} has a login in it: write `user: {user}` and `host: {rest}`")
        return host


class Nccl(_Strict):
    socket_ifname: str | None = "auto"  # auto: the interface that routes to the master
    ib_disable: bool = False
    debug: str | None = None  # NCCL_DEBUG, e.g. INFO
    flight_recorder: bool = False  # NCCL's flight recorder: a trace of collectives per rank


class SpawnArgs(_Strict):
    """spawn style: the names of the arguments the script takes."""

    world_size: str = "--world_size"
    rank: str = "--rank"
    init_method: str = "--init_method"


class Sync(_Strict):
    """`job.sync`: push a local directory to every host's workdir before launch (remote/sync.py).

    `sync: true` is `sync: {}`: the inventory's own directory. `exclude` adds to DEFAULT_EXCLUDE.
    """

    source: str = Field(default=".", alias="from", min_length=1)  # relative to the inventory
    exclude: list[str] = Field(default_factory=list)

    @field_validator("exclude")
    @classmethod
    def _patterns(cls, exclude: list[str]) -> list[str]:
        for pattern in exclude:
            if not pattern.strip("/"):
                raise ValueError(f"{pattern!r} is not a pattern (a name like data/ or *.ckpt)")
        return exclude


class Notify(_Strict):
    """`job.notify`: a command node 0's host runs when something happens to the run."""

    command: str = Field(min_length=1)  # through sh -c, DDPTUI_EVENT etc. in its environment
    events: list[NotifyEvent] = Field(default_factory=lambda: list(NOTIFY_DEFAULT))

    @model_validator(mode="before")
    @classmethod
    def _no_on(cls, value: Any) -> Any:
        if isinstance(value, dict) and True in value:  # `on:` is YAML 1.1's true
            raise ValueError("`on:` reads as `true` in YAML: name the events under `events:`")
        return value


class Job(_Strict):
    script: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    launcher: Literal["torchrun", "launch", "spawn", "env"] = "torchrun"
    nproc_per_node: int | Literal["auto"] = 1
    master_port: Port | Literal["auto"] = 29500  # auto: node 0 picks a free one at check time
    master_addr: str | None = None  # else the first host's address
    rdzv_backend: Literal["static", "c10d"] = "static"
    max_restarts: int = Field(default=0, ge=0)  # torchrun's own: one node's workers
    restarts: int = Field(default=0, ge=0)  # the whole job again, on every node, after a failure
    restart_delay: NonNegative = 10.0  # seconds before the first restart, doubling (at most 5 min)
    notify: Notify | None = None
    # seconds between TERM and KILL
    stop_grace: NonNegative = 5.0
    link_timeout: Positive = 60.0  # launcher <-> supervisor lease, seconds
    # seconds a host may take from its login to its agent's first word (a slow login shell)
    start_timeout: Positive = 300.0
    spool_max_mb: Positive = 1024.0  # MB of output each host keeps for replay
    hang_after: Positive | None = 600.0  # seconds without progress before a hang; null: off
    nccl: Nccl = Field(default_factory=Nccl)
    spawn_args: SpawnArgs = Field(default_factory=lambda: SpawnArgs())
    sync: Sync | None = None  # push the code to every host before launch; null/false: off
    # A regex on each line with named groups (step, total, any metric): the training's progress;
    # false: no line is read for progress at all
    progress: str | bool | None = None

    @field_validator("progress")
    @classmethod
    def _progress_regex(cls, value: str | bool | None) -> str | bool | None:
        if value is None or value is True:
            return None  # the forms ddptui knows
        if value is False:
            return False
        try:
            compiled = re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        if not compiled.groupindex:
            raise ValueError(
                "the regex names no group: name them, e.g. "
                "`step (?P<step>\\d+) loss (?P<loss>\\S+)`"
            )
        return value

    @field_validator("sync", mode="before")
    @classmethod
    def _sync_switch(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return {} if value else None  # true: every default
        if value is None or isinstance(value, dict):
            return value
        raise ValueError("must be true, false, or a mapping like {from: ., exclude: [data/]}")

    @field_validator("nproc_per_node")
    @classmethod
    def _positive(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 1:
            raise ValueError("must be at least 1 (or auto)")
        return value


class _File(_Strict):
    defaults: _HostFields = Field(default_factory=_HostFields)
    hosts: list[_HostEntry] = Field(min_length=1)
    job: Job


@dataclass(frozen=True)
class Host:
    """One host with its defaults applied. node_rank is its place in the inventory."""

    node_rank: int
    host: str
    name: str
    transport: Literal["ssh", "local"]
    user: str | None
    port: int | None
    identity_file: str | None
    known_hosts: str | None
    python: str
    workdir: str | None
    env: dict[str, str]
    gpus: int | None
    container: Container | None = None
    # The attempt this node's supervisor started at: a spare's, the one it joined in a lost
    # node's place (its private directory on the host is n<rank>-a<since>).
    since: int = 0

    @property
    def job_python(self) -> str:
        """The job's interpreter: the image's in a container, else the host's `python`."""
        return self.container.python if self.container else self.python


DAEMONS = ("docker", "podman")  # runtimes with a daemon (or conmon): containers that outlive us
DEFAULT_ULIMITS = {"memlock": "-1:-1"}  # NCCL registers memory with the IB devices


@dataclass(frozen=True)
class Container:
    """A host's `container:` keys merged, with their defaults: the spec that
    remote/host/container.py builds the runtime's command line from (`spec()`)."""

    runtime: Runtime
    image: str
    pull: str = "never"
    python: str = "python3"  # the job's interpreter, inside the image
    mounts: tuple[str, ...] = ()
    gpus: str = "auto"
    ipc: str = "host"
    shm_size: str | None = None
    ulimits: dict[str, str] = dataclasses.field(default_factory=dict)
    devices: tuple[str, ...] | None = None  # None: /dev/infiniband where the host has it
    cap_add: tuple[str, ...] = ()
    user: str = "login"
    args: tuple[str, ...] = ()

    def spec(self) -> dict[str, Any]:
        """What the host side is handed (JSON)."""
        return dataclasses.asdict(self)


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


@dataclass(frozen=True)
class Inventory:
    path: Path
    hosts: tuple[Host, ...]  # the run's nodes, in node rank order
    job: Job
    text: str = ""  # the file as read: a run keeps a copy (attach, stop, history need no -i)
    # `spare: true` hosts, numbered after the nodes (their place in the fleet) until one takes
    # a lost node's rank
    spares: tuple[Host, ...] = ()
    excluded: tuple[str, ...] = ()  # left out of this launch (--exclude): names
    retired: tuple[str, ...] = ()  # lost, a spare in their place: never a spare themselves

    @property
    def usable_spares(self) -> tuple[Host, ...]:
        return tuple(h for h in self.spares if h.name not in self.retired)

    @property
    def master(self) -> Host:
        return self.hosts[0]

    @property
    def everyone(self) -> tuple[Host, ...]:
        """The nodes, then the spares: every host the launcher may log into."""
        return self.hosts + self.spares


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
        raise InventoryError(path, _line_of(node, loc), _describe(loc, err)) from None
    if (nul := _nul_at(data)) is not None:  # no argv or environment can carry one
        raise InventoryError(path, _line_of(node, nul), f"`{_dotted(nul)}` contains a NUL byte")
    inv = _resolve(raw, path, node)
    _check_sync(inv, node)
    return dataclasses.replace(inv, text=text)


def _args_as_written(data: dict[str, Any], node: yaml.Node | None) -> None:
    """`args: [--epochs, 3, --amp, on]`: a number or flag reaches the script as the file spells
    it ("on", not True; "1.50", not 1.5), as if typed in a shell."""
    job, args = data.get("job"), _node_at(node, ("job", "args"))
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
    for i, entry, address, name in _unfolded(raw.hosts, path, node):
        merged = {
            **raw.defaults.model_dump(exclude_unset=True),
            **entry.model_dump(exclude_unset=True),
        }
        env = {**raw.defaults.env, **entry.env}
        if name in seen:
            loc = ("hosts", i, "name" if entry.name else "host")
            msg = f"hosts[{i}]: {name!r} appears twice (first in hosts[{seen[name]}]); "
            raise InventoryError(path, _line_of(node, loc), msg + "give each host its own name")
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
                gpus=merged.get("gpus"),
                container=_container(raw.defaults, entry, i, path, node),
            )
        )
    if not hosts:
        why = "every host is a spare or skipped: the run needs at least one to start on"
        raise InventoryError(path, _line_of(node, ("hosts",)), why)
    return numbered(Inventory(path=path, hosts=tuple(hosts), job=raw.job, spares=tuple(spares)))


def numbered(inv: Inventory) -> Inventory:
    """Node ranks by place: the nodes 0, 1, ..., the spares after them."""
    ranked = [dataclasses.replace(h, node_rank=k) for k, h in enumerate(inv.everyone)]
    n = len(inv.hosts)
    return dataclasses.replace(inv, hosts=tuple(ranked[:n]), spares=tuple(ranked[n:]))


def without(inv: Inventory, hosts: str) -> Inventory:
    """`--exclude HOSTS`: names or addresses, ranges allowed (`node[3-4],gpu07`), left out of
    this launch; node ranks close up as if they were not listed. InventoryError: one that
    names no host, or none left to run on."""
    try:
        gone = {h for part in fold.split(hosts) for h in fold.unfold(part)}
    except fold.RangeError as exc:
        raise InventoryError(inv.path, None, f"--exclude {hosts!r}: {exc}") from None
    known = {x for h in inv.everyone for x in (h.name, h.host)}
    if unknown := sorted(gone - known):
        raise InventoryError(inv.path, None, f"--exclude: no host {unknown[0]!r} in the inventory")
    return leave_out(inv, {h.name for h in inv.everyone if h.name in gone or h.host in gone})


def leave_out(inv: Inventory, names: set[str]) -> Inventory:
    """The hosts of these names out of the run (and its spares), node ranks closed up."""
    kept = tuple(h for h in inv.hosts if h.name not in names)
    if not kept:
        raise InventoryError(inv.path, None, "--exclude leaves no host to run on")
    spares = tuple(h for h in inv.spares if h.name not in names)
    left_out = tuple(h.name for h in inv.everyone if h.name in names)
    return numbered(
        dataclasses.replace(inv, hosts=kept, spares=spares, excluded=inv.excluded + left_out)
    )


def swap_in(inv: Inventory, node_rank: int, spare: str, since: int) -> Inventory:
    """The spare named `spare` in node `node_rank`'s place (a lost host's) from attempt
    `since`; the lost host takes the spare's place in the list, retired: never a spare."""
    j = next(
        (i for i, h in enumerate(inv.spares) if h.name == spare and spare not in inv.retired),
        None,
    )
    if j is None or not 0 <= node_rank < len(inv.hosts):
        raise InventoryError(inv.path, None, f"no spare {spare!r} for node {node_rank}")
    hosts, spares = list(inv.hosts), list(inv.spares)
    lost, taking = hosts[node_rank], spares[j]
    hosts[node_rank] = dataclasses.replace(taking, node_rank=node_rank, since=since)
    spares[j] = dataclasses.replace(lost, node_rank=taking.node_rank, since=0)
    return dataclasses.replace(
        inv, hosts=tuple(hosts), spares=tuple(spares), retired=(*inv.retired, lost.name)
    )


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
        where = _dotted((*loc, key))
        return InventoryError(path, _line_of(node, (*loc, key)), f"`{where}` {message}")

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


EXAMPLE = {"runtime": "`runtime: docker`", "image": "`image: nvcr.io/nvidia/pytorch:24.05-py3`"}


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
                _line_of(node, ("job", "sync")),
                f"`job.sync` needs a workdir for every SSH host: hosts[{h.node_rank}] "
                f"({h.name}) has none (set `workdir:` in defaults or on the host)",
            )


def _unfolded(
    entries: list[_HostEntry], path: Path, node: yaml.Node | None
) -> list[tuple[int, _HostEntry, str, str]]:
    """(index, entry, host, name) of every host, in order: the entries' host ranges unfolded."""
    return [
        (i, entry, address, name)
        for i, entry in enumerate(entries)
        for address, name in _unfold_entry(entry, i, path, node)
    ]


def _unfold_entry(
    entry: _HostEntry, i: int, path: Path, node: yaml.Node | None
) -> list[tuple[str, str]]:
    """(host, name) of each host an entry stands for: `host: gpu[01-64]` is 64 hosts, in order,
    named alongside by `name: n[1-64]`; a range in `name` alone puts several nodes on one host."""

    def fail(key: str, message: str) -> InventoryError:
        return InventoryError(path, _line_of(node, ("hosts", i, key)), f"hosts[{i}].{message}")

    try:
        addresses = fold.unfold(entry.host)
    except fold.RangeError as exc:
        raise fail("host", f"host: {exc}") from None
    try:
        names = fold.unfold(entry.name) if entry.name else addresses
    except fold.RangeError as exc:
        raise fail("name", f"name: {exc}") from None
    if len(addresses) == 1:
        return [(addresses[0], name) for name in names]
    if len(names) != len(addresses):
        raise fail(
            "name",
            f"name: {entry.name!r} is {len(names)} name(s) but host {entry.host!r} is "
            f"{len(addresses)} hosts; write a range of as many names (or leave name out)",
        )
    return list(zip(addresses, names, strict=True))


def _default_python(transport: str | None) -> str:
    """A local node runs on ddptui's own interpreter (its venv); remote hosts on python3."""
    return sys.executable if transport == "local" else "python3"


def env_text(value: EnvValue) -> str:
    """YAML scalars become the text a shell user would have exported (true → 1)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


_MESSAGES = {
    "int_parsing": "must be an integer",
    "int_type": "must be an integer",
    "int_from_float": "must be an integer",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "finite_number": "must be a finite number",
    "missing": "is required",
    "too_short": "must not be empty",
    "string_too_short": "must not be empty",
}


def _describe(loc: tuple[Any, ...], err: Any) -> str:
    kind: str = err["type"]
    loc = _clean(loc)
    key = _dotted(loc)
    if kind == "extra_forbidden":
        parent = _dotted(loc[:-1]) or "the top level"
        return f"unknown key `{loc[-1]}` in {parent} (check the spelling)"
    if kind == "literal_error":
        return f"`{key}` must be one of {err['ctx']['expected']}, got {err['input']!r}"
    if kind in ("greater_than", "greater_than_equal", "less_than_equal"):
        return f"`{key}` {err['msg'].lower()}, got {err['input']!r}"
    if kind in _MESSAGES:
        got = "" if kind == "missing" else f", got {err['input']!r}"
        return f"`{key}` {_MESSAGES[kind]}{got}"
    if kind == "value_error":
        return f"`{key}`: {err['ctx']['error']}"
    return f"`{key}`: {err['msg']}"


def _clean(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """pydantic adds union branch names (`int`, `literal['auto']`, `str`) to locations."""
    tags = ("int", "str", "float", "bool")
    return tuple(
        p
        for p in loc
        if not (isinstance(p, str) and (p in tags or p == "[key]" or p.startswith("literal[")))
    )


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """The 1-based line of a validation error's location (or of its nearest parent)."""
    return _walk(node, loc)[1]


def _node_at(node: yaml.Node | None, loc: tuple[Any, ...]) -> yaml.Node | None:
    found, _ = _walk(node, loc)
    return found


def _walk(node: yaml.Node | None, loc: tuple[Any, ...]) -> tuple[yaml.Node | None, int | None]:
    """Walk the YAML node tree along a location: the node there (None if it is not in the
    tree) and the line of the deepest key or item found on the way."""
    line = node.start_mark.line + 1 if node else None
    for part in _clean(loc):
        if isinstance(node, yaml.MappingNode):
            match = [(k, v) for k, v in node.value if k.value == part]
            if not match:
                return None, line
            key, node = match[0]
            line = key.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return None, line
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return None, line
    return node, line
