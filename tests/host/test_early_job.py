"""A Slurm node's first job, started before its supervisor loads (remote/host/jobstart.py's Early),
is the supervisor's first attempt: started once, its lines spooled, its exit the node's, even when
it ended before the supervisor took it on. The supervisor runs in a process of its own (its
reaper waits for any child: in pytest's, it would take other tests' exit codes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ddptui.remote.host.state import STATE

JOB = "import os,sys; open(sys.argv[1],'a').write('%d\\n' % os.getpid()); print('early'); exit(3)"

SUPERVISOR = """
import os, socket, sys
from ddptui.remote.host import protocol
from ddptui.remote.host.boot import guardian
from ddptui.remote.host.daemon import Daemon
from ddptui.remote.host.job import node_tags
from ddptui.remote.host.jobstart import Early
where, job = sys.argv[1], sys.argv[2]
spec = protocol.spec({"run_id": "r", "node": 0, "names": ["a"], "secret": "s", "detached": True,
    "link_timeout": 1.0, "argv": [sys.executable, "-c", job, os.path.join(where, "starts")]})
assert Early.fits(spec)
early = Early(spec, where)
assert early.proc is not None and early.error is None
os.waitid(os.P_PID, early.proc.pid, os.WEXITED | os.WNOWAIT)  # ended, not yet reaped
print(early.proc.pid, flush=True)
daemon = Daemon(spec, where)
daemon.early, daemon.guard = early, guardian(node_tags("r", 0), 1.0)
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(os.path.join(where, "ctl"))
server.listen(4)
daemon.serve(server, lambda text: None)
"""


def test_an_early_job_that_ended_first_is_the_first_attempt(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SUPERVISOR, str(tmp_path), JOB],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    pid = done.stdout.split()[0]
    assert (tmp_path / "starts").read_text().split() == [pid]  # started once: the early one
    spooled = b"".join(p.read_bytes() for p in tmp_path.glob("spool.*"))
    assert b"early\n" in spooled
    state = json.loads((tmp_path / STATE).read_text())
    assert state["exit_code"] == 3 and state["status"] == "failed"
