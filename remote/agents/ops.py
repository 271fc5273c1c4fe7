"""The agent's one-answer ops, launcher side: one typed function per op, the only place an
op's answer is read.

The ops and their arguments are named in remote/host/protocol.py; each host serves them in
remote/host/agent.py. What a host answers is data: each function checks its answer's shape
once and hands on typed values, and an answer of the wrong shape raises ReplyError (a
HostError naming the host), never a KeyError in the code that asked. The streams (start,
attach, monitor) are read by remote/agents/link.py and remote/agents/monitor.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, cast

from ddptui.remote.agents.agent import Agent
from ddptui.remote.agents.transport import HostError
from ddptui.remote.events import GpuLease, GpuProcess, HostLeases, LeaseHolder
from ddptui.remote.host import protocol

TEXT_MAX = 1000  # characters kept of a text a host sends (a reason, a path, a verdict)
GPUS_MAX = 1024  # GPUs of one host read at most (what a host sends is bounded)
QUEUE_MAX = 256  # holders and waiters read at most

if TYPE_CHECKING:  # a node's state.json as its host writes and reads it (remote/host/nodes.py)
    from ddptui.remote.host.protocol import NodeState
Runs = dict[str, dict[int, "NodeState | None"]]  # run id → node → its state (None: none kept)


class ReplyError(HostError):
    """A host's answer to an op was not of the shape the op promises."""


class Count(NamedTuple):
    """What `count` found: nvidia-smi's list (None: it failed), the host's
    CUDA_VISIBLE_DEVICES (None: unset), and its GPUs' leases where asked (the probe's, raw:
    remote/checks/probe.py reads them)."""

    listed: str | None
    cuda_visible_devices: str | None
    leases: dict[str, Any] | None = None


class RankDump(NamedTuple):
    """One rank's stack: its main thread's frames, innermost first, each (function, file,
    line, path); `error` when it could not be read."""

    pid: int | None
    frames: tuple[tuple[str, str, int | None, str], ...]
    error: str | None


class FlightDump(NamedTuple):
    """One rank's flight recorder trace (JSON), or why there is none."""

    trace: Any
    error: str | None


class Stacks(NamedTuple):
    """A host's answer to `stacks`: its ranks' stacks and traces, and what stopped it, if
    anything did."""

    problem: str
    ranks: dict[int, RankDump]
    flight: dict[int, FlightDump]


async def probe(agent: Agent, asked: dict[str, Any], timeout: float) -> dict[str, Any]:
    """The checks' facts (remote/host/probe.py), as a dict: remote/checks/probe.py parses
    them, each field of the wrong shape a probe error of its own."""
    return await agent.request(protocol.PROBE, asked, timeout=timeout)


async def count(agent: Agent, timeout: float, asked: dict[str, Any] | None = None) -> Count:
    found = await agent.request(protocol.COUNT, asked, timeout=timeout)
    listed, cvd = found.get("list"), found.get("cuda_visible_devices")
    ok = isinstance(listed, dict) and listed.get("code") == 0
    out = str(listed.get("out", "")) if ok and isinstance(listed, dict) else None
    leases = found.get("leases")
    return Count(
        out, None if cvd is None else str(cvd), leases if isinstance(leases, dict) else None
    )


async def sync_plan(agent: Agent, dest: str, manifest: bytes, timeout: float) -> tuple[str, ...]:
    """The files of `manifest` (JSON: path → [size, sha256, mtime]) the host lacks in dest."""
    found = await agent.request(protocol.SYNC_PLAN, {"dest": dest}, data=manifest, timeout=timeout)
    need = found.get("need", [])
    if not isinstance(need, list):
        raise _wrong(agent, protocol.SYNC_PLAN)
    return tuple(str(rel) for rel in need)


async def sync_put(agent: Agent, dest: str, tar: bytes, timeout: float) -> None:
    await agent.request(protocol.SYNC_PUT, {"dest": dest}, data=tar, timeout=timeout)


async def stacks(agent: Agent, spec: dict[str, Any], timeout: float) -> Stacks:
    """Every rank's stack and trace of a node (remote/host/stacks.py), as `spec` asks."""
    found = await agent.request(protocol.STACKS, spec, timeout=timeout)
    try:
        return read_stacks(found)
    except (TypeError, ValueError, AttributeError):
        raise _wrong(agent, protocol.STACKS) from None


def read_stacks(found: dict[str, Any]) -> Stacks:
    """A `stacks` answer, typed; raises TypeError, ValueError or AttributeError if it is not
    of that shape."""
    ranks = {int(r): _rank_dump(got) for r, got in _dict(found.get("ranks")).items()}
    flight = {int(r): _flight_dump(got) for r, got in _dict(found.get("flight")).items()}
    return Stacks(_text(found.get("problem")), ranks, flight)


async def flight(agent: Agent, run_id: str, node: int, traces: bytes, timeout: float) -> str:
    """torch's analyser's verdict on the traces, run on this host (remote/stalls/flight.py)."""
    args = {"run_id": run_id, "node": node}
    found = await agent.request(protocol.FLIGHT, args, data=traces, timeout=timeout)
    return str(found.get("verdict") or "")


async def hangs(agent: Agent, run_id: str, since: int) -> dict[str, str]:
    """The hangs node 0's host kept for the run (remote/host/watch.py): each file's name and
    text (remote/stalls/kept.py writes only the names and JSON it knows)."""
    found = await agent.request(protocol.HANGS, {"run_id": run_id, "since": since})
    records = found.get("records")
    if not isinstance(records, dict):
        return {}
    return {str(name): text for name, text in records.items() if isinstance(text, str)}


async def sweep(agent: Agent, run_id: str, node: int, grace: float) -> list[str]:
    """Stop what is left of a node by the run's tags: what could not be killed."""
    args = {"run_id": run_id, "node": node, "grace": grace}
    found = await agent.request(protocol.SWEEP, args)
    survivors = found.get("survivors") or []
    if not isinstance(survivors, list):
        raise _wrong(agent, protocol.SWEEP)
    return [_text(text) for text in survivors]


async def status(
    agent: Agent, nodes: Sequence[tuple[str, int, int]], *, series: bool = False
) -> Runs:
    """The states of nodes (run id, node, since) this host keeps; node 0's with its training
    curve under "series" when asked."""
    ask: dict[str, Any] = {"nodes": [list(n) for n in nodes]}
    if series:
        ask["series"] = True
    found = await agent.request(protocol.STATUS, ask)
    try:
        return {
            str(run_id): {int(k): _state(state) for k, state in _dict(states).items()}
            for run_id, states in _dict(found.get("runs", {})).items()
        }
    except (TypeError, ValueError):
        raise _wrong(agent, protocol.STATUS) from None


async def standby(agent: Agent, request: dict[str, Any]) -> None:
    """A hot spare's standby started on this host (remote/host/standby.py): idle until node 0's
    hub says which node it takes."""
    await agent.request(protocol.STANDBY, request)


async def gpu_leases(agent: Agent, node_rank: int) -> HostLeases:
    """Every GPU's lease on the host and the launches waiting for them (`ddptui who`)."""
    found = await agent.request(protocol.GPU_LEASES)
    try:
        return read_host_leases(agent.name, node_rank, found)
    except (TypeError, ValueError, KeyError, AttributeError):
        raise _wrong(agent, protocol.GPU_LEASES) from None


def read_host_leases(name: str, node_rank: int, found: Any) -> HostLeases:
    """A host's leases as its agent tells them (`gpu-leases`, the probe's, `count`'s); raises
    TypeError, ValueError, KeyError or AttributeError if they are not of that shape."""
    if found.get("error"):
        return HostLeases(name, node_rank, None, error=_text(found["error"]))
    now = float(found["now"])
    gpus = found.get("gpus")
    each = None if gpus is None else tuple(_gpu_lease(g, now) for g in gpus[:GPUS_MAX])
    queue = tuple(read_holder(t, now) for t in found.get("queue", ())[:QUEUE_MAX])
    return HostLeases(name, node_rank, each, queue)


class Leasing(NamedTuple):
    """One word of a host's agent on a `gpu-lease` channel (remote/host/leaseop.py): `kind`
    none, held, handed, short, wait, ready or error, and what goes with it."""

    kind: str
    counter: int = 0  # the queue's highest key on the host
    gpus: tuple[int, ...] = ()  # held: their indices
    cvd: str = ""  # held: the job's CUDA_VISIBLE_DEVICES
    dead: tuple[LeaseHolder, ...] = ()  # held: runs that died holding some of them
    held: tuple[LeaseHolder, ...] = ()  # short, wait: who holds what it needs
    busy: tuple[tuple[int, GpuProcess], ...] = ()  # short, wait: (GPU, foreign process)
    ahead: tuple[LeaseHolder, ...] = ()  # short, wait: launches waiting before it
    never: bool = False  # short: refused however long it waited (busy GPUs, busy_gpus: refuse)
    taking: int = 0  # GPUs it takes there
    error: str = ""


LEASINGS = ("none", "held", "handed", "short", "wait", "ready", "error")


def read_leasing(msg: Any) -> Leasing:
    """A `gpu-lease` word, typed; raises TypeError, ValueError, KeyError or AttributeError if
    it is not of that shape."""
    kind = msg["t"]
    if kind not in LEASINGS:
        raise ValueError(kind)
    now = float(msg.get("now") or 0.0)
    busy = tuple(
        (int(b["gpu"]), GpuProcess(int(b["pid"]), 0, _text(b.get("process"))[:200],
                                   _text(b.get("user"))[:64]))
        for b in msg.get("busy", ())[:GPUS_MAX]
    )  # fmt: skip
    return Leasing(
        kind, int(msg.get("counter") or 0), tuple(int(i) for i in msg.get("gpus", ())[:GPUS_MAX]),
        _text(msg.get("cvd")),
        tuple(read_holder(h, now) for h in msg.get("dead", ())[:QUEUE_MAX]),
        tuple(read_holder(h, now) for h in msg.get("held", ())[:QUEUE_MAX]), busy,
        tuple(read_holder(h, now) for h in msg.get("ahead", ())[:QUEUE_MAX]),
        msg.get("never") is True, int(msg.get("count") or 0), _text(msg.get("error")),
    )  # fmt: skip


def read_holder(found: Any, now: float) -> LeaseHolder:
    """A holder's (or waiter's) record as a host tells it; its age by the host's own clock."""
    since, node = found.get("since"), found.get("node")
    return LeaseHolder(
        _text(found.get("user"))[:64] or "?", _text(found.get("run_id"))[:64] or "?",
        node if isinstance(node, int) else None,
        max(0.0, now - since) if isinstance(since, int | float) else None,
        _text(found.get("mode"))[:16], _text(found.get("launcher"))[:128],
        tuple(i for i in found.get("gpus") or () if isinstance(i, int))[:GPUS_MAX],
        _int(found.get("count")) or 0, _int(found.get("key")), _int(found.get("swept")) or 0,
    )  # fmt: skip


def _gpu_lease(found: Any, now: float) -> GpuLease:
    holder, dead = found.get("holder"), found.get("dead")
    procs = tuple(
        GpuProcess(int(pid), 0, _text(name)[:200], _text(user)[:64])
        for pid, name, user in found.get("procs", ())[:16]
    )
    state: Literal["free", "held", "busy"] = "held" if holder else "busy" if procs else "free"
    return GpuLease(
        int(found["index"]), _text(found.get("name"))[:100], state,
        read_holder(holder, now) if holder else None, read_holder(dead, now) if dead else None,
        procs,
    )  # fmt: skip


async def port(agent: Agent) -> int | None:
    """A free TCP port on the host; None if what it said is not one."""
    got = (await agent.request(protocol.PORT)).get("port")
    return got if isinstance(got, int) and 0 < got < 65536 else None


class SlurmReply(NamedTuple):
    """One of Slurm's commands, run on the login node (remote/host/slurmcmd.py): its exit
    status (None: it did not end), its output; `dir`, the run's directory there, when asked
    to prepare it; `output`, the end of a file of it, when asked to read one; `test_code` and
    `test_err`, the command run first when asked to test (argv ran only if it exited 0)."""

    code: int | None
    out: str
    err: str
    dir: str
    output: str
    test_code: int | None = None
    test_err: str = ""


async def slurm(
    agent: Agent, argv: Sequence[str], *, input: str = "", prepare: str = "", read: str = "",
    test: Sequence[str] = (), timeout: float = 60.0,
) -> SlurmReply:  # fmt: skip
    ask: dict[str, Any] = {"argv": list(argv), "input": input, "timeout": timeout}
    if prepare:
        ask["prepare"] = prepare
    if read:
        ask["read"] = read
    if test:
        ask["test"] = list(test)
    found = await agent.request(protocol.SLURM, ask, timeout=(timeout + 5) * 2)
    tested = _dict(found.get("test"))
    return SlurmReply(
        _code(found.get("code")), _text_long(found.get("out")), _text_long(found.get("err")),
        _text(found.get("dir")), _text_long(found.get("output")), _code(tested.get("code")),
        _text_long(tested.get("err")),
    )  # fmt: skip


def _code(value: Any) -> int | None:
    return value if isinstance(value, int) else None


# -- the shape of an answer ---------------------------------------------------------------------


def _wrong(agent: Agent, op: str) -> ReplyError:
    return ReplyError(agent.name, f"{op}: its agent's answer is not understood")


def _dict(value: Any) -> dict[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(type(value).__name__)
    return value


def _text(value: Any) -> str:
    return str(value or "")[:TEXT_MAX]


def _text_long(value: Any) -> str:
    """A command's output: bounded by its host (1 MiB), text."""
    return str(value or "")[-(1 << 20) :]


def _state(value: Any) -> NodeState | None:
    if value is not None and not isinstance(value, dict):
        raise TypeError(type(value).__name__)
    return cast("NodeState | None", value)


def _rank_dump(got: dict[str, Any]) -> RankDump:
    threads = got.get("threads") or []
    main = next((th for th in threads if th.get("main")), threads[0] if threads else None)
    frames = tuple(
        (str(f.get("function") or "?"), str(f.get("file") or "?"), _line(f.get("line")),
         str(f.get("path") or ""))
        for f in _dict(main).get("frames", ())
    )  # fmt: skip
    pid = got.get("pid")
    error = got.get("error")
    return RankDump(pid if isinstance(pid, int) else None, frames, _text(error) if error else None)


def _flight_dump(got: Any) -> FlightDump:
    if isinstance(got, dict) and "trace" in got:
        return FlightDump(got["trace"], None)
    return FlightDump(None, str(_dict(got).get("error", "no trace"))[:TEXT_MAX])


def _line(value: Any) -> int | None:
    return value if isinstance(value, int) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
