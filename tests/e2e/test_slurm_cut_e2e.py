"""A job handed to a real Slurm whose login node's link goes silent under a followed run
(-m slow_slurm, scripts/slurm_e2e.sh): Ctrl-C still ends the launcher within a few seconds,
naming the job to scancel by hand. The default run's cheap test of the same bound:
tests/unit/test_slurm.py's stop that the login node never answers.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from e2etools import Cli, wait_for
from slurmhosts import SlurmCluster, tick_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow_slurm, pytest.mark.timeout(300)]

BOUND_S = 10.0  # Ctrl-C to the launcher's end, the login node unreachable


@contextmanager
def login_cut_off(slurm: SlurmCluster) -> Iterator[None]:
    """The login node's link down (its veth: no FIN, no RST, the sshd alive), up after."""
    veth = f"{slurm.prefix}-v0"  # the controller's namespace, where the login node's sshd runs
    subprocess.run(["ip", "link", "set", veth, "down"], check=True)
    try:
        yield
    finally:
        subprocess.run(["ip", "link", "set", veth, "up"], check=True)


def test_ctrl_c_with_the_login_node_cut_off_names_the_job_to_scancel(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    inv = slurm.write_inventory(tmp_path / "inv.yaml", tick_job(100000, 0.05))
    cli = Cli(inv, tmp_path / "run")
    run = cli.run_id()
    wait_for(lambda: "[r3 " in cli.stdout, 120, "every rank's lines")
    found = re.search(r"submitted to Slurm as job (\d+)", cli.stderr)
    assert found, cli.stderr
    job = found[1]
    try:
        with login_cut_off(slurm):
            cli.proc.send_signal(signal.SIGINT)
            t0 = time.monotonic()
            code = cli.wait(60)
            took = time.monotonic() - t0
        assert code == 130, cli.stderr
        assert took <= BOUND_S, (took, cli.stderr)
        said = f"could not reach the login node {slurm.login_name} to cancel job {job}"
        assert said in cli.stderr and f"scancel {job}" in cli.stderr, cli.stderr
        assert cli.summary()["status"] == "stopped"
    finally:
        cli.proc.kill()
        slurm.slurm(["scancel", job])  # what the launcher told the user to run
        # it took up to ~50 s here to leave the queue: the cut had its controller (the login
        # node's namespace) cut off from the nodes too
        wait_for(lambda: not slurm.squeue(), 150, f"job {job} to leave the queue")
        wait_for(lambda: not slurm.pids_with_env("DDPTUI_RUN_ID", run), 60, "its processes")
