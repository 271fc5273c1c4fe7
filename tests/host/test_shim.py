"""The shim inside a container, run here as a plain process: it starts the job, passes the
signals on, and ends the job (TERM, grace, KILL of its group) once its stdin closes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from testhosts import REPO, pids_with_env

SHIM = REPO / "remote" / "host" / "shim.py"
# A job that says when it is ready (its handlers in place) and prints what it was sent.
JOB = """
import signal, sys, time
def got(sig, _):
    print("got", signal.Signals(sig).name, flush=True)
    sys.exit(3)
for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, got)
print("ready", flush=True)
time.sleep(60)
"""
# Ignores TERM, and so does its child, which shares its process group.
STUBBORN = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print("ready", flush=True)
time.sleep(60)
"""


def shim(*args: str, tag: str = "", **kw: object) -> subprocess.Popen[str]:
    env = {**os.environ, "SHIM_TEST": tag} if tag else None
    return subprocess.Popen(
        [sys.executable, str(SHIM), *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def started(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"


def finish(proc: subprocess.Popen[str]) -> str:
    """The rest of its output once it has ended, stdin held open meanwhile (as the supervisor
    does: closing it would be a stop)."""
    assert proc.stdout is not None and proc.stdin is not None
    out = proc.stdout.read()  # its end, once the shim (which shares it) has gone
    proc.wait(timeout=30)
    proc.stdin.close()
    return out


def test_runs_the_job_in_its_directory_and_exits_as_it_did(tmp_path: Path) -> None:
    ready = tmp_path / "started"
    code = "import os, sys; print(os.getcwd()); sys.exit(7)"
    proc = shim("--cwd", str(tmp_path), "--ready", str(ready), "--", sys.executable, "-c", code)
    out = finish(proc)
    assert (proc.returncode, out) == (7, f"{tmp_path}\n")
    assert ready.exists()


def test_stdin_closing_ends_the_job_with_term() -> None:
    proc = shim("--grace", "10", "--", sys.executable, "-c", JOB)
    started(proc)
    start = time.monotonic()
    out, _ = proc.communicate(timeout=30)  # closes stdin: the supervisor (or client) is gone
    assert (out, proc.returncode) == ("got SIGTERM\n", 3)
    assert time.monotonic() - start < 5


def test_a_job_that_ignores_term_is_killed_with_its_group_after_the_grace() -> None:
    proc = shim("--grace", "0.5", "--", sys.executable, "-c", STUBBORN, tag="stubborn")
    started(proc)
    # the shim, the job, its child: the child's /proc/PID/environ may read empty for a moment
    # while its exec settles (CI once saw 2 of 3 right after "ready")
    deadline = time.monotonic() + 10
    while len(pids_with_env("SHIM_TEST", "stubborn")) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(pids_with_env("SHIM_TEST", "stubborn")) == 3
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=30) == -signal.SIGKILL  # it dies as its job did
    deadline = time.monotonic() + 10
    while pids_with_env("SHIM_TEST", "stubborn") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pids_with_env("SHIM_TEST", "stubborn")


def test_term_and_int_reach_the_job() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        proc = shim("--", sys.executable, "-c", JOB)
        started(proc)
        proc.send_signal(sig)
        out = finish(proc)
        assert (out, proc.returncode) == (f"got {sig.name}\n", 3)


def test_a_job_that_cannot_start_is_named_and_leaves_no_ready_file(tmp_path: Path) -> None:
    ready = tmp_path / "started"
    proc = shim("--ready", str(ready), "--", "/no/such/python", "-c", "pass")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 127
    assert "cannot start /no/such/python: No such file or directory" in err
    assert not ready.exists()


def test_a_bad_command_line_says_how() -> None:
    proc = shim("--grace", "soon", "--", "true")
    _, err = proc.communicate(timeout=30)
    assert (proc.returncode, err.startswith("usage:")) == (2, True)
