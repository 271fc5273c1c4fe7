"""The dashboard follows a job handed to a real Slurm, in a real terminal (tmux), as it follows
a run on SSH hosts (-m slow_slurm, scripts/slurm_e2e.sh): launched while another job holds the
nodes, it says PENDING with Slurm's reason; then every rank's lines under the Slurm node names;
`x` leaves the job to Slurm; `ddptui attach RUN` follows it again; `s` cancels it and leaves
nothing on any node.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from slurmhosts import SlurmCluster, tick_job
from tmux import Tmux, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow_slurm,
    pytest.mark.timeout(600),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux"),
]


def test_the_dashboard_follows_a_slurm_job(slurm: SlurmCluster, tmp_path: Path) -> None:
    inv = slurm.write_inventory(tmp_path / "inv.yaml", tick_job(100000, 0.1))
    env = {"XDG_DATA_HOME": str(tmp_path / "data"), "TERM": "xterm-256color"}
    ddptui = str(Path(sys.executable).parent / "ddptui")
    n0, n1 = slurm.node_names[:2]
    holder = slurm.slurm(["sbatch", "--parsable", "--exclusive", "-N", "3", "--wrap", "sleep 600"])
    term = Tmux([ddptui, "-i", str(inv), "launch"], env, (120, 30))
    try:
        wait_for(lambda: "pending (Resources)" in term.screen(), "the job said pending", 60, term)
        slurm.slurm(["scancel", holder.stdout.strip()])
        ranks = re.compile(rf"r3 {n1} │ tick 3 \d+")
        wait_for(lambda: ranks.search(term.screen()), "rank 3's lines", 120, term)
        assert n0 in term.screen() and "running" in term.screen()
        term.send("x")  # detach: Slurm keeps the job
        wait_for(lambda: not term.alive, "ddptui to leave", 30, term)
    finally:
        term.kill()
    [job] = [line for line in slurm.squeue() if " RUNNING ddptui-" in line]
    run = job.split()[2].removeprefix("ddptui-")
    term = Tmux([ddptui, "attach", run], env, (120, 30))
    try:
        wait_for(lambda: ranks.search(term.screen()), "the attach to stream rank 3", 120, term)
        term.send("s")
        wait_for(lambda: "stopped" in term.screen(), "the run stopped", 90, term)
        summary = tmp_path / "data/ddptui/runs" / run / "summary.json"
        wait_for(lambda: summary.exists() and "slurm" in summary.read_text(),
                 "the job's end kept", 60, term)  # fmt: skip
    finally:
        term.kill()
    assert not slurm.squeue()
    assert not slurm.pids_with_env("DDPTUI_RUN_ID", run)
    job_end = json.loads(summary.read_text())["slurm"]
    assert job_end["state"] == "CANCELLED" and job_end["nodes"] == [n0, n1]
