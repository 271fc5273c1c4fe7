"""A process's own commands (remote/host/owncommands.py) beside a reaper that waits on every
child, as a supervisor's does: each command's exit code is its own, one killed by someone else
says so, one past its time is killed with what it started, and a sweep can tell them apart."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from ddptui.remote.host import procs
from ddptui.remote.host.owncommands import OwnCommands


class Reaper:
    """A supervisor's reaper in small (remote/host/daemon.py): every child, waited at once."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.codes: collections.OrderedDict[int, int | None] = collections.OrderedDict()
        self.stopping = False
        self.thread = threading.Thread(target=self.reap, daemon=True)
        self.thread.start()

    def reap(self) -> None:
        # Polled, not blocking: a reaper blocked in waitpid(-1) outlives its test whenever
        # another thread's Popen reaps the child meant to wake it, and then takes the next
        # test's children from under that test's reaper.
        while not self.stopping:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if not pid:
                time.sleep(0.005)
                continue
            with self.cond:
                self.codes[pid] = procs.exit_code(status)
                self.cond.notify_all()

    def wait(self, pid: int, timeout: float) -> int | None:
        with self.cond:
            if not self.cond.wait_for(lambda: pid in self.codes, timeout):
                return None
            return self.codes.pop(pid)


@pytest.fixture
def own() -> Iterator[tuple[OwnCommands, Reaper]]:
    reaper = Reaper()
    yield OwnCommands(reaper.wait, reaper.cond, reaper.codes), reaper
    reaper.stopping = True  # this test process's other children are not its to reap
    reaper.thread.join(5)
    assert not reaper.thread.is_alive()


def test_each_exit_code_is_the_commands_own(own: tuple[OwnCommands, Reaper]) -> None:
    """Popen would say 0 whenever the reaper got there first (a third of the time, here)."""
    commands, _ = own
    for _ in range(40):
        assert commands.run(["sh", "-c", "echo refused; exit 2"], 5) == (2, "refused\n", "")


def test_a_signal_from_elsewhere_says_so_and_a_hang_is_killed(
    own: tuple[OwnCommands, Reaper],
) -> None:
    commands, _ = own
    assert commands.run(["sh", "-c", "kill -TERM $$"], 5)[0] == -signal.SIGTERM
    began = time.monotonic()
    assert commands.run(["sh", "-c", "sleep 60 & wait"], 0.3) == (None, "", "")
    assert time.monotonic() - began < 3  # its child held the pipes: killed with its session


def test_a_stale_code_of_a_pid_come_round_is_not_taken(
    own: tuple[OwnCommands, Reaper], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reaper keeps the codes nobody asked for (the job's orphans): a command that comes to
    an old pid (pids come round: 32768 of them on many hosts) is not told the old one's end."""
    commands, reaper = own
    real = subprocess.Popen
    made: list[int] = []

    def popen(*args: object, **kw: object) -> subprocess.Popen[bytes]:
        proc = real(*args, **kw)  # type: ignore[call-overload]
        reaper.codes[proc.pid] = -signal.SIGTERM  # as an orphan of that pid left it, long ago
        made.append(proc.pid)
        return proc

    monkeypatch.setattr(subprocess, "Popen", popen)
    assert commands.run(["sh", "-c", "sleep 0.1; exit 0"], 5)[0] == 0
    assert made


def test_what_runs_is_held_from_a_sweep(own: tuple[OwnCommands, Reaper]) -> None:
    commands, _ = own
    proc = commands.start(["sh", "-c", "sleep 30 & wait"], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 5
        while not procs.descendants(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        with commands.lock:
            held = commands.held()
        assert proc.pid in held and set(procs.descendants(proc.pid)) <= held
        assert "DDPTUI_RUN_ID" not in procs.environ(proc.pid)
    finally:
        commands.end()
        assert commands.finish(proc, 5) == -signal.SIGKILL


def test_a_command_ending_while_a_sweep_looks_is_no_crash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A command's end (`finish`, another thread, without the lock) while `held()` reads what
    each command started: the supervisor once died of it ('Set changed size during
    iteration', a health read ending as the attempt's sweep began, at 128 hosts)."""
    commands = OwnCommands()
    commands.running.update({101, 102})

    def descendants(pid: int) -> list[int]:
        commands.running.discard(102 if pid == 101 else 101)  # the other one ends meanwhile
        return [pid + 1000]

    monkeypatch.setattr(procs, "descendants", descendants)
    held = commands.held()
    assert held >= {101, 102} and held & {1101, 1102}
