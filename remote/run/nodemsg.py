"""What a node's supervisor says (remote/host/protocol.py), as typed values for the launcher.

`parse()` takes a message from a node's stream (a spool meta record, or an out-of-band control
message) and gives the typed value, None for what the launcher need not act on (heartbeats), or
raises wire.Garbage for a message of a known kind whose fields are not what they must be: what
a host sends is data, checked before anything acts on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ddptui.remote.host import protocol, wire
from ddptui.remote.host.safetext import clean

TEXT_MAX = 4096  # characters of any one reason or message kept
EVIDENCE_MAX = 8  # lines of a health verdict's evidence kept
EVIDENCE_LINE_MAX = 1024  # characters of each


@dataclass(frozen=True, slots=True)
class Started:
    pid: int
    hostname: str
    ifname: str | None
    hub_port: int | None
    mode: str
    ranks: tuple[int, ...]
    attempt: int = 0


@dataclass(frozen=True, slots=True)
class HubPort:
    """Node 0's: where the run's hub listens (the launcher tells the other nodes)."""

    port: int


@dataclass(frozen=True, slots=True)
class Ranks:
    ranks: tuple[int, ...]
    world: int | None


@dataclass(frozen=True, slots=True)
class Stopping:
    by: str
    reason: str
    node: int | None  # whose failure or loss the stop answers, when another node's
    grace: float | None = None  # TERM went: KILL after this (None: a supervisor that says not)
    checkpoint: str | None = None  # job.checkpoint: where the ranks may finish a save


@dataclass(frozen=True, slots=True)
class RankEnd:
    """The first of a node's rank processes to end, as its supervisor saw it."""

    rank: int
    code: int | None  # as subprocess says it (-9: SIGKILL); None where it could not tell
    at: float  # host clock


@dataclass(frozen=True, slots=True)
class Exit:
    code: int | None
    stopped: bool
    by: str | None
    reason: str | None
    node: int | None
    survivors: tuple[str, ...]
    attempt: int = 0
    died: RankEnd | None = None
    evidence: tuple[str, ...] = ()  # a health verdict's: each read's exit, stderr, row


@dataclass(frozen=True, slots=True)
class StartError:
    msg: str
    attempt: int = 0


@dataclass(frozen=True, slots=True)
class Restart:
    """Node 0's hub: every node starts `attempt` after `delay` s, once a spare host has taken
    each `replace` node's place."""

    attempt: int
    of: int
    after: str
    node: int | None
    delay: float
    replace: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Notify:
    event: str
    status: str
    message: str
    wanted: bool


@dataclass(frozen=True, slots=True)
class RunEnd:
    """Node 0's hub: the run ends with `status`; why no attempt follows ("": nothing to say
    beyond the status and the failure, e.g. no restarts were asked for)."""

    status: str
    why: str


@dataclass(frozen=True, slots=True)
class NotifyFailed:
    event: str
    error: str


@dataclass(frozen=True, slots=True)
class Trimmed:
    """The host trimmed its spool (meta: bytes, max), or a reader missed bytes (control: the
    `missed` bytes before offset `at`, where the spool now starts)."""

    bytes: int = 0
    max: int = 0
    missed: int = 0
    at: int = 0


@dataclass(frozen=True, slots=True)
class Mode:
    mode: str


@dataclass(frozen=True, slots=True)
class Health:
    """News of a host's GPUs or NICs since the attempt began: a failure ends it."""

    level: str  # failure, warning
    text: str
    attempt: int


@dataclass(frozen=True, slots=True)
class SpareNews:
    """Node 0's hub: a hot spare's standby lost, or put in a lost or bad node's place."""

    level: str  # info, warning
    text: str


@dataclass(frozen=True, slots=True)
class PeerRefused:
    """Node 0's hub: a host proved its own key claiming another's node, and was refused."""

    text: str


@dataclass(frozen=True, slots=True)
class BadHost:
    """Node 0's hub: a host no attempt of the run may use again, and why."""

    node: int
    name: str
    why: str


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Node 0: the job saved a new newest checkpoint (job.checkpoint)."""

    path: str
    step: int | None
    at: float  # node 0's clock: when it was written


@dataclass(frozen=True, slots=True)
class Saved:
    """Node 0: a failed attempt against its newest checkpoint (job.checkpoint)."""

    attempt: int
    path: str  # "": none yet
    step: int | None  # the checkpoint's
    reached: int | None  # the attempt's, as its lines said
    lost: int | None


@dataclass(frozen=True, slots=True)
class Redrawn:
    """A rank's line still being redrawn (a tqdm bar): its last drawing, for progress only."""

    rank: int
    text: str


Message = (
    Started
    | HubPort
    | Ranks
    | Stopping
    | Exit
    | StartError
    | Trimmed
    | Mode
    | Restart
    | Notify
    | RunEnd
    | NotifyFailed
    | Redrawn
    | Health
    | SpareNews
    | PeerRefused
    | BadHost
    | Checkpoint
    | Saved
)


def parse(msg: dict[str, Any]) -> Message | None:
    kind = msg.get("t")
    try:
        return _PARSERS[kind](msg) if kind in _PARSERS else None
    except (KeyError, TypeError, ValueError) as exc:
        what = f"a {kind} message that does not hold ({exc!r})"
        raise wire.Garbage(what, repr(msg).encode()) from None


def _text(value: Any) -> str:
    return str(value)[:TEXT_MAX]


def _evidence(value: Any) -> tuple[str, ...]:
    """A health verdict's evidence: a few lines, each bounded and made safe to show."""
    lines = value[:EVIDENCE_MAX] if isinstance(value, list) else ()
    return tuple(clean(str(line)[:EVIDENCE_LINE_MAX]) for line in lines)


def _opt_text(value: Any) -> str | None:
    return None if value is None else _text(value)


def _opt_int(value: Any) -> int | None:
    return None if value is None else _int(value)


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{value!r} is not an integer")
    return value


def _ints(values: Any) -> tuple[int, ...]:
    return tuple(_int(v) for v in values or ())


def _died(value: Any) -> RankEnd | None:
    if value is None:
        return None
    return RankEnd(_int(value["rank"]), _opt_int(value.get("code")), _epoch(value["at"]))


def _attempt(m: dict[str, Any]) -> int:
    return _int(m.get("attempt", 0))


def _seconds(value: Any, most: float = 1e9) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise TypeError(f"{value!r} is not a number of seconds")
    return float(min(value, most))


def _epoch(value: Any) -> float:
    """A host's time.time(): bounded, but far past today (1e9 s was 2001: every rank's death
    would have been the same instant, and the first failure a matter of list order)."""
    return _seconds(value, 1e11)


_PARSERS: dict[Any, Callable[[dict[str, Any]], Message]] = {
    protocol.STARTED: lambda m: Started(
        _int(m["pid"]), _text(m.get("hostname", "")), _opt_text(m.get("ifname")),
        _opt_int(m.get("hub_port")), _text(m.get("mode", "attached")), _ints(m.get("ranks")),
        _attempt(m),
    ),
    protocol.HUB_PORT: lambda m: HubPort(_int(m["port"])),
    protocol.RANKS: lambda m: Ranks(_ints(m["ranks"]), _opt_int(m.get("world"))),
    protocol.STOPPING: lambda m: Stopping(
        _text(m.get("by", "")), _text(m.get("reason", "")), _opt_int(m.get("node")),
        None if m.get("grace") is None else _seconds(m["grace"]), _opt_text(m.get("checkpoint")),
    ),
    protocol.EXIT: lambda m: Exit(
        _opt_int(m.get("code")), bool(m.get("stopped")), _opt_text(m.get("by")),
        _opt_text(m.get("reason")), _opt_int(m.get("node")),
        tuple(_text(s) for s in m.get("survivors") or ()), _attempt(m), _died(m.get("died")),
        _evidence(m.get("evidence")),
    ),
    protocol.ERROR: lambda m: StartError(
        _text(m.get("msg", "the node could not start")), _attempt(m)
    ),
    protocol.TRIMMED: lambda m: Trimmed(
        _int(m.get("bytes", 0)), _int(m.get("max", 0)), _int(m.get("missed", 0)),
        _int(m.get("at", 0)),
    ),
    protocol.MODE: lambda m: Mode(_text(m["mode"])),
    protocol.RESTART: lambda m: Restart(
        _int(m["attempt"]), _int(m["of"]), _text(m.get("after") or ""), _opt_int(m.get("node")),
        _seconds(m.get("delay", 0)), _ints(m.get("replace")),
    ),
    protocol.NOTIFY: lambda m: Notify(
        _text(m["event"]), _text(m.get("status", "")), _text(m.get("message", "")),
        bool(m.get("wanted")),
    ),
    protocol.RUN_END: lambda m: RunEnd(_text(m["status"]), _text(m.get("why") or "")),
    protocol.NOTIFY_FAILED: lambda m: NotifyFailed(_text(m["event"]), _text(m.get("error", ""))),
    protocol.REDRAWN: lambda m: Redrawn(_int(m["rank"]), _text(m["text"])),
    protocol.HEALTH: lambda m: Health(_text(m.get("level", "")), _text(m["text"]), _attempt(m)),
    protocol.SPARE_NEWS: lambda m: SpareNews(_text(m.get("level", "")), _text(m["text"])),
    protocol.PEER_REFUSED: lambda m: PeerRefused(_text(m["text"])),
    protocol.BAD_HOST: lambda m: BadHost(_int(m["node"]), _text(m["name"]), _text(m["why"])),
    protocol.CHECKPOINT: lambda m: Checkpoint(
        _text(m["path"]), _opt_int(m.get("step")), _epoch(m["at"])
    ),
    protocol.SAVED: lambda m: Saved(
        _int(m["attempt"]), _text(m.get("path") or ""), _opt_int(m.get("step")),
        _opt_int(m.get("reached")), _opt_int(m.get("lost")),
    ),
}  # fmt: skip
