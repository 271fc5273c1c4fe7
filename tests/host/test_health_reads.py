"""A healthy host's GPUs are never blamed for what its own supervisor does to the health watch's
reads (issue 42): the real supervisor on this machine (local transport), a one-node job, an
nvidia-smi stand-in in front of a healthy recording (tests/support/smi_faults.py).

- The job ends while the watch's nvidia-smi is mid-read: the end's sweep of the job's processes
  leaves the watch's read alone (it is the supervisor's, not the job's), and the cause is the
  job's own exit, not `GPUs cannot be read: nvidia-smi failed (exit -15)`.
- An older driver refuses the newest field names (exit 2) while the supervisor's reaper, which
  waits on every child, gets that status first: the refusal is still read as one (the older
  names asked next), not as an answer whose one line is a short row.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml
from nvidia_smi import A100, H100_BUSY
from runtools import run_job
from smi_faults import FaultySmi

from ddptui.remote import inventory

# The job waits for what its argv names, then exits as told.
JOB = """
import os, sys, time
what, where, code = sys.argv[1], sys.argv[2], int(sys.argv[3])
deadline = time.monotonic() + 30
if what == "mid-read":  # the watch's next read goes slow; the job ends while it is under way
    with open(os.path.join(where, "armed"), "w") as f:
        f.write("1")
    while not os.path.exists(os.path.join(where, "pid")) and time.monotonic() < deadline:
        time.sleep(0.01)
else:  # past the watch's first read after its start: four health queries (two field sets each)
    asked = os.path.join(where, "asked")
    while time.monotonic() < deadline:
        if os.path.exists(asked) and len(open(asked).read().splitlines()) >= 4:
            break
        time.sleep(0.05)
print("done waiting", flush=True)
sys.exit(code)
"""


def inv(tmp: Path, smi: FaultySmi, what: str, code: int) -> inventory.Inventory:
    (tmp / "job.py").write_text(JOB)
    doc = {
        "defaults": {"transport": "local", "workdir": str(tmp), "python": sys.executable},
        "hosts": [{"host": "localhost", "name": "node0"}],
        "job": {
            "script": "job.py", "args": [what, str(smi.dir), str(code)], "launcher": "env",
            "master_port": "auto", "stop_grace": 1, "link_timeout": 10,
            "nccl": {"socket_ifname": None},
        },
    }  # fmt: skip
    (tmp / "inventory.yaml").write_text(yaml.safe_dump(doc))
    return inventory.load(tmp / "inventory.yaml")


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return bin_dir


async def test_the_end_of_a_job_leaves_the_watchs_read_alone(tmp_path: Path, on_path: Path) -> None:
    smi = FaultySmi(on_path, H100_BUSY, "slow")
    fin, events = await run_job(inv(tmp_path, smi, "mid-read", 3), tmp_path, timeout=60)
    assert fin.failure is not None
    assert (fin.failure.message, fin.failure.exit_code) == ("exit code 3", 3), fin.failure
    assert (smi.dir / "answered").exists()  # the read went on to its answer
    assert not [e for e in events if "cannot be read" in repr(e)]


async def test_an_older_drivers_refusal_is_one_though_the_reaper_saw_it_first(
    tmp_path: Path, on_path: Path
) -> None:
    smi = FaultySmi(on_path, A100, linger=True)
    fin, _ = await run_job(inv(tmp_path, smi, "polled", 0), tmp_path, timeout=60)
    assert (fin.status, fin.failure) == ("succeeded", None)
    assert smi.asked() >= 4
