"""The run's own watch inside a job handed to a real Slurm (support/slurmhosts.py), behind
`-m slow_slurm` (scripts/slurm_e2e.sh), as tests/e2e/test_progress_e2e.py and
test_hangs_e2e.py see it on SSH hosts: the training's progress read from the job's lines, across
a restart within the allocation; and a straggler named with its Slurm node. (The hang and the GPU
failure inside a Slurm job: test_slurm_more_e2e.py.)
"""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import pytest
from e2etools import Cli, wait_for
from slurmhosts import SlurmCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow_slurm, pytest.mark.timeout(600)]

DATA = Path(__file__).parents[1] / "data"
STEPS = 30


def test_progress_across_a_restart_within_the_allocation(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """tests/data/steps.py: `step N/T loss X` lines; rank 3 fails at step 5, the restart
    resumes at step 10 in the same Slurm job."""
    args = [str(STEPS), "--fail-rank", "3", "--step-time", "0.1"]
    job = {"script": "tests/data/steps.py", "args": args, "nproc_per_node": 2, "restarts": 1,
           "restart_delay": 0.5}  # fmt: skip
    inv = slurm.write_inventory(tmp_path / "inv.yaml", job)
    cli = Cli(inv, tmp_path / "run", env={"XDG_DATA_HOME": str(tmp_path / "data")})
    run = cli.run_id()
    assert cli.wait(300) == 0, cli.stderr
    assert "run succeeded after 2 attempts" in cli.stderr
    assert sum(line.startswith("ddptui: step ") for line in cli.stderr.splitlines()) == 1
    summary = cli.summary()
    assert len(summary["slurm"]["jobs"]) == 1  # the restart stayed in the allocation
    progress = summary["progress"]
    assert (progress["step"], progress["total"]) == (STEPS, STEPS), progress
    assert progress["metrics"] == {"loss": round(4 / STEPS, 4)}
    series = json.loads((cli.run_dir / "series.json").read_text())
    assert [(a["attempt"], a["step"]) for a in series["attempts"]] == [(0, 1), (1, 10)]
    assert series["metrics"]["loss"][-1][:2] == [STEPS, round(4 / STEPS, 4)]
    assert not slurm.squeue()
    assert not slurm.pids_with_env("DDPTUI_RUN_ID", run)


def test_a_straggler_is_named_with_its_slurm_node(slurm: SlurmCluster, tmp_path: Path) -> None:
    """tests/data/straggler.py: rank 3 computes 30 % more each step, the others wait for it in
    an all_reduce; named with its node and its cost as on SSH hosts, then Ctrl-C. (How soon
    depends on the machine's load: 61-89 s after the first step on a quiet one, 224 s under a
    load average of 12; the job runs 300 s.)"""
    first_step = tmp_path / "first-step"  # the cluster's nodes share this machine's /tmp
    env = {"SECONDS_": "300", "STRAGGLER": "3", "FIRST_STEP_FILE": str(first_step)}
    job = {"script": str(DATA / "straggler.py"), "nproc_per_node": 2}
    inv = slurm.write_inventory(tmp_path / "inv.yaml", job, env=env)
    cli = Cli(inv, tmp_path / "run")
    run = cli.run_id()
    named = re.compile(r"rank (\d+) on (\S+) is a straggler: .* runs about (\d+) % slower")
    try:
        found = wait_for(lambda: named.search(cli.stderr), 280, "the straggler named")
        print(
            f"{time.time() - float(first_step.read_text()):.0f} s after the first step: {found[0]}"
        )
        hosts = json.loads((cli.run_dir / "run.json").read_text())["hosts"]
        assert (found[1], found[2]) == ("3", hosts[1]) and hosts[1] in slurm.node_names
        assert 15 <= int(found[3]) <= 50, found[0]  # 30 % by construction
    finally:
        cli.proc.send_signal(signal.SIGINT)  # a failed test's run too: scancelled, not left
        code = cli.wait(90)
    assert code == 130, cli.stderr
    assert not slurm.squeue()
    assert not slurm.pids_with_env("DDPTUI_RUN_ID", run)
