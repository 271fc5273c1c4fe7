"""The supervisor's rank scan (c10d, spawn, Lightning), on real processes of this machine."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ddptui.remote.host import procs
from ddptui.remote.host.procs import first_end, ranks_by_pid, ranks_here, watch_ranks

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]
# A parent that starts two children shaped like multiprocessing's spawn children.
SPAWNER = (
    "import subprocess, sys, time\n"
    "c = 'import time; time.sleep(60)'\n"
    "kids = [subprocess.Popen([sys.executable, '-c', c, '--multiprocessing-fork'])"
    " for _ in range(2)]\n"
    "time.sleep(60)\n"
)


@pytest.fixture
def tags() -> dict[str, str]:
    return {"DDPTUI_RUN_ID": f"test-{uuid.uuid4().hex[:8]}", "DDPTUI_NODE": "1"}


@pytest.fixture
def start(tags: dict[str, str]) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(argv: list[str] = SLEEP, **env: str) -> subprocess.Popen[bytes]:
        procs.append(subprocess.Popen(argv, env={**tags, **env}, start_new_session=True))
        return procs[-1]

    yield start
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)  # its own group: the spawner's children too
        p.wait()


def eventually(fn: Callable[[], Any], want: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while (got := fn()) != want:
        assert time.monotonic() < deadline, got
        time.sleep(0.05)


def test_torchrun_workers_carry_their_rank(start: Callable[..., Any], tags: dict[str, str]) -> None:
    agent = start()  # the agent itself has no RANK
    for rank in (5, 4):
        start(TORCHELASTIC_RUN_ID="r", RANK=str(rank), WORLD_SIZE="6", LOCAL_RANK=str(rank - 4))
    eventually(lambda: ranks_here(agent.pid, tags, 2, 3), ([4, 5], 6))


def test_a_ranks_own_children_are_not_ranks(
    start: Callable[..., Any], tags: dict[str, str]
) -> None:
    """A DataLoader's workers carry their rank's environment: one process per rank."""
    agent = start()
    with_worker = [sys.executable, "-c", f"import subprocess; subprocess.run({SLEEP!r})"]
    rank = start(with_worker, TORCHELASTIC_RUN_ID="r", RANK="2", WORLD_SIZE="4")
    eventually(lambda: len(ranks_by_pid(tags, 1, 2, agent.pid)[0]), 1)
    time.sleep(0.5)  # its worker is there by now, and still not a rank
    assert ranks_by_pid(tags, 1, 2, agent.pid) == ({rank.pid: 2}, 4)


def test_the_first_rank_to_end_is_named_with_how(
    start: Callable[..., Any], tags: dict[str, str]
) -> None:
    """rank 3 SIGKILLed, not reaped yet (torchrun's next poll would): its zombie says how."""
    agent = start()
    workers = {r: start(TORCHELASTIC_RUN_ID="r", RANK=str(r), WORLD_SIZE="4") for r in (2, 3)}
    by_pid = watch_ranks(agent.pid, tags, 1, 2, threading.Event())
    assert sorted(by_pid.values()) == [2, 3]
    threading.Timer(0.3, workers[3].kill).start()
    got = first_end(by_pid, lambda: False, lambda pid: None)
    assert got is not None and got[:2] == (3, -signal.SIGKILL)
    assert first_end({workers[2].pid: 2}, lambda: True, lambda pid: None) is None  # over


def test_ranks_found_in_a_tree_read_only_that_tree(
    start: Callable[..., Any], tags: dict[str, str]
) -> None:
    """A supervisor (a subreaper) reads its own descendants, not every process on the host."""
    agent = start()
    for rank in (5, 4):
        start(TORCHELASTIC_RUN_ID="r", RANK=str(rank), WORLD_SIZE="6", LOCAL_RANK=str(rank - 4))
    found = watch_ranks(agent.pid, tags, 2, 3, threading.Event(), tree=os.getpid())
    assert sorted(found.values()) == [4, 5]
    assert ranks_by_pid(tags, 2, 3, agent.pid, procs.tagged_pids(tags, [agent.pid]))[0] == {}


def test_lightning_children_give_the_node_ranks(
    start: Callable[..., Any], tags: dict[str, str]
) -> None:
    main = start(NODE_RANK="1", WORLD_SIZE="4")  # local rank 0: LOCAL_RANK unset
    start(NODE_RANK="1", WORLD_SIZE="4", LOCAL_RANK="1")
    eventually(lambda: ranks_here(main.pid, tags, 1, 2), ([2, 3], 4))


def test_spawn_children_counted(start: Callable[..., Any], tags: dict[str, str]) -> None:
    script = start([sys.executable, "-c", SPAWNER])
    eventually(lambda: ranks_here(script.pid, tags, 1, 2), ([2, 3], 4))


def test_nothing_known_without_workers(start: Callable[..., Any], tags: dict[str, str]) -> None:
    script = start(NODE_RANK="1", WORLD_SIZE="4")
    assert ranks_here(script.pid, tags, 1, 2) == ([], None)


def test_watch_sends_once_stable(start: Callable[..., Any], tags: dict[str, str]) -> None:
    agent = start()
    for rank in (2, 3):
        start(TORCHELASTIC_RUN_ID="r", RANK=str(rank), WORLD_SIZE="4")
    sent: list[tuple[list[int], int]] = []

    def report(ranks: list[int], world: int) -> None:
        sent.append((ranks, world))

    ended = threading.Event()
    watcher = threading.Thread(target=watch_ranks, args=(agent.pid, tags, 1, 2, ended, report))
    watcher.start()
    watcher.join(timeout=15)
    assert not watcher.is_alive()  # it stops by itself once it has the answer
    assert sent == [([2, 3], 4)]
