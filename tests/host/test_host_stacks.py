"""Every rank's stack for real, here (local transport): a run whose nodes start fake ranks
(tests/data/fake_ranks.py, no torch), py-spy on them through each host's agent, the flight
recorder's traces brought back as JSON and analysed on node 0's host. And what a neighbour can't
do: a process made to look like one of the run's ranks is neither dumped nor poked nor read, and
a trace that is a malicious pickle runs nothing."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from apptools import write_inventory

from ddptui.remote import inventory
from ddptui.remote.agents.fleet import fleet_for
from ddptui.remote.events import Event, LogBatch, Notice, StacksCaptured
from ddptui.remote.host import stacks as host_stacks
from ddptui.remote.run.runner import Run
from ddptui.remote.stalls import stacks

DATA = Path(__file__).parents[1] / "data"
SPY = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
needs_py_spy = pytest.mark.skipif(not os.access(SPY, os.X_OK), reason="needs py-spy")


@pytest.fixture
async def fake_run(tmp_path: Path) -> AsyncIterator[Run]:
    """A run of 3 local nodes x 2 fake ranks, the flight recorder on, every rank ready."""
    path = write_inventory(
        tmp_path / "inv.yaml",
        [{"host": "localhost", "name": f"node{k}"} for k in range(3)],
        {
            "script": str(DATA / "fake_ranks.py"),
            "args": ["2"],
            "launcher": "env",
            "nproc_per_node": 2,
            "stop_grace": 1,
            "nccl": {"flight_recorder": True, "socket_ifname": None},
        },
        {"transport": "local", "python": sys.executable},
    )
    ready = asyncio.Event()
    seen: list[int] = []

    def emit(event: Event) -> None:
        if isinstance(event, LogBatch):
            seen.extend(r for r, text in event.lines if text == "ready" and r is not None)
            if len(seen) == 6:
                ready.set()

    run = Run(inventory.load(path), emit, run_dir=tmp_path / "run", checks=False)
    task = asyncio.ensure_future(run.execute())
    try:
        await asyncio.wait_for(ready.wait(), 30)
        yield run
    finally:
        run.stop()
        await asyncio.wait_for(task, 30)


async def dump(run: Run, **what: bool) -> stacks.Report:
    fleet = fleet_for(run.inv)  # as `ddptui stacks RUN` does: a login of its own per host
    try:
        return await stacks.dump(fleet, lambda event: None, run.run_id, **what)
    finally:
        await fleet.close()


@needs_py_spy
async def test_dump_groups_the_odd_rank_out(fake_run: Run) -> None:
    report = await dump(fake_run)
    assert not report.problems
    [alone, rest] = report.groups
    assert alone.ranks == (3,) and alone.hosts == ("node1",)
    assert alone.frames[0].function == "load_batch"
    assert rest.ranks == (0, 1, 2, 4, 5) and rest.hosts == ("node0", "node1", "node2")
    assert rest.frames[0].function == "barrier"


@needs_py_spy
async def test_capture_brings_the_traces_as_json_and_node0_analyses(
    fake_run: Run, tmp_path: Path
) -> None:
    seen: list[Event] = []
    fleet = fleet_for(fake_run.inv)
    try:
        report, path = await stacks.capture(
            fleet, fake_run.run_id, tmp_path / "out", seen.append, flight_recorder=True
        )
    finally:
        await fleet.close()
    assert report.flight is not None and sorted(report.flight.traces) == [0, 1, 2, 3, 4, 5]
    assert report.flight.traces[3] == {"version": "2.9", "rank": 3, "entries": []}
    assert report.flight.dir is not None and report.flight.dir.parent == tmp_path / "out"
    saved = report.flight.dir / "nccl_trace_rank_5.json"
    assert json.loads(saved.read_text())["rank"] == 5
    assert (
        saved.stat().st_mode & 0o777 == 0o600 and report.flight.dir.stat().st_mode & 0o777 == 0o700
    )
    assert path.stat().st_mode & 0o777 == 0o600  # the stacks file too
    assert report.flight.verdict  # torch's analyser ran on node 0's host and said something
    assert (report.flight.dir / "analysis.txt").exists()
    assert path.read_text().startswith("rank 3 (node1)")
    captured = [e for e in seen if isinstance(e, StacksCaptured)]
    assert captured and captured[0].summary.startswith("rank 3 (node1)")
    assert any(isinstance(e, Notice) and str(path) in e.text for e in seen)


# -- what a neighbour cannot do -------------------------------------------------------------------


EVIL = """
import os, pickle, sys, time
class Boom:
    def __reduce__(self):
        return (os.system, ("touch " + sys.argv[1],))
pipe, trace = sys.argv[2], sys.argv[3]
os.mkfifo(pipe)
fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
print("ready", flush=True)
while True:
    time.sleep(0.02)
    try:
        if os.read(fd, 1):
            with open(trace, "wb") as f:
                pickle.dump({"entries": Boom()}, f)
    except BlockingIOError:
        pass
"""


@pytest.mark.security
@needs_py_spy
async def test_a_process_dressed_as_a_rank_is_left_alone(fake_run: Run, tmp_path: Path) -> None:
    """Outside the supervisor's tree, with the run's tags and rank 9's variables, pointing the
    flight recorder at its own pipe and a pickle that would run code: never touched."""
    boom = tmp_path / "boom"
    env = {
        **os.environ,
        "DDPTUI_RUN_ID": fake_run.run_id,
        "DDPTUI_NODE": "0",
        "TORCHELASTIC_RUN_ID": "fake",
        "RANK": "9",
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(tmp_path / "p_"),
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(tmp_path / "t_"),
    }
    argv = [
        sys.executable,
        "-c",
        EVIL,
        str(boom),
        str(tmp_path / "p_9.pipe"),
        str(tmp_path / "t_9"),
    ]
    evil = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE)
    try:
        assert evil.stdout is not None and evil.stdout.readline() == b"ready\n"
        fleet = fleet_for(fake_run.inv)
        try:
            report, _ = await stacks.capture(
                fleet, fake_run.run_id, tmp_path / "out", flight_recorder=True
            )
        finally:
            await fleet.close()
        ranks = sorted(r for g in report.groups for r in g.ranks)
        assert ranks == [0, 1, 2, 3, 4, 5]  # no rank 9
        assert report.flight is not None and 9 not in report.flight.traces
        assert not (tmp_path / "t_9").exists()  # its pipe was never poked
        assert not boom.exists()
    finally:
        evil.kill()
        evil.wait()


@pytest.mark.security
def test_a_trace_that_names_a_function_is_refused_not_run(tmp_path: Path) -> None:
    boom = tmp_path / "boom"

    class Boom:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {boom}",))

    trace = tmp_path / "nccl_trace_rank_0"
    trace.write_bytes(pickle.dumps({"entries": Boom()}))
    with pytest.raises(pickle.UnpicklingError, match=r"refused posix\.system"):
        host_stacks.read_trace(str(trace))
    assert not boom.exists()
    link = tmp_path / "nccl_trace_rank_1"
    link.symlink_to(trace)
    with pytest.raises(OSError):  # never through a link
        host_stacks.read_trace(str(link))


# -- recorded traces --------------------------------------------------------------------------


class _Channel:
    """The agent's side of one request, as `analyse` uses it."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.answers: list[dict[str, object]] = []

    def read_all(self, limit: int) -> bytes:
        return self.data[:limit]

    def answer(self, msg: dict[str, object]) -> None:
        self.answers.append(msg)


@pytest.mark.parametrize(
    "recording",
    [
        "barrier-missing-rank-1",  # gloo's pickles, as a rank wrote them (torch 2.13, CPU)
        "nccl-h200-barrier-missing-rank-1",  # NCCL's, as its host sent them (torch 2.11, H200)
    ],
)
def test_recorded_traces_are_read_plainly_and_analysed_here(
    recording: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    traces = {}
    for path in sorted((DATA / "flight-recorder" / recording).glob("nccl_trace_rank_*")):
        rank = path.name.removeprefix("nccl_trace_rank_").removesuffix(".json")
        plain = path.suffix != ".json"
        traces[rank] = host_stacks.read_trace(str(path)) if plain else json.loads(path.read_text())
    os.makedirs(host_stacks.state.node_dir("r1", 0))
    ch = _Channel(json.dumps(traces).encode())
    host_stacks.analyse(ch, {"run_id": "r1", "node": 0})
    [said] = ch.answers
    assert "missing ranks: {1}" in str(said["verdict"]), said


# -- module-level code ---------------------------------------------------------------------------

LOOP = """import time
print("ready", flush=True)
for step in range(10**9):
    time.sleep(0.05)
"""


@needs_py_spy
@pytest.mark.parametrize("as_module", [False, True], ids=["script", "python -m"])
def test_a_loop_at_module_level_keeps_its_frame(tmp_path: Path, as_module: bool) -> None:
    """py-spy marks a script's `<module>` frame is_shim_entry: it is the job's own and stays;
    runpy's frames (python -m) are the interpreter's and go."""
    (tmp_path / "train_loop.py").write_text(LOOP)
    argv = ["-m", "train_loop"] if as_module else [str(tmp_path / "train_loop.py")]
    loop = subprocess.Popen([sys.executable, *argv], cwd=tmp_path, stdout=subprocess.PIPE)
    try:
        assert loop.stdout is not None and loop.stdout.readline() == b"ready\n"
        dumped = host_stacks.dump_all(SPY, {loop.pid: 0}, native=False)["0"]
    finally:
        loop.kill()
        loop.wait()
    [main] = [t for t in dumped["threads"] if t["main"]]
    [frame] = main["frames"]
    assert (frame["function"], frame["file"]) == ("<module>", "train_loop.py")
    assert frame["line"] in (3, 4)  # in the loop, mostly asleep on its line 4


def test_a_rank_py_spy_misread_is_read_again(tmp_path: Path) -> None:
    """py-spy's read of a live process fails now and then as a thread comes or goes under it: that
    rank is read once more, not reported stackless (a stand-in py-spy that misreads once)."""
    spy = tmp_path / "py-spy"
    seen = tmp_path / "seen"
    spy.write_text(
        "#!/bin/sh\n"
        f"if [ ! -e {seen} ]; then touch {seen}\n"
        "  echo 'Error: Failed to get stack traces' >&2\n"
        "  echo 'Caused by: 0: Failed to call get_stack_trace for thread 1' >&2; exit 1; fi\n"
        """echo '[{"thread_id": 1, "thread_name": "MainThread", "active": true, """
        """"owns_gil": false, "frames": []}]'\n"""
    )
    spy.chmod(0o755)
    dumped = host_stacks.dump_all(str(spy), {os.getpid(): 0}, native=False)["0"]
    assert "error" not in dumped and dumped["threads"], dumped
