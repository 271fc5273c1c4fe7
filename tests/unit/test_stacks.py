"""Every rank's stack: grouping and its text and JSON, the flight recorder's planning, the
`stacks` command's mistakes, and what the check says of py-spy. The real dump is
tests/host/test_host_stacks.py's."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from apptools import write_inventory

from ddptui.remote import inventory
from ddptui.remote.agents import ops
from ddptui.remote.checks import judge as checks
from ddptui.remote.host import probe as host_probe
from ddptui.remote.run import plan
from ddptui.remote.stalls import flight, stacks
from ddptui.remote.stalls.stacks import Frame, RankStack

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
    [stack] = stacks._rank_stacks("a", ops.read_stacks(answer))
    assert stack.error is not None and "CAP_SYS_PTRACE" in stack.error


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
    # the inventory's env wins: under either name, ddptui sets neither
    assert b.env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "50" and "TORCH_FR_BUFFER_SIZE" not in b.env
    assert b.env["TORCH_FR_DUMP_TEMP_FILE"] == f"{plan.SCRATCH}/nccl_trace_rank_"
    off = write_inventory(tmp_path / "off.yaml", [{"host": "a"}], {"script": "t.py"})
    p = plan.build(inventory.load(off), run_id=RUN, addrs=["10.0.0.1"], nprocs=[1])
    assert not any(k.startswith("TORCH_NCCL_DEBUG") for k in p.nodes[0].env)


def test_a_torch_that_warns_of_the_old_names_gets_the_new_ones_alone() -> None:
    both = flight.env("/s")
    assert flight.for_torch(both, None) == both  # not checked: both, as older torch needs
    assert flight.for_torch(both, "2.10.1") == both
    new = flight.for_torch(both, "2.11.0+cu130")  # warned on an H200, and in 2.13
    assert new.keys() == both.keys() - flight.RENAMED.keys()
    assert new["TORCH_FR_BUFFER_SIZE"] == "2000" and "TORCH_NCCL_DUMP_ON_TIMEOUT" in new
    theirs = {**both, "TORCH_NCCL_TRACE_BUFFER_SIZE": "50"}  # set by hand: it stays
    assert flight.for_torch(theirs, "2.13.0")["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "50"


def test_the_jobs_torch_is_the_images_in_a_container() -> None:
    assert flight.job_torch({"torch": "2.13.0+cpu"}) == "2.13.0+cpu"
    boxed = {"torch": None, "container": {"dry_run": {"torch": "2.11.0+cu130"}}}
    assert flight.job_torch(boxed) == "2.11.0+cu130"
    assert flight.job_torch({"torch": "2.5.1", "container": {"dry_run_error": "x"}}) is None


def test_every_style_gets_the_flight_recorder(tmp_path: Path) -> None:
    path = write_inventory(
        tmp_path / "inv.yaml",
        [{"host": "a"}],
        {"script": "t.py", "launcher": "spawn", "nccl": {"flight_recorder": True}},
    )
    p = plan.build(inventory.load(path), run_id=RUN, addrs=["10.0.0.1"], nprocs=[1])
    assert p.nodes[0].env["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"].startswith(plan.SCRATCH)


# -- `ddptui --headless stacks RUN` -------------------------------------------------------------


def ddptui(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "ddptui.tui.cli", "--headless", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=cwd)


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
    assert host_probe.find_py_spy() is not None
    rights = host_probe.ptrace_rights()
    assert rights == ("root" if os.geteuid() == 0 else rights)


@pytest.mark.security
def test_a_host_answers_for_its_own_ranks_only_and_what_is_kept_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """node2 sends a trace of rank 1, node1's: it replaced node1's (and so the verdict). A rank
    two hosts send is taken from neither, both named; past the cap, the rest is named."""
    answers = {
        "node0": {"flight": {"0": {"trace": ["zero"]}}},
        "node1": {"flight": {"1": {"trace": ["one"]}, "2": {"trace": ["2" * (1 << 20)]}}},
        "node2": {"flight": {"1": {"trace": ["forged"]}, "3": {"error": "no pipe"}}},
    }

    class Agent:
        def __init__(self, name: str) -> None:
            self.name = name

        async def request(self, op: str, spec: dict[str, object], timeout: float) -> object:
            return answers[self.name]

    class Fleet:
        hosts = [type("H", (), {"name": n, "since": 0}) for n in answers]
        nnodes = 3

        async def agent(self, k: int, emit: object) -> Agent:
            return Agent(self.hosts[k].name)

    monkeypatch.setattr(flight, "UNPACKED_MAX", 1 << 20)
    got = asyncio.run(stacks.traces(Fleet(), lambda e: None, RUN))  # type: ignore[arg-type]
    assert got.traces == {0: ["zero"]}
    assert got.missing == {
        1: "refused: node[1-2] each sent one (a host sends its own)",
        2: "left out: the traces came to more than 1 MiB",
        3: "no pipe",
    }
