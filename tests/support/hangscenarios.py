"""The hang scenarios: sample streams of hung and of silent-but-alive jobs, and every hang rule
run against each (tests/unit/test_hangrule.py asserts them; scripts/hang_scenarios.py prints the
table for docs/benchmarks.md).

A scenario is each rank's phases in time (its stack, its tree's CPU seconds and I/O bytes per
second) and the times lines were printed. The stacks of a gloo rank waiting in an all_reduce, in
DDP's backward and of a rank sleeping before it are py-spy's, recorded from
tests/data/hangs/recorded_job.py (torchrun --nproc_per_node 3, rank 1 stuck; WHERE=ddp for the
backward); the others are written as py-spy shows such code. Time is simulated: a scenario of an
hour runs in milliseconds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddptui.remote.host.hangrule import HangRule

RECORDED = json.loads(
    (Path(__file__).parents[1] / "data" / "hangs" / "recorded_stacks.json").read_text()
)
ALL_REDUCE = RECORDED["ar"]["0"]
DDP_BACKWARD = RECORDED["ddp"]["0"]
STUCK_BEFORE = RECORDED["ar"]["1"]  # `while True: time.sleep(1)` at the script's top level
BARRIER = [
    ["barrier", "torch/distributed/distributed_c10d.py", 4780],
    ["_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 83],
    ["main", "train.py", 88],
]
BROADCAST = [
    ["broadcast", "torch/distributed/distributed_c10d.py", 2714],
    ["_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 83],
    ["main", "train.py", 91],
]
SAVE = [
    ["write", "torch/serialization.py", 826],
    ["_save", "torch/serialization.py", 1215],
    ["save", "torch/serialization.py", 965],
    ["main", "train.py", 87],
]
DATALOADER_WAIT = [  # the rank waits on its workers' queue: its workers do the work
    ["wait", "threading.py", 359],
    ["get", "multiprocessing/queues.py", 113],
    ["_try_get_data", "torch/utils/data/dataloader.py", 1133],
    ["__next__", "torch/utils/data/dataloader.py", 733],
    ["main", "train.py", 70],
]
COMPILE_WAIT = [  # torch.compile's workers compile: the rank waits on their futures
    ["wait", "threading.py", 355],
    ["result", "concurrent/futures/_base.py", 451],
    ["wait_on_futures", "torch/_inductor/async_compile.py", 402],
    ["main", "train.py", 72],
]


def training(t: float) -> list[list[Any]]:
    """A training step's stack at time t: forward, backward, optimizer, at 1.7 s a step."""
    phase = int(t / 0.35) % 5
    lines = [("forward", 40), ("_engine_run_backward", 979), ("step", 120), ("forward", 41),
             ("_engine_run_backward", 979)]  # fmt: skip
    function, line = lines[phase]
    where = "torch/autograd/graph.py" if function == "_engine_run_backward" else "model.py"
    return [[function, where, line], ["main", "train.py", 60 + phase]]


def evaluation(t: float) -> list[list[Any]]:
    return [["forward", "model.py", 40 + int(t) % 7], ["evaluate", "train.py", 95]]


Stack = list[list[Any]] | Callable[[float], list[list[Any]]]


@dataclass
class Phase:
    start: float
    stack: Stack
    cpu: float = 0.0  # CPU seconds per second
    io: float = 0.0  # bytes per second
    in_io: bool = False


@dataclass
class Scenario:
    name: str
    what: str
    ranks: dict[int, list[Phase]]  # each rank's phases, by start
    lines: list[float]  # when the job printed a line
    duration: float
    hang_at: float | None = None  # the last progress of a hung job (None: alive all along)
    culprits: list[int] = field(default_factory=list)
    hang_after: float | None = None  # job.hang_after, where the user set it

    def phase(self, rank: int, t: float) -> Phase:
        return [p for p in self.ranks[rank] if p.start <= t][-1]

    def quiet(self, t: float) -> float:
        return t - max([x for x in self.lines if x <= t], default=0.0)


def same(ranks: int, *phases: Phase) -> dict[int, list[Phase]]:
    return {r: list(phases) for r in range(ranks)}


TRAIN = Phase(0, training, cpu=1.0)
NCCL_SPIN = 1.0  # CPU seconds per second a rank spins waiting in an NCCL collective


def every(start: float, end: float, step: float) -> list[float]:
    return [start + k * step for k in range(int((end - start) / step) + 1)]


def _hung(stuck: Phase, waiting: Phase, culprit: int = 3) -> dict[int, list[Phase]]:
    ranks = same(8, TRAIN, waiting)
    ranks[culprit] = [TRAIN, stuck]
    return ranks


HANG_AT = 300.0  # every hung scenario: lines every 10 s until its hang


def hung(name: str, what: str, ranks: dict[int, list[Phase]], **kw: Any) -> Scenario:
    return Scenario(name, what, ranks, every(0, HANG_AT, 10), 1200, hang_at=HANG_AT, **kw)


STUCK = Phase(HANG_AT, STUCK_BEFORE)
SCENARIOS = [
    hung(
        "hang-before-all_reduce",
        "rank 3 sleeps before an all_reduce; gloo: the rest block in it",
        _hung(STUCK, Phase(HANG_AT, ALL_REDUCE)),
        culprits=[3],
    ),
    hung(
        "hang-nccl-spin",
        "as above, NCCL: the waiting ranks spin a CPU each",
        _hung(STUCK, Phase(HANG_AT, ALL_REDUCE, cpu=NCCL_SPIN)),
        culprits=[3],
    ),
    hung(
        "hang-ddp-backward",
        "rank 3 stuck in its data loader; the rest in DDP's backward (NCCL)",
        _hung(STUCK, Phase(HANG_AT, DDP_BACKWARD, cpu=NCCL_SPIN)),
        culprits=[3],
    ),
    hung(
        "hang-wrong-collective",
        "rank 5 in a broadcast the others never join; all in collectives",
        {
            **same(8, TRAIN, Phase(HANG_AT, ALL_REDUCE, cpu=NCCL_SPIN)),
            5: [TRAIN, Phase(HANG_AT, BROADCAST, cpu=NCCL_SPIN)],
        },
        culprits=[5],
    ),
    hung(
        "hang-lost-peer",
        "every rank waits in one all_reduce (a peer's link went): no culprit",
        same(8, TRAIN, Phase(HANG_AT, ALL_REDUCE, cpu=NCCL_SPIN)),
    ),
    hung(
        "hang-hang_after-60",
        "rank 3 stuck, job.hang_after: 60 (the user's bound)",
        _hung(STUCK, Phase(HANG_AT, ALL_REDUCE)),
        culprits=[3],
        hang_after=60,
    ),
    Scenario(
        "checkpoint-3min",
        "rank 0 writes a 2 GB checkpoint for 3 min; the others in a barrier",
        {
            **same(8, TRAIN, Phase(300, BARRIER), Phase(480, training, cpu=1.0)),
            0: [
                TRAIN,
                Phase(300, SAVE, cpu=0.05, io=11e6, in_io=True),
                Phase(480, training, cpu=1.0),
            ],
        },
        every(0, 300, 10) + every(480, 1200, 10),
        1200,
    ),
    Scenario(
        "checkpoint-one-write",
        "as above, one 2 GB write() the disk throttles: in D, wchar still",
        {
            **same(8, TRAIN, Phase(300, BARRIER), Phase(480, training, cpu=1.0)),
            0: [TRAIN, Phase(300, SAVE, in_io=True), Phase(480, training, cpu=1.0)],
        },
        every(0, 300, 10) + every(480, 1200, 10),
        1200,
    ),
    Scenario(
        "evaluation-5min",
        "a 5-minute evaluation that prints nothing, every rank",
        same(8, TRAIN, Phase(300, evaluation, cpu=1.0), Phase(600, training, cpu=1.0)),
        every(0, 300, 10) + every(600, 1200, 10),
        1200,
    ),
    Scenario(
        "evaluation-rank0",
        "rank 0 evaluates for 5 min; the others wait in a barrier (gloo)",
        {
            **same(8, TRAIN, Phase(300, BARRIER), Phase(600, training, cpu=1.0)),
            0: [TRAIN, Phase(300, evaluation, cpu=1.0), Phase(600, training, cpu=1.0)],
        },
        every(0, 300, 10) + every(600, 1200, 10),
        1200,
    ),
    Scenario(
        "prints-every-10min",
        "trains all along, one line every 10 minutes (NCCL, DDP)",
        same(8, TRAIN),
        every(0, 3600, 600),
        3600,
    ),
    Scenario(
        "first-step-compile",
        "a 4-minute first step: torch.compile's workers compile",
        same(8, Phase(0, COMPILE_WAIT, cpu=3.0), Phase(240, training, cpu=1.0)),
        every(240, 1200, 10),
        1200,
    ),
    Scenario(
        "first-step-data",
        "a 5-minute first step: rank 2's DataLoader workers fill their queues",
        {
            **same(8, Phase(0, BARRIER), Phase(300, training, cpu=1.0)),
            2: [Phase(0, DATALOADER_WAIT, cpu=2.0, io=50e6), Phase(300, training, cpu=1.0)],
        },
        every(300, 1200, 10),
        1200,
    ),
]


class Sampled:
    """A scenario as the hub sees it: each rank's sample at time t (CPU and I/O integrated)."""

    def __init__(self, sc: Scenario) -> None:
        self.sc = sc

    def sample(self, t: float) -> dict[int, dict[str, Any]]:
        out = {}
        for rank, phases in self.sc.ranks.items():
            cpu = io = 0.0
            for p, nxt in zip(phases, [*phases[1:], None], strict=False):
                end = min(t, nxt.start if nxt else t)
                if end > p.start:
                    cpu, io = cpu + p.cpu * (end - p.start), io + p.io * (end - p.start)
            now = self.sc.phase(rank, t)
            frames = now.stack(t) if callable(now.stack) else now.stack
            out[rank] = {"cpu": round(cpu, 2), "io": int(io), "in_io": now.in_io,
                         "frames": frames}  # fmt: skip
        return out


@dataclass
class Outcome:
    rule: str
    scenario: str
    named_at: float | None  # when the rule first said hang (None: never)
    culprits: list[int]
    samples: int  # stack samples taken (each: one py-spy per rank)

    @property
    def false_alarm(self) -> bool:
        sc = next(s for s in SCENARIOS if s.name == self.scenario)
        return self.named_at is not None and (sc.hang_at is None or self.named_at < sc.hang_at)

    def detection(self) -> float | None:
        sc = next(s for s in SCENARIOS if s.name == self.scenario)
        if sc.hang_at is None or self.named_at is None:
            return None
        return self.named_at - sc.hang_at


TICK = 1.0  # the hub's look, every second of simulated time


def run_rule(sc: Scenario) -> Outcome:
    """The stack rule (remote/host/hangrule.py) as the hub runs it."""
    rule, seen, samples = HangRule(sc.hang_after), Sampled(sc), 0
    t = 0.0
    while t <= sc.duration:
        quiet = sc.quiet(t)
        if rule.due(t, quiet):
            samples += 1
            hang = rule.feed(t, quiet, seen.sample(t))
            if hang is not None:
                return Outcome("stacks", sc.name, t, hang.culprits, samples)
        t += TICK
    return Outcome("stacks", sc.name, None, [], samples)


def run_silence(sc: Scenario, after: float, name: str) -> Outcome:
    """The silence rule (remote/stalls/hang.py's HangWatch): no line for `after` seconds."""
    t = 0.0
    while t <= sc.duration:
        if sc.quiet(t) >= after:
            return Outcome(name, sc.name, t, [], 0)
        t += TICK
    return Outcome(name, sc.name, None, [], 0)


RULES: dict[str, Callable[[Scenario], Outcome]] = {
    "stacks": run_rule,
    "silence 600 s (hang_after)": lambda sc: run_silence(sc, sc.hang_after or 600, "silence 600 s"),
    "silence 60 s": lambda sc: run_silence(sc, 60, "silence 60 s"),
}


def table() -> list[Outcome]:
    return [rule(sc) for sc in SCENARIOS for rule in RULES.values()]
