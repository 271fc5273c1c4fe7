"""Every launch style, run for real on the ssh test hosts with gloo (issue: every launch style).

One success and one failure per style: torchrun with static and c10d rendezvous, the legacy
torch.distributed.launch, an mp.spawn script and Lightning's own launcher. Each checks the world
size, which ranks ran on which host (planned, or learned during the run), the log files, the
first failure and that nothing carrying the run id is left on any host.
(The static failure case lives in test_launch_e2e.py.)
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from testhosts import TestCluster

from ddptui.remote.events import (
    Event,
    LogBatch,
    NodeRanks,
    NodeStarted,
    Notice,
    RunFinished,
    RunStarted,
)
from ddptui.remote.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from ddptui.remote.inventory import load
from ddptui.remote.run.runner import Run

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

RUN_TIMEOUT = 200.0  # the slowest here takes ~40 s; a hang shows as a stopped run, not a stall
RANK_LINE = re.compile(r"rank (\d+)/(\d+) on (\S+)")
TRAIN = ["--epochs", "1", "--samples", "256"]
FLOOD = 2000  # lines per process in the shared-stdout styles


@dataclass
class Outcome:
    run_id: str
    run_dir: Path
    events: list[Event]
    fin: RunFinished

    def world_size(self) -> int | None:
        learned = {e.world_size for e in self.events if isinstance(e, NodeRanks)}
        started = next(e for e in self.events if isinstance(e, RunStarted))
        return started.world_size or (learned.pop() if len(learned) == 1 else None)

    def ranks_by_host(self) -> dict[str, tuple[int, ...]]:
        """Planned ranks (NodeStarted) where known up front, else those learned (NodeRanks)."""
        out = {e.host: e.ranks for e in self.events if isinstance(e, NodeStarted) and e.ranks}
        out.update({e.host: e.ranks for e in self.events if isinstance(e, NodeRanks)})
        return out

    def rank_lines(self, name: str) -> dict[int, str]:
        """The `rank R/W on HOST` lines of one log file: rank → the hostname it printed."""
        text = (self.run_dir / name).read_text()
        return {int(m[1]): m[3] for m in RANK_LINE.finditer(text)}

    def notices(self) -> list[str]:
        return [e.text for e in self.events if isinstance(e, Notice)]

    def tagged_ranks(self) -> set[int | None]:
        return {r for e in self.events if isinstance(e, LogBatch) for r, _ in e.lines}


async def launch(
    cluster: TestCluster,
    tmp_path: Path,
    job: dict[str, object],
    hosts: tuple[int, ...] = (0, 1),
    stop_when: Callable[[list[Event]], bool] | None = None,
) -> Outcome:
    """Run one job to its end, or stop it (like Ctrl-C) once `stop_when(events)` holds."""
    inv = load(cluster.write_inventory(tmp_path / "inventory.yaml", job, hosts))
    events: list[Event] = []

    def emit(event: Event) -> None:
        events.append(event)
        if stop_when is not None and not run.stopping and stop_when(events):
            run.stop()

    run = Run(inv, emit, run_dir=tmp_path / "run")
    task = asyncio.ensure_future(run.execute())
    try:
        fin = await asyncio.wait_for(asyncio.shield(task), RUN_TIMEOUT)
    except TimeoutError:
        run.stop()  # a hang: stop it cleanly so the hosts stay usable, then fail
        await task
        pytest.fail(f"the run hung for {RUN_TIMEOUT:.0f} s")
    assert_nothing_left(cluster, run.run_id)
    return Outcome(run.run_id, run.run_dir, events, fin)


def assert_nothing_left(cluster: TestCluster, run_id: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while pids := cluster.pids_with_env("DDPTUI_RUN_ID", run_id):
        assert time.monotonic() < deadline, f"processes of run {run_id} left: {pids}"
        time.sleep(0.1)


def assert_succeeded(out: Outcome) -> None:
    assert (out.fin.status, out.fin.exit_code) == ("succeeded", EXIT_OK), out.fin.failure


def assert_failed_on(
    out: Outcome, host: str, rank: int | None, rank_failing: int, *, or_rank: int | None = None
) -> None:
    """or_rank: a rank the supervisor's rank watcher may name where the style itself can't."""
    failure = out.fin.failure
    assert (out.fin.status, out.fin.exit_code) == ("failed", EXIT_FAILED)
    assert failure is not None
    assert failure.host == host and failure.rank in (rank, or_rank), failure
    assert f"rank {rank_failing} failed on purpose" in failure.message


def assert_rank_logs(out: Outcome, ranks_by_host: dict[str, tuple[int, ...]]) -> None:
    """rank-N.log per rank, each printed by the host that runs rank N."""
    world = sum(len(r) for r in ranks_by_host.values())
    for host, ranks in ranks_by_host.items():
        for r in ranks:
            assert out.rank_lines(f"rank-{r}.log") == {r: host}
    assert not (out.run_dir / f"rank-{world}.log").exists()


def assert_flood_whole(out: Outcome, world: int) -> None:
    """Processes sharing a node's stdout, each printing FLOOD lines with plain print() as fast
    as it can: every line arrives whole and once, in the events (the console) and the logs."""
    want = {f"flood {r} {i} {'x' * 60}" for r in range(world) for i in range(FLOOD)}
    seen = [text for e in out.events if isinstance(e, LogBatch) for _, text in e.lines]
    logged = [line for log in out.run_dir.glob("*.log") for line in log.read_text().splitlines()]
    for lines in (seen, logged):
        flood = [line for line in lines if "flood" in line]
        assert len(flood) == len(want) and set(flood) == want, sorted(set(flood) - want)[:3]


def assert_learned_rank_logs(out: Outcome) -> None:
    """Styles whose script starts its processes: each process's lines are tagged with its
    rank once it has joined the process group, so rank-N.log holds rank N's greeting, printed
    on the host whose ranks were learned to include N."""
    assert_rank_logs(out, out.ranks_by_host())
    assert None in out.tagged_ranks()  # the node's own lines (before the group, torch's)


# -- torchrun ---------------------------------------------------------------------------------


async def test_torchrun_static(cluster: TestCluster, tmp_path: Path) -> None:
    job = {"script": "examples/train.py", "args": TRAIN, "nproc_per_node": 2, "master_port": 29701}
    out = await launch(cluster, tmp_path, job)
    assert_succeeded(out)
    assert out.world_size() == 4
    assert out.ranks_by_host() == {"node0": (0, 1), "node1": (2, 3)}
    assert not any(isinstance(e, NodeRanks) for e in out.events)  # known up front
    assert_rank_logs(out, out.ranks_by_host())


async def test_torchrun_c10d_ranks_follow_the_rendezvous(
    cluster: TestCluster, tmp_path: Path
) -> None:
    # Listed node2, node0, node1: c10d orders nodes by address, not by the inventory, so
    # node0 (10.213.7.11, node rank 1) gets ranks 0-1. Hostnames do not resolve here.
    job = {
        "script": "examples/train.py",
        "args": TRAIN,
        "nproc_per_node": 2,
        "rdzv_backend": "c10d",
        "master_port": 29702,
    }
    out = await launch(cluster, tmp_path, job, hosts=(2, 0, 1))
    assert_succeeded(out)
    assert out.world_size() == 6
    assert out.ranks_by_host() == {"node0": (0, 1), "node1": (2, 3), "node2": (4, 5)}
    assert_rank_logs(out, out.ranks_by_host())


async def test_torchrun_c10d_failure_names_the_rank_where_it_ran(
    cluster: TestCluster, tmp_path: Path
) -> None:
    job = {
        "script": "examples/train.py",
        "args": [*TRAIN, "--fail-rank", "1", "--fail-step", "2"],
        "nproc_per_node": 2,
        "rdzv_backend": "c10d",
        "master_port": 29703,
    }
    out = await launch(cluster, tmp_path, job, hosts=(1, 0))
    # node0 holds ranks 0-1 although it is node rank 1 in the inventory.
    assert out.ranks_by_host() == {"node0": (0, 1), "node1": (2, 3)}
    assert_failed_on(out, "node0", 1, 1)


# -- torch.distributed.launch -----------------------------------------------------------------

LAUNCH = {"script": "examples/train.py", "launcher": "launch", "nproc_per_node": 2}


async def test_legacy_launch(cluster: TestCluster, tmp_path: Path) -> None:
    out = await launch(cluster, tmp_path, {**LAUNCH, "args": TRAIN, "master_port": 29704})
    assert_succeeded(out)
    assert out.world_size() == 4
    assert out.ranks_by_host() == {"node0": (0, 1), "node1": (2, 3)}
    assert_rank_logs(out, out.ranks_by_host())
    deprecated = [t for t in out.notices() if "deprecated" in t]
    assert len(deprecated) == 1, out.notices()


async def test_legacy_launch_failure(cluster: TestCluster, tmp_path: Path) -> None:
    args = [*TRAIN, "--fail-rank", "2", "--fail-step", "2"]
    out = await launch(cluster, tmp_path, {**LAUNCH, "args": args, "master_port": 29705})
    assert_failed_on(out, "node1", 2, 2)


# -- mp.spawn scripts -------------------------------------------------------------------------

SPAWN = {"script": "examples/spawn_main.py", "launcher": "spawn"}


async def test_spawn_script(cluster: TestCluster, tmp_path: Path) -> None:
    job = {**SPAWN, "args": ["--lines", str(FLOOD)], "master_port": 29706}
    out = await launch(cluster, tmp_path, job)
    assert_succeeded(out)
    assert_flood_whole(out, 4)
    assert out.world_size() == 4  # learned: the script decides
    assert out.ranks_by_host() == {"node0": (0, 1), "node1": (2, 3)}
    assert_learned_rank_logs(out)
    assert any("tagged with its rank once" in t for t in out.notices())


async def test_spawn_script_failure(cluster: TestCluster, tmp_path: Path) -> None:
    job = {**SPAWN, "args": ["--fail", "3", "--fail-step", "2"], "master_port": 29707}
    out = await launch(cluster, tmp_path, job)
    assert_failed_on(out, "node1", None, 3, or_rank=3)


# -- Lightning ---------------------------------------------------------------------------------

LIGHTNING = {"script": "examples/lightning_boring.py", "launcher": "env", "nproc_per_node": 2}


@pytest.fixture
def local_rank_exported(cluster: TestCluster) -> Iterator[None]:
    """node1's login shell exports LOCAL_RANK, which would stop Lightning from spawning."""
    pytest.importorskip("lightning")
    with cluster.login_shell("export LOCAL_RANK=0\n", 1):
        yield


@pytest.mark.usefixtures("local_rank_exported")
async def test_lightning(cluster: TestCluster, tmp_path: Path) -> None:
    job = {**LIGHTNING, "args": ["--lines", str(FLOOD)], "master_port": 29708}
    out = await launch(cluster, tmp_path, job)
    assert_succeeded(out)
    assert_flood_whole(out, 4)
    assert out.world_size() == 4
    assert out.ranks_by_host() == {"node0": (0, 1), "node1": (2, 3)}
    assert_learned_rank_logs(out)


async def test_lightning_failure(cluster: TestCluster, tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    job = {**LIGHTNING, "args": ["--fail", "3"], "master_port": 29709}
    out = await launch(cluster, tmp_path, job)
    # Lines are the node's, but torch's excepthook prefixes the traceback with its rank.
    assert_failed_on(out, "node1", 3, 3)


async def test_lightning_stop_leaves_nothing(cluster: TestCluster, tmp_path: Path) -> None:
    """Ctrl-C once Lightning's children run on every node: all of them go (launch() checks)."""
    pytest.importorskip("lightning")
    job = {**LIGHTNING, "args": ["--max-steps", "100000"], "master_port": 29710}

    def children_everywhere(events: list[Event]) -> bool:
        return len({e.host for e in events if isinstance(e, NodeRanks)}) == 2

    out = await launch(cluster, tmp_path, job, stop_when=children_everywhere)
    assert out.ranks_by_host() == {"node0": (0, 1), "node1": (2, 3)}
    assert (out.fin.status, out.fin.exit_code) == ("stopped", EXIT_INTERRUPTED)
