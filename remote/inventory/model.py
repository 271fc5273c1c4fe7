"""The inventory's model: what inventory.yaml may say (its keys as pydantic models, each with the
rule it is held to and the description an editor shows, remote/schema.py), and what it resolves to
(every host with its defaults applied and its node rank, the job, the spares), with what a launch
changes in it (hosts left out, a spare in a lost node's place)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    field_validator,
    model_validator,
)

from ddptui.remote.inventory.errors import InventoryError

EnvValue = str | int | float | bool
# Durations and sizes: numbers only (`yes` is not 1 second), finite, and above zero.
Positive = Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)]
NonNegative = Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False)]
Port = Annotated[int, Field(ge=1, le=65535)]
NotifyEvent = Literal["failed", "succeeded", "lost", "stopped", "restarted", "hang", "straggler"]
NOTIFY_DEFAULT: tuple[NotifyEvent, ...] = (
    "failed", "lost", "stopped", "restarted", "hang", "straggler",
)  # fmt: skip
RestartCause = Literal["hang", "lost", "gpu", "failed"]
ExitCode = Annotated[int, Field(ge=1, le=255)]


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


# The rules below, as the JSON Schema says them to editors (remote/schema.py): regexes that
# both Python and JavaScript read the same way.
ULIMIT = r"^(-1|[0-9]+)(:(-1|[0-9]+))?$"
SIZE = r"^[1-9][0-9]*[bkmgBKMG]?$"
CAPABILITY = r"^[A-Za-z_]+$"
MOUNT = r"^[/~][^:]*(:/[^:]*(:[^:]*)?)?$"
DEVICE = r"^/[^:]*(:[^:]*){0,2}$"
NOT_OURS = r"^(?!(--network|--net|--name|--detach|-d)(=|$))"
ENV_NAME = r"^[^=\u0000]+$"


def _ulimit(value: int | str) -> str:
    """-1 (unlimited), a number, or `soft:hard`: as `--ulimit name=soft:hard` takes it."""
    text = str(value)
    if not re.fullmatch(ULIMIT, text):
        raise ValueError(f"{value!r} is not a limit like -1 (unlimited), 65536 or 1024:65536")
    soft, _, hard = text.partition(":")
    return f"{soft}:{hard or soft}"


def _size(value: int | str) -> str:
    if not re.fullmatch(SIZE, str(value)):
        raise ValueError(f"{value!r} is not a size like 16g, 512m or a number of bytes")
    return str(value)


def _capability(name: str) -> str:
    if not re.fullmatch(CAPABILITY, name):
        raise ValueError(f"{name!r} is not a capability like SYS_PTRACE or IPC_LOCK")
    return name


Runtime = Literal["docker", "podman", "apptainer", "enroot"]


def _shown(pattern: str | None = None, **keywords: Any) -> Any:
    """A rule a validator enforces, said to the JSON Schema too, so that an editor checks it
    as it is typed; the validator keeps its own wording for ddptui's error. (A pattern binds
    strings only, a minimum numbers only: both may sit on a union of the two.)"""
    return Field(json_schema_extra={**({"pattern": pattern} if pattern else {}), **keywords})


def _names_checked(schema: dict[str, Any]) -> None:
    """env's names as JSON Schema checks names: pydantic writes a pattern on a key as
    patternProperties, which lets any other name through."""
    [(pattern, values)] = schema.pop("patternProperties").items()
    schema.update(propertyNames={"pattern": pattern}, additionalProperties=values)


def _or_a_switch(schema: dict[str, Any]) -> None:
    """`sync: true` / `false` stand for the mapping and for off (Job._sync_switch)."""
    schema["anyOf"] = [*schema.get("anyOf", ()), {"type": "boolean"}]


class ContainerFields(_Strict):
    """The job runs in a container on each host; keys set on a host override defaults' one by
    one (as env)."""

    # None is "not said here"; Container holds the merged keys with their defaults.
    runtime: Runtime | None = Field(
        default=None, description="The container runtime (no default; required with container:)"
    )
    image: str | None = Field(
        default=None, min_length=1, description="The image (required with container:)"
    )
    pull: Literal["never", "missing", "always"] | None = Field(
        default=None, description="When the checks pull the image (default never)"
    )
    python: str | None = Field(
        default=None, min_length=1, description="The interpreter inside the image (default python3)"
    )
    mounts: list[Annotated[str, AfterValidator(_mount), _shown(MOUNT)]] | None = Field(
        default=None,
        description="`path` (the same path inside) or `host_path:container_path[:ro]`; "
        "workdir is always mounted",
    )
    gpus: Literal["auto", "all", "none"] | None = Field(
        default=None,
        description="auto (default): the GPUs the job would see on the host (CUDA_VISIBLE_DEVICES)",
    )
    ipc: Literal["host", "private"] | None = Field(
        default=None,
        description="host (default), or private with shm_size: NCCL needs a large /dev/shm",
    )
    shm_size: Annotated[str | int, AfterValidator(_size), _shown(SIZE, minimum=1)] | None = Field(
        default=None, description="/dev/shm's size with `ipc: private`, e.g. 16g"
    )
    ulimits: (
        dict[Ulimit, Annotated[int | str, AfterValidator(_ulimit), _shown(ULIMIT, minimum=-1)]]
        | None
    ) = Field(
        default=None,
        description="--ulimit name=soft:hard (-1: unlimited); default {memlock: -1} for "
        "docker and podman, `{}` for none",
    )
    devices: list[Annotated[str, AfterValidator(_device), _shown(DEVICE)]] | None = Field(
        default=None,
        description="Devices passed in (default: /dev/infiniband where the host has it)",
    )
    cap_add: list[Annotated[str, AfterValidator(_capability), _shown(CAPABILITY)]] | None = Field(
        default=None, description="Capabilities added, e.g. IPC_LOCK"
    )
    user: Literal["login", "image"] | None = Field(
        default=None,
        description="login (default): your uid:gid, outputs are yours; image: the image's user",
    )
    args: list[Annotated[str, AfterValidator(_not_ours), _shown(NOT_OURS)]] | None = Field(
        default=None,
        description="Passed to the runtime as-is, before the image (not --network, --name, -d)",
    )
    network: Annotated[str, AfterValidator(_host_network), _shown("^host$")] | None = Field(
        default=None, description="Always the host's network: `host` may be said, nothing else"
    )


class _HostFields(_Strict):
    """Keys that `defaults` sets for every host and any host may override."""

    user: str | None = Field(
        default=None, description="SSH login (default: ~/.ssh/config's User, else yours)"
    )
    port: int | None = Field(
        default=None, ge=1, le=65535, description="SSH port (default: ~/.ssh/config's, else 22)"
    )
    identity_file: str | None = Field(
        default=None, description="SSH key (default: ssh-agent and ~/.ssh/config, as ssh does)"
    )
    known_hosts: str | None = Field(
        default=None,
        description="known_hosts file (default ~/.ssh/known_hosts); host keys are always verified",
    )
    ssh_config: str | None = Field(
        default=None,
        description="The cluster's ssh_config, as `ssh -F PATH` (relative: beside the inventory)",
    )
    python: str | None = Field(
        default=None,
        description="The interpreter on the host, with torch (default python3; ~ allowed)",
    )
    workdir: str | None = Field(
        default=None,
        description="The job's directory on the host (default: the login dir; ~ allowed)",
    )
    env: dict[Annotated[str, _shown(ENV_NAME)], EnvValue] = Field(
        default_factory=dict,
        description="Exported to the job, byte for byte; a host's merged over defaults'",
        json_schema_extra=_names_checked,
    )
    transport: Literal["ssh", "local"] | None = Field(
        default=None, description="ssh (default), or local: run on this machine, without SSH"
    )
    gpus: Annotated[int, Field(ge=0)] | list[Annotated[int, Field(ge=0)]] | None = Field(
        default=None,
        description="The GPUs the job may take ([0, 1]); a number: `auto`'s processes if none seen",
    )
    # the job runs in a container
    container: ContainerFields | None = Field(default=None, description=ContainerFields.__doc__)

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, EnvValue]) -> dict[str, EnvValue]:
        for name in env:
            if not name or "=" in name or "\0" in name:
                raise ValueError(f"{name!r} is not a valid environment variable name")
        return env


# A name with ranges as an editor can check it: brackets hold numeric range lists, or the whole
# name is a bracketed IPv6 address; the loader's own error says which character is wrong.
_N = r" *[0-9]{1,12} *"
_RANGES = rf"(?:[^@\[\]]|\[{_N}(?:-{_N})?(?:,{_N}(?:-{_N})?)*\])+"
RANGED_NAME = rf"^(?:\[[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*(?:%[^\]]+)?\]|{_RANGES})$"


class _HostEntry(_HostFields):
    """One host, or a range of hosts (gpu[01-64]); listed in node rank order, the first is
    the master. Any key of defaults may be set here to override it."""

    host: str = Field(
        min_length=1,
        description="Address or ~/.ssh/config alias, or a range of them: gpu[01-64], "
        "10.0.0.[11-138] (the login goes in user:, not user@)",
        json_schema_extra={"pattern": RANGED_NAME},
    )
    name: str | None = Field(
        default=None,
        description="Display name (default: host); a range names a host range's hosts alongside",
        json_schema_extra={"pattern": RANGED_NAME.replace("@", "")},
    )
    spare: bool = Field(
        default=False,
        description="Out of the run until a host is lost: then it takes that node rank",
    )
    skip: bool = Field(
        default=False,
        description="Out of every launch: node ranks close up as if it were not listed",
    )

    @field_validator("host")
    @classmethod
    def _no_login(cls, host: str) -> str:
        user, at, rest = host.rpartition("@")
        if at:  # ssh's user@host: the login has its own key, which defaults can set for all
            raise ValueError(f"{host!r} has a login in it: write `user: {user}` and `host: {rest}`")
        return host


class Nccl(_Strict):
    """NCCL and gloo settings, exported to every process of the job."""

    socket_ifname: str | None = Field(
        default="auto",
        description="NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME: auto (each host's interface "
        "that routes to the master), a name (eth0), or null for neither",
    )
    ib_disable: bool = Field(default=False, description="NCCL_IB_DISABLE")
    debug: str | None = Field(default=None, description="NCCL_DEBUG, e.g. INFO")
    flight_recorder: bool = Field(
        default=False,
        description="NCCL's flight recorder: each rank's trace of collectives, kept after a hang",
    )


class SpawnArgs(_Strict):
    """spawn style: the names of the arguments the script takes."""

    world_size: str = Field(default="--world_size", description="Takes the number of nodes")
    rank: str = Field(default="--rank", description="Takes the node rank")
    init_method: str = Field(default="--init_method", description="Takes tcp://MASTER:PORT")


class Sync(_Strict):
    """Push a local directory to every host's workdir before each launch (only what changed;
    nothing deleted)."""

    # `sync: true` is `sync: {}`: the inventory's own directory (remote/agents/sync.py).
    source: str = Field(
        default=".",
        alias="from",
        min_length=1,
        description="The directory pushed, relative to the inventory",
    )
    exclude: list[Annotated[str, _shown("[^/]")]] = Field(
        default_factory=list,
        description="More patterns left out (data/, *.ckpt), beyond VCS dirs, caches, venvs, "
        "trainer outputs and secrets",
    )

    @field_validator("exclude")
    @classmethod
    def _patterns(cls, exclude: list[str]) -> list[str]:
        for pattern in exclude:
            if not pattern.strip("/"):
                raise ValueError(f"{pattern!r} is not a pattern (a name like data/ or *.ckpt)")
        return exclude


class Notify(_Strict):
    """A command node 0's host runs when something happens to the run."""

    command: str = Field(
        min_length=1,
        description="Run through sh -c with DDPTUI_EVENT, DDPTUI_RUN_ID, DDPTUI_STATUS and "
        "DDPTUI_MESSAGE in its environment; killed after 30 s",
    )
    events: list[NotifyEvent] = Field(
        default_factory=lambda: list(NOTIFY_DEFAULT),
        description="The events that run it (default: all but succeeded)",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_on(cls, value: Any) -> Any:
        if isinstance(value, dict) and True in value:  # `on:` is YAML 1.1's true
            raise ValueError("`on:` reads as `true` in YAML: name the events under `events:`")
        return value


class Job(_Strict):
    """What runs, and how it is started, watched, stopped and restarted."""

    script: str = Field(
        min_length=1, description="The training script, relative to workdir (or ~/..., absolute)"
    )
    args: list[str] = Field(
        default_factory=list,
        description="The script's arguments; numbers and flags reach it as written (3, 0.0010, on)",
        # Numbers and booleans are taken, as written (_args_as_written), null is not.
        json_schema_extra={"items": {"type": ["string", "number", "boolean"]}},
    )
    launcher: Literal["torchrun", "launch", "spawn", "env"] = Field(
        default="torchrun", description="How each node starts its part (see Launch styles)"
    )
    nproc_per_node: Annotated[int, _shown(minimum=1)] | Literal["auto"] = Field(
        default=1, description="Processes per host, or auto: one per GPU the job will see"
    )
    master_port: Port | Literal["auto"] = Field(
        default=29500, description="The rendezvous port, or auto: node 0 picks a free one"
    )
    master_addr: str | None = Field(
        default=None, description="Default: the first host's address, as the others reach it"
    )
    rdzv_backend: Literal["static", "c10d"] = Field(
        default="static", description="torchrun's rendezvous: static (fixed node ranks) or c10d"
    )
    max_restarts: int = Field(
        default=0, ge=0, description="torchrun's own: one node's workers again, not the job's"
    )
    restarts: int = Field(
        default=0, ge=0, description="The whole job again, on every node, after a failure"
    )
    restart_delay: NonNegative = Field(
        default=10.0, description="Seconds before the first restart, doubling, at most 5 min"
    )
    restart_on: list[ExitCode | RestartCause] | None = Field(
        default=None,
        description="What restarts the job: a failing rank's exit codes, or causes (hang, lost, "
        "gpu, failed: any exit); anything else ends the run. Default: all",
    )
    notify: Notify | None = Field(default=None, description=Notify.__doc__)
    stop_grace: NonNegative = Field(
        default=5.0, description="Seconds between TERM and KILL when stopping"
    )
    link_timeout: Positive = Field(
        default=60.0, description="Seconds a host's part runs on without word from ddptui"
    )
    start_timeout: Positive = Field(
        default=300.0,
        description="Seconds a host's login shell may take to start ddptui's agent",
    )
    spool_max_mb: Positive = Field(
        default=1024.0, description="MB of output each host keeps, per node, for replay"
    )
    hang_after: Positive | None = Field(
        default=600.0,
        description="Seconds of silence (or idle GPUs) before a hang is reported; null: off. "
        "The run's own watch names a hang sooner (about a minute) from the ranks' stacks, "
        "within three quarters of this where set lower",
    )
    on_hang: Literal["restart", "stop", "warn"] = Field(
        default="restart",
        description="What a hang the run's watch confirmed does: restart (the attempt fails as "
        "hung; the job restarts if restarts remain), stop (the run ends) or warn",
    )
    busy_gpus: Literal["refuse", "wait", "share"] = Field(
        default="refuse",
        description="A GPU running work outside ddptui (nvidia-smi's compute apps) is never "
        "taken (refuse), taken once that work is gone (wait), or taken anyway (share)",
    )
    on_straggler: Literal["warn", "replace"] = Field(
        default="warn",
        description="What a straggler the run's watch named does: warn, or replace (its host is "
        "swapped for a spare: at once where a spare and a restart are left, else when the "
        "attempt fails of something else)",
    )
    nccl: Nccl = Field(default_factory=Nccl, description=Nccl.__doc__)
    spawn_args: SpawnArgs = Field(
        default_factory=lambda: SpawnArgs(), description=SpawnArgs.__doc__
    )
    sync: Sync | None = Field(
        default=None,
        json_schema_extra=_or_a_switch,
        description="true, or {from: ., exclude: [data/]}: push the code to every host's "
        "workdir before launch; null or false: off",
    )
    progress: str | bool | None = Field(
        default=None,
        description="A regex with named groups (step, total, any metric) for the training's "
        "progress, tried first on every line; false: no line is read for progress",
    )

    checkpoint: str | None = Field(
        default=None,
        min_length=1,
        description="The directory the job saves its checkpoints to (relative to the workdir, "
        "or absolute): the newest is said at each save, kept in the run's record, and handed "
        "to every attempt as DDPTUI_CHECKPOINT; a restart chain whose checkpoint stops "
        "advancing stops",
    )

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

    @field_validator("restart_on", mode="before")
    @classmethod
    def _restart_on(cls, value: Any) -> Any:
        """One message for a wrong item, where the union's two would name neither well."""
        causes = get_args(RestartCause)
        for item in value if isinstance(value, list) else ():
            if isinstance(item, bool) or not (item in causes or isinstance(item, int)):
                raise ValueError(f"{item!r} is neither an exit code nor one of {', '.join(causes)}")
            if isinstance(item, int) and not 1 <= item <= 255:
                raise ValueError(f"{item} is no failing exit code (1 to 255)")
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


# sbatch options ddptui sets itself: a run's job is one task per node, named for the run, its
# output where ddptui reads it.
SBATCH_OURS = ("--job-name", "-J", "--nodes", "-N", "--ntasks", "-n", "--ntasks-per-node",
               "--output", "-o", "--error", "-e", "--wrap", "--array", "-a", "--parsable",
               "--test-only", "--wait", "-W")  # fmt: skip


class Slurm(_Strict):
    """Hand the job to Slurm: submitted through its login node, the one host ddptui logs into,
    and run on the nodes Slurm gives (instead of hosts:)."""

    login: str = Field(
        min_length=1,
        description="The login node: an ssh host, reached as any host is (ssh_config, jump "
        "hosts, the defaults' user and keys)",
    )
    nodes: int = Field(ge=1, description="How many nodes (sbatch --nodes)")
    partition: str | None = Field(default=None, description="sbatch --partition")
    account: str | None = Field(default=None, description="sbatch --account")
    time: str | None = Field(default=None, description="sbatch --time, e.g. 4:00:00")
    qos: str | None = Field(default=None, description="sbatch --qos")
    constraint: str | None = Field(default=None, description="sbatch --constraint")
    gpus_per_node: int | str | None = Field(
        default=None,
        description="sbatch --gpus-per-node (8, or a100:8); nproc_per_node: auto takes its count",
    )
    sbatch: list[str] = Field(
        default_factory=list,
        description="Any other sbatch option, passed as given (not those ddptui sets: "
        "--nodes, --job-name, --output ...)",
    )

    @field_validator("sbatch")
    @classmethod
    def _not_ours(cls, args: list[str]) -> list[str]:
        for arg in args:
            flag = arg.split("=", 1)[0]
            if flag in SBATCH_OURS or (flag[:2] in SBATCH_OURS and not flag.startswith("--")):
                raise ValueError(f"{arg!r}: ddptui sets {flag} itself (slurm.nodes for the nodes)")
        return args


class _File(_Strict):
    """An inventory.yaml: the hosts (or Slurm), what they share, and the job."""

    model_config = ConfigDict(title="ddptui inventory")

    defaults: _HostFields = Field(
        default_factory=_HostFields, description="Every host, unless it overrides"
    )
    hosts: Annotated[list[_HostEntry], Field(min_length=1)] | Literal["slurm"] | None = Field(
        default=None,
        description="In order: node rank 0, 1, ...; the first is the master. `slurm`: the "
        "nodes of the allocation this runs in (SLURM_JOB_NODELIST)",
    )
    slurm: Slurm | None = Field(default=None, description=Slurm.__doc__)
    job: Job = Field(description=Job.__doc__)

    @model_validator(mode="after")
    def _hosts_or_slurm(self) -> _File:
        if (self.hosts is None) == (self.slurm is None):
            raise ValueError("say either hosts: or slurm: (the nodes Slurm gives)")
        return self


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
    gpus: int | None  # processes for `auto` where no GPU is found
    container: Container | None = None
    ssh_config: str | None = None  # `ssh -F`: this file instead of ~/.ssh/config and /etc/ssh's
    # The attempt this node's supervisor started at: a spare's, the one it joined in a lost
    # node's place (its private directory on the host is n<rank>-a<since>).
    since: int = 0
    pins: tuple[int, ...] = ()  # `gpus: [0, 1]`: the only GPUs the job may take here

    @property
    def job_python(self) -> str:
        """The job's interpreter: the image's in a container, else the host's `python`."""
        return self.container.python if self.container else self.python


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
    slurm: Slurm | None = None  # handed to Slurm: its hosts are node0... until it says which
    login: Host | None = None  # Slurm's login node, the one host logged into

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


def with_nodes(inv: Inventory, names: Sequence[str], since: int = 0) -> Inventory:
    """A Slurm job's inventory once Slurm has said its nodes, node 0 first; since: the
    attempt its supervisors started at (a job submitted again after a node failed)."""
    hosts = tuple(
        dataclasses.replace(h, host=n, name=n, since=since)
        for h, n in zip(inv.hosts, names, strict=True)
    )
    return dataclasses.replace(inv, hosts=hosts)


def numbered(inv: Inventory) -> Inventory:
    """Node ranks by place: the nodes 0, 1, ..., the spares after them."""
    ranked = [dataclasses.replace(h, node_rank=k) for k, h in enumerate(inv.everyone)]
    n = len(inv.hosts)
    return dataclasses.replace(inv, hosts=tuple(ranked[:n]), spares=tuple(ranked[n:]))


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
