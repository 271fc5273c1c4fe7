"""Every rank's stack: grouping and its text and JSON, the real dump (py-spy) of processes
tagged as a run's ranks here through the local transport, the flight recorder's planning,
collection (a stand-in rank writing its trace on demand) and torch's analyser on recorded
traces."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from apptools import write_inventory

from remote import checks, flight, inventory, plan, probe_host, runs, stacks
from remote.events import Event, Notice, StacksCaptured
from remote.inventory import Host
from remote.stacks import Frame, RankStack
from remote.transport import LocalTransport
from tui.headless import stacks as stacks_cmd

DATA = Path(__file__).parents[1] / "data" / "flight-recorder"
RUN = "20250101-120000-stck"
SPY = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
needs_py_spy = pytest.mark.skipif(not os.access(SPY, os.X_OK), reason="needs py-spy")

BARRIER = (Frame("barrier", "c10d.py", 10), Frame("step", "train.py", 40))
ALONE = (Frame("load_batch", "data.py", 88), Frame("step", "train.py", 40))


def test_groups_odd_ones_out_first_then_errors() -> None:
    ranks = [RankStack(r, f"gpu-{'abc'[r // 2]}", 100 + r, BARRIER) for r in (0, 1, 2, 4, 5)]
    ranks += [
        RankStack(3, "gpu-b", 103, ALONE),
        RankStack(7, "gpu-d", 107, error="py-spy: Permission denied"),
        RankStack(6, "gpu-d", 106, error="py-spy: Permission denied"),
    ]
    groups = stacks.group(ranks)
    assert [(g.ranks, g.hosts) for g in groups] == [
        ((3,), ("gpu-b",)),
        ((0, 1, 2, 4, 5), ("gpu-a", "gpu-b", "gpu-c")),
        ((6, 7), ("gpu-d",)),
    ]
    report = stacks.Report(RUN, groups, {"gpu-e": "py-spy not found"}, 0.5)
    assert report.text().splitlines() == [
        "rank 3 (gpu-b)                     load_batch (data.py:88) ← step (train.py:40)",
        "ranks 0-2,4-5 (gpu-a,gpu-b,gpu-c)  barrier (c10d.py:10) ← step (train.py:40)",
        "ranks 6-7 (gpu-d)                  no stack: py-spy: Permission denied",
        "gpu-e: py-spy not found",
    ]
    data = report.as_json()
    assert data["groups"][0] == {
        "ranks": [3],
        "hosts": ["gpu-b"],
        "frames": [
            {"function": "load_batch", "file": "data.py", "line": 88, "path": ""},
            {"function": "step", "file": "train.py", "line": 40, "path": ""},
        ],
    }
    assert data["errors"] == [
        {"ranks": [6, 7], "hosts": ["gpu-d"], "error": "py-spy: Permission denied"}
    ]
    assert data["hosts"] == {"gpu-e": "py-spy not found"}


def test_long_stacks_are_cut_on_their_line_only() -> None:
    frames = tuple(Frame(f"f{i}", "x.py", i) for i in range(12))
    report = stacks.Report(RUN, stacks.group([RankStack(0, "a", 1, frames)]))
    assert report.text().endswith("f7 (x.py:7) ← …")
    assert report.text(frames=100).endswith("f11 (x.py:11)")


def test_ptrace_refused_is_explained() -> None:
    answer = {"ranks": {"0": {"pid": 5, "error": "py-spy: Permission Denied: Try sudo"}}}
    [stack] = stacks._rank_stacks("a", answer)
    assert stack.error is not None and "CAP_SYS_PTRACE" in stack.error


# -- the real dump, here ------------------------------------------------------------------------

RANK = textwrap.dedent(
    """\
    import os, sys, threading, time
    rank = int(os.environ["RANK"])
    pipe, trace = os.environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE"), os.environ.get(
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")

    def dump_on_demand(fd):  # the flight recorder's pipe reader, as torch's: never closed
        while True:
            time.sleep(0.02)
            try:
                poked = os.read(fd, 1)
            except BlockingIOError:  # a writer opened it, and has not written yet
                continue
            if poked:
                with open(f"{trace}{rank}", "wb") as out:
                    out.write(b"trace of rank %d" % rank)

    if pipe:
        os.mkfifo(f"{pipe}{rank}.pipe")
        fd = os.open(f"{pipe}{rank}.pipe", os.O_RDONLY | os.O_NONBLOCK)
        threading.Thread(target=dump_on_demand, args=(fd,), daemon=True).start()

    def load_batch():
        time.sleep(300)

    def barrier():
        time.sleep(300)

    print("ready", flush=True)
    load_batch() if rank == 3 else barrier()
    """
)


def local_hosts(n: int) -> list[LocalTransport]:
    def host(k: int) -> Host:
        none = (None,) * 4  # user, port, identity_file, known_hosts
        return Host(k, "localhost", f"node{k}", "local", *none, sys.executable, None, {}, None)

    return [LocalTransport(host(k)) for k in range(n)]


@pytest.fixture
def ranks(tmp_path: Path) -> Iterator[Path]:
    """Six processes tagged as ranks 0-5 of RUN on nodes 0-2 (as torchrun's workers are);
    rank 3 sleeps in a function of its own. With the flight recorder's variables set."""
    procs = []
    for rank in range(6):
        env = {
            **os.environ,
            "DDPTUI_RUN_ID": RUN,
            "DDPTUI_NODE": str(rank // 2),
            "TORCHELASTIC_RUN_ID": RUN,
            "RANK": str(rank),
            "WORLD_SIZE": "6",
            **flight.env(str(tmp_path)),
        }
        procs.append(
            subprocess.Popen([sys.executable, "-c", RANK], env=env, stdout=subprocess.PIPE)
        )
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == b"ready\n"
        while len(list(tmp_path.glob("*.pipe"))) < 6:
            time.sleep(0.01)
        yield tmp_path
    finally:
        for p in procs:
            p.kill()
            p.wait()


@needs_py_spy
async def test_dump_groups_the_odd_rank_out(ranks: Path) -> None:
    report = await stacks.dump(local_hosts(3), RUN)
    assert not report.problems
    [alone, rest] = report.groups
    assert alone.ranks == (3,) and alone.hosts == ("node1",)
    sleeping = RANK.splitlines().index("def load_batch():") + 2  # its body, 1-based
    assert alone.frames[0].function == "load_batch" and alone.frames[0].line == sleeping
    assert rest.ranks == (0, 1, 2, 4, 5) and rest.hosts == ("node0", "node1", "node2")
    assert rest.frames[0].function == "barrier"
    assert report.elapsed < 5


@needs_py_spy
async def test_capture_collects_the_flight_recorder_and_saves(ranks: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    seen: list[Event] = []
    report, path = await stacks.capture(local_hosts(3), RUN, run_dir, seen.append, flight=True)
    assert report.flight is not None and sorted(report.flight.traces) == [0, 1, 2, 3, 4, 5]
    assert report.flight.traces[3] == b"trace of rank 3"
    assert report.flight.dir is not None and report.flight.dir.parent == run_dir
    assert (report.flight.dir / "nccl_trace_rank_5").read_bytes() == b"trace of rank 5"
    assert path.parent == run_dir and path.name.startswith("stacks-")
    assert path.read_text().startswith("rank 3 (node1)")
    assert json.loads(path.with_suffix(".json").read_text())["groups"][0]["ranks"] == [3]
    captured = [e for e in seen if isinstance(e, StacksCaptured)]
    assert captured and captured[0].path == str(path)
    assert captured[0].summary.startswith("rank 3 (node1)")
    assert any(isinstance(e, Notice) and str(path) in e.text for e in seen)
    # the analyser ran on them (real torch here) and said what it made of these stand-ins
    assert report.flight.verdict is not None
    assert (report.flight.dir / "analysis.txt").exists()


async def test_no_rank_of_the_run_here() -> None:
    report = await stacks.dump(local_hosts(1), "no-such-run")
    assert report.groups == ()
    assert report.problems == {"node0": "no rank of run no-such-run runs on this host"}


# -- the flight recorder -----------------------------------------------------------------------


def test_plan_turns_the_flight_recorder_on_per_node(tmp_path: Path) -> None:
    path = write_inventory(
        tmp_path / "inv.yaml",
        [{"host": "a"}, {"host": "b", "env": {"TORCH_NCCL_TRACE_BUFFER_SIZE": "50"}}],
        {"script": "t.py", "nccl": {"flight_recorder": True}},
    )
    p = plan.build(inventory.load(path), run_id=RUN, addrs=["10.0.0.1", "10.0.0.2"], nprocs=[2, 2])
    a, b = p.nodes
    # in the node's scratch dir, which the host's daemon makes fresh and private (mkdtemp)
    assert a.env["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] == f"{plan.SCRATCH}/nccl_pipe_rank_"
    assert a.env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == f"{plan.SCRATCH}/nccl_trace_rank_"
    assert a.env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert a.env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == a.env["TORCH_FR_BUFFER_SIZE"] == "2000"
    assert b.env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "50"  # the inventory's env wins
    off = write_inventory(tmp_path / "off.yaml", [{"host": "a"}], {"script": "t.py"})
    p = plan.build(inventory.load(off), run_id=RUN, addrs=["10.0.0.1"], nprocs=[1])
    assert not any(k.startswith("TORCH_NCCL_DEBUG") for k in p.nodes[0].env)


def test_every_style_gets_the_flight_recorder(tmp_path: Path) -> None:
    path = write_inventory(
        tmp_path / "inv.yaml",
        [{"host": "a"}],
        {"script": "t.py", "launcher": "spawn", "nccl": {"flight_recorder": True}},
    )
    p = plan.build(inventory.load(path), run_id=RUN, addrs=["10.0.0.1"], nprocs=[1])
    assert p.nodes[0].env["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"].startswith(plan.SCRATCH)


async def test_analyser_names_the_missing_rank(tmp_path: Path) -> None:
    recorded = DATA / "barrier-missing-rank-1"
    traces = {r: (recorded / f"nccl_trace_rank_{r}").read_bytes() for r in (0, 1)}
    collected = flight.Collected(traces, {})
    await collected.save(tmp_path / "fr")
    assert collected.analyser, "torch is installed here: its analyser is found"
    assert collected.verdict is not None and "missing ranks: {1}" in collected.verdict
    assert "collective: gloo:barrier" in collected.verdict
    lines = collected.lines()
    assert lines[0] == f"flight recorder: 2 trace(s) in {tmp_path / 'fr'}"
    assert any("missing ranks: {1}" in ln for ln in lines)


async def test_without_an_analyser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flight, "analyser", lambda: [])
    collected = flight.Collected({0: b"x"}, {1: "cannot write /tmp/p1.pipe: No such device"})
    await collected.save(tmp_path / "fr")
    assert collected.verdict is None
    assert collected.lines()[1:] == [
        "  rank 1: cannot write /tmp/p1.pipe: No such device",
        "  no analyser here (torch not installed for ddptui: torchfrtrace DIR)",
    ]


# -- `ddptui --headless stacks RUN` -------------------------------------------------------------


def ddptui(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "tui.cli", "--headless", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=cwd)


@needs_py_spy
async def test_stacks_command_on_a_run_dir(
    ranks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # where runs are listed
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    inv = write_inventory(
        tmp_path / "inv.yaml",
        [{"host": "localhost", "name": f"node{k}"} for k in range(3)],
        {"script": "t.py", "nproc_per_node": 2},
        {"transport": "local"},
    )
    runs.register(run_dir, RUN, inventory.load(inv))  # as a launch does
    out = io.StringIO()
    code = await stacks_cmd.stacks(RUN[:12], as_json=True, native=False, out=out)  # a prefix
    assert code == 0
    found = json.loads(out.getvalue())
    assert [g["ranks"] for g in found["groups"]] == [[3], [0, 1, 2, 4, 5]]
    assert found["groups"][0]["frames"][0]["function"] == "load_batch"
    assert len(list(run_dir.glob("stacks-*.txt"))) == 1


def test_stacks_command_mistakes_are_one_line(tmp_path: Path) -> None:
    res = ddptui("stacks", cwd=tmp_path)
    assert res.returncode == 2 and "RUN" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    res = ddptui("stacks", "20990101-nosuchrun", cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.startswith("ddptui: no run matches '20990101-nosuchrun'")
    assert len(res.stderr.strip().splitlines()) == 1


# -- the check reports py-spy and ptrace ---------------------------------------------------------


def spy_findings(**facts: object) -> list[tuple[str, str]]:
    base = {"python": "3.11.7", "python_exe": "/opt/venv/bin/python3"}
    found = checks.host_findings("gpu-a", {**base, **facts}, ())
    return [(f.level, f.message) for f in found if f.check == "py-spy"]


def test_check_warns_without_py_spy_or_ptrace() -> None:
    assert spy_findings(py_spy=None, ptrace=None) == [
        ("warning", "no py-spy for /opt/venv/bin/python3: stacks of the ranks need it "
         "(pip install py-spy, in the train extra)")
    ]  # fmt: skip
    assert spy_findings(py_spy="/opt/venv/bin/py-spy", ptrace=None) == [
        ("warning", "py-spy cannot read the ranks here: ptrace needs root, "
         "kernel.yama.ptrace_scope 0 or CAP_SYS_PTRACE (docker: --cap-add SYS_PTRACE)")
    ]  # fmt: skip
    assert spy_findings(py_spy="/opt/venv/bin/py-spy", ptrace="ptrace_scope 0") == [
        ("ok", "py-spy at /opt/venv/bin/py-spy (ptrace allowed: ptrace_scope 0)")
    ]
    assert spy_findings() == []  # a probe that did not look says nothing


@needs_py_spy
def test_the_probe_finds_py_spy_and_the_rights_here() -> None:
    ns: dict[str, object] = {}
    exec(compile(Path(probe_host.__file__).read_text(), "probe_host", "exec"), ns)
    assert ns["find_py_spy"]() is not None  # type: ignore[operator]
    rights = ns["ptrace_rights"]()  # type: ignore[operator]
    assert rights == ("root" if os.geteuid() == 0 else rights)
