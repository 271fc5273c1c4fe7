"""A job handed to a real Slurm (support/slurmhosts.py) through its login node: the main path.

In the default run (CI's budget): a request Slurm can never satisfy refused at once, in its
words; a job submitted through one login, every rank's lines streamed while squeue shows it
running, its end Slurm's too. Behind `-m slow_slurm` (scripts/slurm_e2e.sh): a failing rank
named with its traceback; Ctrl-C leaving nothing on any node and nothing in squeue; a job that
waits said PENDING with Slurm's reason, then run; and tests/e2e/test_slurm_more_e2e.py's longer
stories (detach, attach, stop, the exported script, `hosts: slurm`, hangs, GPUs, the pitfalls).
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from e2etools import Cli, wait_for
from slurmhosts import SlurmCluster, tick_job

from ddptui.remote.host import protocol

pytestmark = pytest.mark.e2e
TICKS = 20  # 2 s of lines: squeue is asked while the ranks print


def test_refused_at_once(slurm: SlurmCluster, tmp_path: Path) -> None:
    too_many = slurm.write_inventory(tmp_path / "big.yaml", tick_job(1, 0), nodes=9)
    cli = Cli(too_many, tmp_path / "refused")
    assert cli.wait(60) == 1
    assert "Requested node configuration is not available" in cli.stderr
    assert not slurm.squeue()  # nothing was queued


def test_a_mistake_in_the_inventory_leaves_no_login_behind(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """The login is begun while the inventory is checked (remote/slurm/early.py): a mistake the
    check names ends the launch, and that login with it, on both sides."""
    inv = slurm.write_inventory(tmp_path / "bad.yaml", tick_job(1, 0, bogus=1))
    cli = Cli(inv, tmp_path / "bad")
    assert cli.wait(60) == 2
    assert "bogus" in cli.stderr and "Traceback" not in cli.stderr

    def left() -> list[str]:
        agents = slurm.pids_with_env(protocol.NO_PREFORK, "1")  # the login node's agent
        ours = subprocess.run(["pgrep", "-f", f"ControlPath=none.* {slurm.login_name} "],
                              capture_output=True, text=True).stdout.split()  # fmt: skip
        return [*map(str, agents), *ours]

    wait_for(lambda: not left(), 10, "the early login gone")


def test_submitted_through_the_login_node_and_streamed(slurm: SlurmCluster, tmp_path: Path) -> None:
    logins = slurm.logins()
    inv = slurm.write_inventory(tmp_path / "inv.yaml", tick_job(TICKS, 0.1))
    cli = Cli(inv, tmp_path / "run")
    wait_for(lambda: "[r" in cli.stdout, 120, "a rank's first line")
    jobs = slurm.squeue()
    assert any(" RUNNING ddptui-" in line for line in jobs), jobs  # Slurm runs it meanwhile
    assert cli.wait(120) == 0, cli.stderr
    names = slurm.node_names[:2]
    for rank in range(4):
        node = names[rank // 2]
        lines = [f"[r{rank} {node}] tick {rank} {i}" for i in range(TICKS)]
        assert [x for x in cli.stdout.splitlines() if x.startswith(f"[r{rank} ")] == lines
        log = (cli.run_dir / f"rank-{rank}.log").read_text().splitlines()
        assert log == [f"tick {rank} {i}" for i in range(TICKS)]
    summary = cli.summary()
    assert summary["status"] == "succeeded" and summary["hosts"] == names
    assert summary["slurm"]["state"] == "COMPLETED" and summary["slurm"]["nodes"] == names
    assert "job " + summary["slurm"]["job"] in cli.stderr
    assert slurm.logins() - logins == 1  # one login for the whole run
    assert not slurm.squeue()


@pytest.mark.slow_slurm
def test_a_failing_rank_is_named_and_the_job_ends(slurm: SlurmCluster, tmp_path: Path) -> None:
    inv = slurm.write_inventory(tmp_path / "inv.yaml", tick_job(20, 0.05, "3"))
    cli = Cli(inv, tmp_path / "run")
    assert cli.wait(180) == 1, cli.stderr
    node1 = slurm.node_names[1]
    assert f"rank 3 failed on {node1}" in cli.stderr or f"rank 3 on {node1}" in cli.stderr
    assert "RuntimeError: rank 3 failed on purpose at tick 10" in cli.stderr
    summary = cli.summary()
    assert summary["failing_rank"] == 3 and summary["failing_host"] == node1
    assert summary["slurm"]["state"] in ("FAILED", "COMPLETED")
    assert not slurm.squeue()
    assert not slurm.pids_with_env("DDPTUI_RUN_ID", summary["run_id"])


@pytest.mark.slow_slurm
def test_ctrl_c_cancels_the_job_and_leaves_nothing(slurm: SlurmCluster, tmp_path: Path) -> None:
    inv = slurm.write_inventory(tmp_path / "inv.yaml", tick_job(100000, 0.05))
    cli = Cli(inv, tmp_path / "run")
    run = cli.run_id()
    wait_for(lambda: "[r3 " in cli.stdout, 120, "every rank's lines")
    cli.proc.send_signal(signal.SIGINT)
    assert cli.wait(60) == 130, cli.stderr
    assert not slurm.squeue()
    assert not slurm.pids_with_env("DDPTUI_RUN_ID", run)
    summary = cli.summary()
    assert summary["status"] == "stopped" and summary["slurm"]["state"] == "CANCELLED"


@pytest.mark.slow_slurm
def test_pending_until_the_nodes_are_free(slurm: SlurmCluster, tmp_path: Path) -> None:
    holder = slurm.slurm(["sbatch", "--parsable", "--exclusive", "-N", "3", "--wrap", "sleep 600"])
    held = holder.stdout.strip()
    try:
        wait_for(lambda: any(" RUNNING " in x for x in slurm.squeue()), 30, "the holder to run")
        inv = slurm.write_inventory(tmp_path / "inv.yaml", tick_job(5, 0.05))
        cli = Cli(inv, tmp_path / "run")
        wait_for(lambda: "pending (Resources)" in cli.stderr, 60, "the job said pending")
    finally:
        slurm.slurm(["scancel", held])
    assert cli.wait(180) == 0, cli.stderr
    assert "[r3 " in cli.stdout
