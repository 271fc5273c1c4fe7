"""Helpers for the dashboard's tests: inventories, a scripted fake run, waiting, screen text."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from textual.pilot import Pilot

from ddptui.remote.events import (
    ChecksDone,
    DeepChecked,
    DeepProgress,
    Event,
    Failure,
    Finding,
    Gpu,
    GpuProcess,
    GpuStats,
    HostChecked,
    HostState,
    LogBatch,
    NodeExited,
    NodeStarted,
    RunFinished,
    RunStarted,
)
from ddptui.remote.host.netif import free_port as free_port  # a port no outgoing connection takes
from ddptui.remote.inventory import Inventory
from ddptui.remote.run.runner import Emit, OnCancel
from ddptui.remote.stalls.stacks import Frame, Group, Report
from ddptui.remote.store import runs
from ddptui.tui.dashboard.app import Dashboard, create_app
from ddptui.tui.dashboard.control import RunLike
from ddptui.tui.dashboard.glance import ClusterLike

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "examples" / "train.py"
RUN_ID = "20250101-120000-abcd"


def write_inventory(
    path: Path,
    hosts: Sequence[dict[str, Any]],
    job: dict[str, Any],
    defaults: dict[str, Any] | None = None,
) -> Path:
    data: dict[str, Any] = {"hosts": list(hosts), "job": job}
    if defaults:
        data["defaults"] = defaults
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def local_inventory(tmp: Path, args: Sequence[str], nodes: int = 2, nproc: int = 1) -> Path:
    """`nodes` local nodes running examples/train.py, on a free master port."""
    return write_inventory(
        tmp / "inventory.yaml",
        [{"host": "localhost", "name": f"node{i}"} for i in range(nodes)],
        {
            "script": str(TRAIN),
            "args": list(args),
            "nproc_per_node": nproc,
            "master_port": free_port(),
            "stop_grace": 2,
        },
        {"transport": "local"},
    )


# -- a scripted run ---------------------------------------------------------------------------


class FakeRun:
    """Emits a script of events; then ends with `finish`, or waits to be stopped. Cancelled,
    it does what `on_cancel` says, as the engine's Run does: `hung_up`, `detached` or `left`."""

    def __init__(self, emit: Emit, run_id: str, script: Sequence[Event], finish: bool) -> None:
        self.emit, self.run_id, self.script, self.finish = emit, run_id, script, finish
        self.stopped = asyncio.Event()
        self.stops = 0
        self.detached = self.hung_up = self.left = self.viewer = False
        self.on_cancel: OnCancel = "stop"

    async def execute(self) -> RunFinished:
        try:
            return await self._play()
        except asyncio.CancelledError:
            if not (self.detached or self.left):
                setattr(
                    self,
                    {"stop": "hung_up", "detach": "detached"}.get(self.on_cancel, "left"),
                    True,
                )
            raise

    async def _play(self) -> RunFinished:
        for event in self.script:
            self.emit(event)
            if isinstance(event, RunFinished):
                return event
        if self.finish:
            fin = RunFinished("succeeded", 0, 12.5)
        else:
            await self.stopped.wait()
            fin = RunFinished(*(("detached", 0) if self.detached else ("stopped", 130)), 12.5)
        self.emit(fin)
        return fin

    def stop(self) -> None:
        self.stops += 1
        self.stopped.set()

    def detach(self) -> None:
        if self.viewer:
            self.left = True
        else:
            self.detached = True
        self.stopped.set()

    def as_viewer(self) -> None:
        self.viewer, self.on_cancel = True, "leave"


class FakeRuns:
    """A run factory for the app: each launch gets a FakeRun playing `script(run_id)`."""

    def __init__(self, script: Callable[[str], Sequence[Event]], finish: bool = False) -> None:
        self.script, self.finish = script, finish
        self.runs: list[FakeRun] = []

    def __call__(self, inv: Inventory, emit: Emit, run_id: str, fleet: object = None) -> RunLike:
        run = FakeRun(emit, run_id, self.script(run_id), self.finish)
        self.runs.append(run)
        return run


def past_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inv: Path) -> str:
    """One earlier run in the history: a run dir with its run.json and inventory copy."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    run_dir = runs.root() / "20250102-080000-beef"
    run_dir.mkdir(parents=True)
    info = {"run_id": run_dir.name, "hosts": ["node0", "node1"], "started_at": 1.7e9}
    (run_dir / "run.json").write_text(json.dumps(info))
    (run_dir / "inventory.yaml").write_text(inv.read_text())
    summary = {"status": "failed", "exit_code": 1, "elapsed": 61.0, "world_size": 2,
               "failing_rank": 1, "failing_host": "node1", "failure": None}  # fmt: skip
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir.name


class Rejoins:
    """The app's rejoin factory: each opened run is a FakeRun playing the two-node script."""

    def __init__(self) -> None:
        self.opened: list[tuple[str, bool]] = []
        self.runs: list[FakeRun] = []

    def __call__(
        self, record: runs.RunRecord, emit: Emit, stop: bool, fleet: object = None
    ) -> FakeRun:
        self.opened.append((record.run_id, stop))
        self.runs.append(FakeRun(emit, record.run_id, two_node_script(record.run_id), False))
        return self.runs[-1]


class FakeCluster:
    """The dashboard's own connections, scripted: `script` is what opening them (and each
    check) emits; the stacks dump answers `report`."""

    def __init__(self, emit: Emit, script: Sequence[Event], report: Report) -> None:
        self.emit, self.script, self.report = emit, script, report
        self.checks = 0
        self.paused: list[bool] = []
        self.dumps: list[tuple[str, Path, bool]] = []
        self.deep_asked: list[float] = []
        self.deep_go = asyncio.Event()

    fleet = None  # runs open their own

    async def run(self, *, check: bool = True) -> None:
        if check:
            await self.check()
        await asyncio.Event().wait()

    async def check(self) -> ChecksDone:
        self.checks += 1
        for event in self.script:
            self.emit(event)
        return ChecksDone(True, ())

    def pause(self, paused: bool) -> None:
        self.paused.append(paused)

    async def stacks(
        self, run_id: str, run_dir: Path, *, flight: bool = False
    ) -> tuple[Report, Path]:
        self.dumps.append((run_id, run_dir, flight))
        return self.report, run_dir / "stacks-20250101-120100.txt"

    async def deep(self, seconds: float, runs_dir: Path | None = None) -> DeepChecked:
        """node1's link slow, as the deep check finds it; said once `deep_go` is set."""
        self.deep_asked.append(seconds)
        self.emit(DeepProgress("all-reduce 1 MiB: 12 iterations"))
        await self.deep_go.wait()
        done = DeepChecked(True, DEEP_FINDINGS, {"ranks": 4}, 21.5)
        self.emit(done)
        return done


def stall_report(run_id: str = RUN_ID) -> Report:
    """Rank 3 alone in its own function; the five others in a barrier."""
    barrier = (
        Frame("barrier", "torch/distributed/distributed_c10d.py", 4815),
        Frame("wrapper", "torch/distributed/c10d_logger.py", 83),
        Frame("train_step", "stall.py", 31),
        Frame("main", "stall.py", 44),
    )
    alone = (Frame("load_batch", "stall.py", 17), *barrier[2:])
    groups = (
        Group((3,), ("node1",), alone),
        Group((0, 1, 2, 4, 5), ("node0", "node1", "node2"), barrier),
    )
    return Report(run_id, groups, {}, 0.42)


class FakeClusters:
    """A cluster factory for the app: each inventory (re)opened gets a FakeCluster."""

    def __init__(self, script: Sequence[Event] = (), report: Report | None = None) -> None:
        self.script, self.report = script, report or stall_report()
        self.made: list[FakeCluster] = []

    def __call__(self, inv: Inventory, emit: Emit) -> ClusterLike:
        cluster = FakeCluster(emit, self.script, self.report)
        self.made.append(cluster)
        return cluster


def fake_app(
    inventory_path: Path,
    script: Callable[[str], Sequence[Event]],
    finish: bool = False,
    cluster: FakeClusters | None = None,
    clock: Callable[[], float] = lambda: 100.0,
) -> tuple[Dashboard, FakeRuns]:
    runs = FakeRuns(script, finish)
    ids = iter([RUN_ID, *(f"20250101-12000{i}-abcd" for i in range(1, 10))])
    app = create_app(
        inventory_path,
        run_factory=runs,
        clock=clock,
        run_ids=ids.__next__,
        cluster_factory=cluster or FakeClusters(),
    )
    return app, runs


H100 = Gpu(0, "NVIDIA H100 80GB HBM3", 81559, 40960, 87, 61, (GpuProcess(4242, 40000, "python"),))


def two_node_script(run_id: str, lines: int = 6) -> list[Event]:
    """Two nodes, two ranks each, checked (node0: 2 H100s), running, some lines."""
    gpus = (H100, Gpu(1, "NVIDIA H100 80GB HBM3", 81559, 20480, 45, 55))
    out: list[Event] = [
        RunStarted(run_id, f"/runs/{run_id}", ("node0", "node1"), 4, "torchrun"),
        HostState("node0", 0, "connected", "0.10 s"),
        HostState("node1", 1, "connected", "0.12 s"),
        HostChecked(
            "node0",
            0,
            {"hostname": "gpu-a", "python": "3.11.9", "torch": "2.13.0", "cuda": "12.4"},
            gpus,
            (Finding("ok", "gpu", "2 GPUs", "node0"),),
        ),
        HostChecked(
            "node1",
            1,
            {"hostname": "gpu-b", "python": "3.11.9", "torch": "2.13.0"},
            (),
            (Finding("warning", "gpu", "no GPU: ranks run on CPU", "node1"),),
        ),
        ChecksDone(True, ()),
        NodeStarted("node0", 0, 101, "gpu-a", (0, 1), "eth0"),
        HostState("node0", 0, "running", "ranks 0-1"),
        NodeStarted("node1", 1, 102, "gpu-b", (2, 3), "eth0"),
        HostState("node1", 1, "running", "ranks 2-3"),
        LogBatch("node0", 0, "stderr", ((None, "torchrun: starting 2 workers"),)),
    ]
    for i in range(lines):
        out.append(
            LogBatch(
                "node0", 0, "stdout", ((0, f"step {i} loss {1 / (i + 1):.3f}"), (1, f"step {i}"))
            )
        )
        out.append(LogBatch("node1", 1, "stdout", ((2, f"step {i}"), (3, f"step {i}"))))
    out.append(LogBatch("node1", 1, "stderr", ((3, "UserWarning: something minor"),)))
    out.append(GpuStats("node0", 0, (dataclasses.replace(H100, utilization_pct=99), gpus[1])))
    return out


BUSY = Gpu(2, "NVIDIA H100 80GB HBM3", 81559, 72255, 98, 64,
           (GpuProcess(48211, 71746, "/usr/bin/python3", "alice"),))  # fmt: skip
IDLE = Gpu(0, "NVIDIA H100 80GB HBM3", 81559, 1, 0, 31)
DEEP_FINDINGS = (
    Finding("warning", "slow-link", "2.7 MB/s against a median of 1.5 GB/s", "node1"),
    Finding("ok", "fabric-allreduce", "all-reduce of 4 MiB across 4 ranks (gloo): busbw 1 GB/s"),
)
BUSY_TEXT = "GPU 2 in use by pid 48211 /usr/bin/python3 (70.1 GiB)"


def opening(samples: int = 1) -> list[Event]:
    """What the dashboard's own connections say when it opens: node0 with two H100s, one busy
    with alice's process; node1 a CPU host; `samples` live samples of node0, util rising."""
    out: list[Event] = [HostState(f"node{k}", k, "connecting") for k in (0, 1)]
    out += [HostState(f"node{k}", k, "connected", "0.05 s") for k in (0, 1)]
    for i in range(samples):
        util = min(100, 10 * i)
        gpus = (dataclasses.replace(IDLE, utilization_pct=util), BUSY)
        out.append(GpuStats("node0", 0, gpus))
    busy = Finding("warning", "gpu-busy", BUSY_TEXT, "node0")
    out.append(HostChecked("node0", 0, {"hostname": "gpu-a"}, (IDLE, BUSY), (busy,)))
    out.append(HostChecked("node1", 1, {"hostname": "cpu-b", "nvidia_smi": "missing"}, ()))
    out.append(ChecksDone(True, (busy,)))
    return out


TRACEBACK = (
    "Traceback (most recent call last):",
    '  File "/work/examples/train.py", line 101, in <module>',
    "    main()",
    '  File "/work/examples/train.py", line 80, in main',
    '    raise RuntimeError(f"rank {rank} failed on purpose at step {step}")',
    "RuntimeError: rank 3 failed on purpose at step 3",
)


def failing_script(run_id: str) -> list[Event]:
    """two_node_script, then rank 3 on node1 dies with a traceback; the run fails."""
    failure = Failure(
        "node1", 3, 1, TRACEBACK[-1], local_rank=1, pid=4321, seen_at=1.0, traceback=TRACEBACK
    )
    return [
        *two_node_script(run_id),
        LogBatch("node1", 1, "stderr", tuple((3, line) for line in TRACEBACK)),
        HostState("node1", 1, "failed", TRACEBACK[-1]),
        NodeExited("node1", 1, 1, (failure,)),
        HostState("node0", 0, "stopped", "killed by SIGTERM"),
        NodeExited("node0", 0, -15, stopped=True),
        RunFinished("failed", 1, 21.0, failure, (failure,)),
    ]


# -- waiting and looking ----------------------------------------------------------------------


async def wait_for(
    pilot: Pilot[Any], predicate: Callable[[], object], what: str, timeout: float = 60.0
) -> None:
    """Let the app work until `predicate()` holds (polled between its message rounds)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await pilot.pause(0.05)


async def settle(pilot: Pilot[Any]) -> None:
    """Process every posted message, then draw what the next tick would (log lines, hosts,
    status, each rank's silence) now."""
    await pilot.pause()
    app = pilot.app
    assert isinstance(app, Dashboard)
    app.pane.flush()
    app.hosts.flush()  # the once-a-second redraws (hosts, status, silences), not left to timers
    app.tick()
    if app.pane.findings._due:  # its redraw waits a moment for more hosts' answers
        app.pane.findings._redraw()
    await pilot.pause()


def screen_text(app: Dashboard) -> str:
    """What the terminal shows, as plain text."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(segment.text for segment in strip) for strip in strips)
