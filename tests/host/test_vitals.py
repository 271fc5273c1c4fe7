"""A node's samples for the hang rule, read for real from processes here: CPU of a rank's process
tree (its workers'), its I/O, and its main thread's stack through py-spy, a loop at the script's
top level included."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddptui.remote.host import hangrule, vitals

SPY = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
needs_py_spy = pytest.mark.skipif(not os.access(SPY, os.X_OK), reason="needs py-spy")

# A "rank" that sleeps at module level, its child burning CPU (a DataLoader worker's part).
RANK = """
import subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", "while True: pass"])
print("ready", flush=True)
while True:
    time.sleep(1)
"""


@pytest.fixture
def rank() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-c", RANK], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    yield proc
    for pid in vitals.procs.descendants(proc.pid):
        os.kill(pid, 9)
    proc.kill()
    proc.wait()


def test_cpu_counts_the_rank_s_whole_tree(rank: subprocess.Popen[str]) -> None:
    cpu0, _, _ = vitals.usage(rank.pid)
    deadline = time.monotonic() + 10
    while vitals.usage(rank.pid)[0] < cpu0 + 0.3:  # the worker burns, the rank sleeps
        assert time.monotonic() < deadline, "the worker's CPU never counted"
        time.sleep(0.1)


def test_io_counts_what_a_process_writes(tmp_path: Path) -> None:
    before = vitals._io_bytes(os.getpid())
    (tmp_path / "f").write_bytes(b"x" * (1 << 20))
    assert vitals._io_bytes(os.getpid()) - before >= 1 << 20


@needs_py_spy
def test_a_sample_holds_the_main_thread_s_stack_at_module_level(
    rank: subprocess.Popen[str],
) -> None:
    got = vitals.sample({rank.pid: 7}, SPY, quiet=12.5)
    assert got["quiet"] == 12.5
    mine = got["ranks"]["7"]
    assert mine["cpu"] >= 0 and mine["io"] >= 0 and "error" not in mine
    assert mine["frames"] == [["<module>", "<string>", 6]]  # the loop's own line, not dropped
    assert hangrule.collective(mine["frames"]) is None


def test_without_py_spy_a_sample_is_cpu_and_io_alone(rank: subprocess.Popen[str]) -> None:
    mine = vitals.sample({rank.pid: 0}, None, quiet=None)["ranks"]["0"]
    assert set(mine) == {"cpu", "io", "in_io"}
