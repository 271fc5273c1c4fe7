"""Every rank's stack, launcher side: grouped, what a stalled job is doing on every host at once.

`dump()` asks every host's agent in one op (remote/host/stacks.py: py-spy on each rank process
of the run, side by side) and groups identical stacks (LLNL STAT's idea): with 512 dumps, the
odd group out is the answer, so the smallest groups come first. A group is keyed by the main
thread's frames (function, file, line), innermost first.

`capture()` also saves the report in the run directory (`stacks-<time>.txt`, and `.json`) and,
with the flight recorder on, the ranks' NCCL traces (`traces()`, a round trip of its own beside
the stacks') with the analyser's verdict (flight.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ddptui.remote import fold
from ddptui.remote.agents import ops
from ddptui.remote.agents.fleet import Fleet
from ddptui.remote.agents.transport import HostError
from ddptui.remote.events import Event, Notice, StacksCaptured
from ddptui.remote.host.flightfiles import FOLDER
from ddptui.remote.stalls import flight
from ddptui.remote.store.record import private_dir, replace_private

TIMEOUT = 60.0
FLIGHT_WAIT = 15.0  # seconds the ranks have to write their traces (a first dump: ~5 s here)
ANALYSE_S = 150.0  # the analyser on node 0's host (its own timeout is 120 s)
SHOWN_FRAMES = 8  # frames of a group on its text line; the JSON and the file have them all

Emit = Callable[[Event], None]

PTRACE_NEEDED = (
    "ptrace needs root, kernel.yama.ptrace_scope 0 or CAP_SYS_PTRACE (docker: --cap-add SYS_PTRACE)"
)


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: int | None
    path: str = ""  # the full path on the host (the JSON has it; the text shows `file`)

    def text(self) -> str:
        return f"{self.function} ({self.file}:{self.line if self.line is not None else '?'})"


@dataclass(frozen=True)
class RankStack:
    rank: int
    host: str
    pid: int | None
    frames: tuple[Frame, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class Group:
    ranks: tuple[int, ...]
    hosts: tuple[str, ...]
    frames: tuple[Frame, ...] = ()
    error: str | None = None  # ranks whose stack could not be read, and why

    def label(self) -> str:
        many = len(self.ranks) > 1
        what = f"ranks {fold.ranks(self.ranks)}" if many else f"rank {self.ranks[0]}"
        return f"{what} ({fold.hosts(self.hosts)})"

    def line(self, frames: int = SHOWN_FRAMES) -> str:
        if self.error is not None:
            return f"no stack: {self.error}"
        shown = " ← ".join(f.text() for f in self.frames[:frames])
        return shown + (" ← …" if len(self.frames) > frames else "") or "(no Python frame)"


@dataclass
class Report:
    run_id: str
    groups: tuple[Group, ...] = ()
    problems: dict[str, str] = field(default_factory=dict)  # host → why it gave no stacks
    elapsed: float = 0.0
    flight: flight.Collected | None = None

    def text(self, frames: int = SHOWN_FRAMES, flight_recorder: bool = True) -> str:
        """One line per group, odd ones out first, then each host that gave nothing, then
        (unless not `flight_recorder`) what became of the flight recorder's traces."""
        labels = [g.label() for g in self.groups]
        width = max(map(len, labels), default=0) + 2
        lines = [
            f"{label:<{width}}{g.line(frames)}"
            for label, g in zip(labels, self.groups, strict=True)
        ]
        lines += [f"{host}: {why}" for host, why in self.problems.items()]
        if flight_recorder and self.flight is not None:
            lines += self.flight.lines()
        return "\n".join(lines or ["no rank of this run found on any host"])

    def as_json(self) -> dict[str, Any]:
        def group(g: Group) -> dict[str, Any]:
            out: dict[str, Any] = {"ranks": list(g.ranks), "hosts": list(g.hosts)}
            if g.error is None:
                out["frames"] = [asdict(f) for f in g.frames]
            else:
                out["error"] = g.error
            return out

        return {
            "run_id": self.run_id,
            "groups": [group(g) for g in self.groups if g.error is None],
            "errors": [group(g) for g in self.groups if g.error is not None],
            "hosts": self.problems,
            "elapsed_s": round(self.elapsed, 3),
            **({"flight_recorder": self.flight.as_json()} if self.flight else {}),
        }


async def dump(fleet: Fleet, emit: Emit, run_id: str, *, native: bool = False) -> Report:
    """Every rank's stack on every host (one op each, all hosts at once), grouped."""
    t0 = time.monotonic()
    answers = await _ask(fleet, emit, run_id, native=native, stacks=True, flight_wait=0)
    stacks: list[RankStack] = []
    problems: dict[str, str] = {}
    for host, answer in zip(fleet.hosts[: fleet.nnodes], answers, strict=True):
        name = host.name
        if isinstance(answer, str):
            problems[name] = answer
            continue
        if answer.problem:
            problems[name] = answer.problem
        stacks += _rank_stacks(name, answer)
    return Report(run_id, group(stacks), problems, time.monotonic() - t0)


async def traces(fleet: Fleet, emit: Emit, run_id: str) -> flight.Collected:
    """Every rank's flight recorder trace, asked for through its dump pipe. An op of its own
    beside the stacks': a rank's first dump can take seconds."""
    answers = await _ask(fleet, emit, run_id, stacks=False, flight_wait=FLIGHT_WAIT)
    sent: dict[int, list[tuple[str, ops.FlightDump]]] = {}  # rank → each host's word on it
    for host, answer in zip(fleet.hosts[: fleet.nnodes], answers, strict=True):
        if isinstance(answer, str):
            continue  # the stacks' op says why the host gave nothing
        for rank, got in answer.flight.items():
            sent.setdefault(rank, []).append((host.name, got))
    return flight.collect(sent)


def analyser(fleet: Fleet, emit: Emit, run_id: str) -> flight.Analyse:
    """torch's analyser, run by node 0's host on the traces (its python, its private dir)."""

    async def analyse(data: bytes) -> str:
        try:
            agent = await fleet.agent(0, emit)
            return await ops.flight(agent, run_id, 0, data, ANALYSE_S)
        except HostError as exc:
            return f"the analyser could not run on {fleet.hosts[0].name}: {exc.reason}"

    return analyse


async def _ask(fleet: Fleet, emit: Emit, run_id: str, **what: object) -> list[ops.Stacks | str]:
    """Every host's answer, or why it gave none."""
    nnodes = fleet.nnodes

    async def one(k: int) -> ops.Stacks | str:
        since = fleet.hosts[k].since  # a spare in a lost node's place keeps it apart
        spec = {"run_id": run_id, "node": k, "since": since, "nnodes": nnodes, **what}
        try:
            agent = await fleet.agent(k, emit)
            return await ops.stacks(agent, spec, TIMEOUT)
        except HostError as exc:
            return exc.reason

    return list(await asyncio.gather(*(one(k) for k in range(nnodes))))


def _rank_stacks(host: str, answer: ops.Stacks) -> list[RankStack]:
    out = []
    for rank, got in answer.ranks.items():
        error = got.error
        if error and _refused(error):
            error = f"{error} ({PTRACE_NEEDED})"
        frames = tuple(Frame(*f) for f in got.frames)
        out.append(RankStack(rank, host, got.pid, frames, error))
    return out


def _refused(error: str) -> bool:
    """py-spy's words when ptrace is not allowed."""
    lowered = error.lower()
    return "permission denied" in lowered or "not permitted" in lowered


def group(stacks: Sequence[RankStack]) -> tuple[Group, ...]:
    """Identical stacks together; the smallest groups (the odd ones out) first, then by rank.
    Ranks whose stack could not be read come last, grouped by why."""
    by_key: dict[tuple[Any, ...], list[RankStack]] = {}
    for s in sorted(stacks, key=lambda s: s.rank):
        where = tuple((f.function, f.file, f.line) for f in s.frames)
        key = ("error", s.error) if s.error else where
        by_key.setdefault(key, []).append(s)
    groups = [
        Group(
            tuple(s.rank for s in members),
            tuple(dict.fromkeys(s.host for s in members)),
            members[0].frames,
            members[0].error,
        )
        for members in by_key.values()
    ]
    return tuple(sorted(groups, key=lambda g: (g.error is not None, len(g.ranks), g.ranks)))


def _stamp(run_dir: Path) -> str:
    """The time, made unique among the run's dumps (a hang's and one asked for may meet)."""
    stamp = base = time.strftime("%Y%m%d-%H%M%S")
    n = 1
    while (run_dir / f"stacks-{stamp}.txt").exists():
        n += 1
        stamp = f"{base}-{n}"
    return stamp


async def capture(
    fleet: Fleet,
    run_id: str,
    run_dir: Path,
    emit: Emit | None = None,
    *,
    native: bool = False,
    flight_recorder: bool = False,
    dumped: Callable[[Report], None] | None = None,
) -> tuple[Report, Path]:
    """Dump, then save the report in the run dir (`stacks-<time>.txt` and `.json`); with the
    flight recorder, its traces and the analyser's verdict too. Says what it saved on `emit`.
    `dumped` sees the stacks before the traces (they take longer) and their analysis. Hosts
    whose agent is not up yet are connected to first."""
    say = emit or (lambda event: None)
    flights = asyncio.ensure_future(traces(fleet, say, run_id)) if flight_recorder else None
    try:
        report = await dump(fleet, say, run_id, native=native)
    except BaseException:
        if flights is not None:
            flights.cancel()
        raise
    private_dir(run_dir)
    stamp = _stamp(run_dir)
    path = run_dir / f"stacks-{stamp}.txt"
    _save(report, path)
    if dumped is not None:
        dumped(report)
    if emit is not None:
        first = report.text().splitlines()[0]
        emit(StacksCaptured(str(path), first))
        emit(Notice("warning", f"every rank's stack saved to {path}; first: {first}"))
    if flights is not None:
        report.flight = await flights
        analyse = analyser(fleet, say, run_id)
        await report.flight.save(run_dir / f"{FOLDER}{stamp}", analyse)
        _save(report, path)  # with the traces' fate and the verdict
    return report, path


def _save(report: Report, path: Path) -> None:
    replace_private(path, report.text(frames=1_000) + "\n")
    replace_private(path.with_suffix(".json"), json.dumps(report.as_json(), indent=2) + "\n")
