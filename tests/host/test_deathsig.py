"""Ranks die with their launcher, by the kernel (remote/host/deathsig.py): a child of the process
the supervisor starts, forked by its main thread, asks for it in the job's sitecustomize; one
forked by another thread is left (the kernel would end it with that thread)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddptui.remote.host import deathsig, linebuf, procs

LAUNCHER = """
import subprocess, sys, threading, time
def start():  # a rank, once its Python has started (its sitecustomize ran)
    up = "import time; print(1, flush=True); time.sleep(60)"
    rank = subprocess.Popen([sys.executable, "-c", up], stdout=subprocess.PIPE)
    rank.stdout.readline()
    return rank
ranks = [start()]
other = threading.Thread(target=lambda: ranks.append(start()))
other.start()
other.join()
print(" ".join(str(r.pid) for r in ranks), flush=True)
time.sleep(60)
"""


def alive(pid: int) -> bool:
    st = procs.stat(pid)
    return st is not None and st[0] != "Z"


def test_the_launchers_ranks_die_with_it_those_of_its_main_thread(tmp_path: Path) -> None:
    site = linebuf.site_dir(str(tmp_path), lines=False)
    env = {**os.environ, "PYTHONPATH": site, deathsig.VAR: str(os.getpid())}
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER], env=env,
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert launcher.stdout is not None
    rank, by_a_thread = map(int, launcher.stdout.readline().split())
    try:
        assert alive(rank) and alive(by_a_thread)  # its thread ended: it was not bound
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        deadline = time.monotonic() + 5
        while alive(rank) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not alive(rank)
        assert alive(by_a_thread)
    finally:
        for pid in (rank, by_a_thread):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


ASKED = (  # PR_GET_PDEATHSIG
    "import ctypes; s = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(s), 0, 0, 0); "
    "print(s.value)"
)


@pytest.mark.parametrize(("supervisor", "signal_asked"), [("me", 9), ("another", 0), (None, 0)])
def test_only_a_child_of_the_supervisors_child_is_bound(
    tmp_path: Path, supervisor: str | None, signal_asked: int
) -> None:
    """The piece binds a rank whose grandparent is the supervisor named, and nothing else (a
    process outside a job, or deeper in it)."""
    site = linebuf.site_dir(str(tmp_path), lines=False)
    env = {k: v for k, v in os.environ.items() if k != deathsig.VAR}
    if supervisor is not None:
        env[deathsig.VAR] = str(os.getpid() if supervisor == "me" else os.getppid())
    launcher = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {ASKED!r}])"
    out = subprocess.run([sys.executable, "-c", launcher], env={**env, "PYTHONPATH": site},
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert out.split() == [str(signal_asked)]
