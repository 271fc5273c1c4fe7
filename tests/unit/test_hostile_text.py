"""One line a job prints must never stop a run (issue 37): every parser of job and host text
takes time linear in a line's length, and reads only a bounded part where it can, so a 256 KiB
line of any shape is parsed in moments, with the process's other threads (node 0's hub and
heartbeats, the launcher's event loop) never held up. `"step 1 " + "a" * 40_000` took 28 s,
`"it/s " + "1" * 40_000` 71 s, and a 16 KB line stopped a 50 ms heartbeat for 13 s.

The cases run in a child process (tests/support/hostile.py): a regex that backtracks holds the
GIL, so only another process can stop it and say which case never returned.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.security

HOSTILE = Path(__file__).parents[1] / "support" / "hostile.py"
DEADLINE_S = 240.0  # every case together: a few seconds here
CASE_S = 2.0  # generous: each case takes milliseconds
GAP_S = 1.0  # the heartbeat beats every 10 ms


def test_every_parser_of_job_text_reads_a_256_kib_hostile_line_in_moments() -> None:
    try:
        done = subprocess.run(
            [sys.executable, str(HOSTILE)], capture_output=True, text=True, timeout=DEADLINE_S
        )
        out = done.stdout
    except subprocess.TimeoutExpired as exc:
        said = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        stuck = [ln.split()[1] for ln in said.splitlines() if ln.startswith("start ")]
        pytest.fail(f"parsing {stuck[-1] if stuck else '?'} never returned in {DEADLINE_S:g} s")
    assert done.returncode == 0 and out.endswith("all\n"), done.stderr[-2000:]
    slow = []
    for line in out.splitlines():
        if line.startswith("done "):
            _, case, took, gap = line.split()
            if float(took) > CASE_S or float(gap) > GAP_S:
                slow.append(f"{case}: {took} s, heartbeat stopped {gap} s")
    assert not slow, slow
    assert sum(line.startswith("done ") for line in out.splitlines()) >= 300
