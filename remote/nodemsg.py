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

from .host import protocol, wire

TEXT_MAX = 4096  # characters of any one reason or message kept


@dataclass(frozen=True, slots=True)
class Started:
    pid: int
    hostname: str
    ifname: str | None
    hub_port: int | None
    mode: str
    ranks: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Ranks:
    ranks: tuple[int, ...]
    world: int | None


@dataclass(frozen=True, slots=True)
class Stopping:
    by: str
    reason: str
    node: int | None  # whose failure or loss the stop answers, when another node's


@dataclass(frozen=True, slots=True)
class Exit:
    code: int | None
    stopped: bool
    by: str | None
    reason: str | None
    node: int | None
    survivors: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class StartError:
    msg: str


@dataclass(frozen=True, slots=True)
class Trimmed:
    """The host trimmed its spool (meta: bytes, max), or a reader missed bytes (control)."""

    bytes: int = 0
    max: int = 0
    missed: int = 0


@dataclass(frozen=True, slots=True)
class Mode:
    mode: str


Message = Started | Ranks | Stopping | Exit | StartError | Trimmed | Mode


def parse(msg: dict[str, Any]) -> Message | None:
    kind = msg.get("t")
    try:
        return _PARSERS[kind](msg) if kind in _PARSERS else None
    except (KeyError, TypeError, ValueError) as exc:
        what = f"a {kind} message that does not hold ({exc!r})"
        raise wire.Garbage(what, repr(msg).encode()) from None


def _text(value: Any) -> str:
    return str(value)[:TEXT_MAX]


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


_PARSERS: dict[Any, Callable[[dict[str, Any]], Message]] = {
    protocol.STARTED: lambda m: Started(
        _int(m["pid"]), _text(m.get("hostname", "")), _opt_text(m.get("ifname")),
        _opt_int(m.get("hub_port")), _text(m.get("mode", "attached")), _ints(m.get("ranks")),
    ),
    protocol.RANKS: lambda m: Ranks(_ints(m["ranks"]), _opt_int(m.get("world"))),
    protocol.STOPPING: lambda m: Stopping(
        _text(m.get("by", "")), _text(m.get("reason", "")), _opt_int(m.get("node"))
    ),
    protocol.EXIT: lambda m: Exit(
        _opt_int(m.get("code")), bool(m.get("stopped")), _opt_text(m.get("by")),
        _opt_text(m.get("reason")), _opt_int(m.get("node")),
        tuple(_text(s) for s in m.get("survivors") or ()),
    ),
    protocol.ERROR: lambda m: StartError(_text(m.get("msg", "the node could not start"))),
    protocol.TRIMMED: lambda m: Trimmed(
        _int(m.get("bytes", 0)), _int(m.get("max", 0)), _int(m.get("missed", 0))
    ),
    protocol.MODE: lambda m: Mode(_text(m["mode"])),
}  # fmt: skip
