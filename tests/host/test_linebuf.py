"""The job's sitecustomize (remote/host/linebuf.py): whole lines from every thread of a process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.remote.host.linebuf import SITECUSTOMIZE

FLOOD = """
import threading
def talk(k):
    for i in range(3000):
        print(f"thread {k} line {i:04d} " + "x" * 40)
ts = [threading.Thread(target=talk, args=(k,)) for k in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
print("no newline at the end", end="")
"""


def run(tmp_path: Path, code: str, **env: str) -> list[str]:
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    base = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "PYTHONPATH")}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**base, "PYTHONPATH": str(tmp_path), "PYTHONUNBUFFERED": "1", **env},
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    return out.decode().split("\n")


def test_threads_printing_at_once_write_whole_lines(tmp_path: Path) -> None:
    lines = run(tmp_path, FLOOD)
    assert lines[-1] == "no newline at the end"  # the last flush at exit
    body = lines[:-1]
    for k in range(4):
        mine = [x for x in body if x.startswith(f"thread {k} ")]
        assert mine == [f"thread {k} line {i:04d} " + "x" * 40 for i in range(3000)]
    assert len(body) == 4 * 3000


def test_a_closed_stream_at_exit_says_nothing(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    code = "import sys; print('bye'); sys.stdout.close()"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        timeout=60,
    )
    assert (out.returncode, out.stdout, out.stderr) == (0, b"bye\n", b"")


ENDLESS = """
import sys, time
chunk = "x" * 4096
t0 = time.process_time()
for _ in range(32 * 256):  # 32 MiB without a newline, 4 KiB a write
    sys.stdout.write(chunk)
sys.stdout.write("end\\n")
# VmHWM is this process's own peak (ru_maxrss keeps the forking parent's from before exec)
kib = next(ln.split()[1] for ln in open("/proc/self/status") if ln.startswith("VmHWM:"))
sys.stderr.write("%f %s" % (time.process_time() - t0, kib))
"""


@pytest.mark.security
def test_an_endless_line_costs_linear_time_and_bounded_memory(tmp_path: Path) -> None:
    """Held as `rest + s`, 32 MiB took 93 s of CPU here and 500 MiB 1 GB: now it leaves in
    line pieces of 64 KiB, each a line of its own, and nothing is lost."""
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    out = subprocess.run(
        [sys.executable, "-c", ENDLESS], env=env, capture_output=True, check=True, timeout=120
    )
    cpu, kib = out.stderr.split()
    assert float(cpu) < 10 and int(kib) < 64 * 1024  # linear: 0.1 s; it was 93 s, 107 MB
    lines = out.stdout.split(b"\n")
    assert lines[-1] == b"" and lines[-2].endswith(b"end")
    assert max(map(len, lines)) <= 1 << 16
    assert b"".join(lines) == b"x" * (32 << 20) + b"end"


def test_a_long_printed_line_is_one_line(tmp_path: Path) -> None:
    """A print() over the 64 KiB held leaves as a piece ending its line: print's own newline
    after it was an empty line of its own after every long line (the env and spawn styles)."""
    code = "print('a' * 100000); print(); print('b' * 70000, end=''); print('c')"
    assert run(tmp_path, code) == ["a" * 100000, "", "b" * 70000, "c", ""]
