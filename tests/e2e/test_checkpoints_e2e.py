"""job.checkpoint on real sshd test hosts with real torchrun and gloo (tests/data/checkpointed.py,
saving every 5 steps to a directory every host shares): a first attempt failing at step 12
resumes from the step-10 checkpoint and says 2 steps lost; the same failure every attempt stops
the chain once the checkpoint stops advancing; a user's stop gives the ranks stop_grace to
finish a save, said while they save, and said too by a launcher attached to a run another one
stops (`ddptui stop RUN`). The host tier holds each in the default run
(tests/host/test_checkpoint_restarts.py, local transport); these take the whole path.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from e2etools import Cli, Cmd, assert_nothing_left, wait_for
from testhosts import TestCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow_e2e]


def launch(
    cluster: TestCluster, tmp_path: Path, *args: str, flags: tuple[str, ...] = (), **job: Any
) -> tuple[Cli, str]:
    job = {
        "script": "tests/data/checkpointed.py", "args": [str(tmp_path / "ckpt"), *args],
        "nproc_per_node": 1, "master_port": "auto", "restart_delay": 0.5,
        "checkpoint": str(tmp_path / "ckpt"), **job,
    }  # fmt: skip
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1])
    cli = Cli(inv, tmp_path / "run", flags=flags, env={"XDG_DATA_HOME": str(tmp_path / "data")})
    return cli, cli.run_id()


def test_a_restart_resumes_from_the_step_10_checkpoint_and_says_2_steps_lost(
    cluster: TestCluster, tmp_path: Path
) -> None:
    cli, run_id = launch(cluster, tmp_path, "--fail", "first", restarts=2)
    assert cli.wait() == 0, cli.stderr
    ten = str(tmp_path / "ckpt" / "step_10.pt")
    for r in (0, 1):  # every rank of attempt 2 got it in DDPTUI_CHECKPOINT
        log = (cli.run_dir / f"rank-{r}.log").read_text().splitlines()
        assert f"rank {r} attempt 0 resumes from nothing" in log
        assert f"rank {r} attempt 1 resumes from {ten}" in log
    lost = "attempt 1 lost 2 steps: it reached step 12, the newest checkpoint is step 10"
    assert f"ddptui: {lost}" in cli.stderr
    summary = cli.summary()
    first, second = summary["attempts"]
    assert (first["steps_lost"], first["reached"], first["checkpoint_step"]) == (2, 12, 10)
    assert second["status"] == "succeeded" and summary["checkpoint"]["step"] == 20
    listed = Cmd(["runs", "--json"], tmp_path / "runs", {"XDG_DATA_HOME": str(tmp_path / "data")})
    assert listed.wait(60) == 0, listed.stderr
    assert json.loads(listed.stdout)["runs"][0]["checkpoint"]["step"] == 20
    assert_nothing_left(cluster, run_id)


def test_the_same_failure_every_attempt_stops_once_the_checkpoint_stops_advancing(
    cluster: TestCluster, tmp_path: Path
) -> None:
    cli, run_id = launch(cluster, tmp_path, "--fail", "all", restarts=5)
    assert cli.wait() != 0
    why = "no progress: the newest checkpoint (step 10) did not advance over two attempts"
    summary = cli.summary()
    assert [a["status"] for a in summary["attempts"]] == ["failed", "failed"]
    assert summary["reason"] == why and f"ddptui: not restarted: {why}" in cli.stderr
    assert [a["steps_lost"] for a in summary["attempts"]] == [2, 2]
    assert_nothing_left(cluster, run_id)


def test_a_stop_waits_for_the_ranks_save_and_says_so(cluster: TestCluster, tmp_path: Path) -> None:
    """Ctrl-C at step 7: TERM, said with the grace; rank 0 takes 3 s to save where it stands,
    within stop_grace (20 s), and the save is the run's newest checkpoint."""
    cli, run_id = launch(cluster, tmp_path, "--steps", "1000", "--save-time", "3", stop_grace=20)
    wait_for(lambda: "step 7/1000" in cli.stdout, 120, "step 7")
    cli.proc.send_signal(signal.SIGINT)
    said = (
        f"ddptui: stopping every node: TERM sent; the ranks have 20 s (job.stop_grace) to finish "
        f"saving to {tmp_path / 'ckpt'}, then KILL"
    )
    wait_for(lambda: said in cli.stderr, 30, "the stop's word")
    assert "saved step" not in cli.stdout  # said while the ranks save
    cli.wait(60)
    [saved] = [line for line in cli.stdout.splitlines() if "saved step" in line]
    step = int(saved.split()[-1])
    assert (tmp_path / "ckpt" / f"step_{step}.pt").exists()
    summary = cli.summary()
    assert summary["status"] == "stopped" and summary["checkpoint"]["step"] == step
    assert cli.stderr.index(said) < cli.stderr.index(f"ddptui: checkpoint: step {step}, saved")
    assert_nothing_left(cluster, run_id)


def test_a_stop_from_elsewhere_says_the_grace_to_an_attached_launcher(
    cluster: TestCluster, tmp_path: Path
) -> None:
    """A detached run; a headless attach in one process, `ddptui stop RUN` in another: the
    attach, which stopped nothing, says the ranks' grace as the hosts send TERM, before rank
    0's save (3 s) lands; both end with the run stopped."""
    cli, run_id = launch(
        cluster, tmp_path, "--steps", "1000", "--save-time", "3", flags=("--detach",),
        stop_grace=20,
    )  # fmt: skip
    assert cli.wait(120) == 0, cli.stderr
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    attach = Cmd(["attach", run_id], tmp_path / "attach", env)
    wait_for(lambda: "step 7/1000" in attach.stdout, 120, "the attach to stream step 7")
    stop = Cmd(["stop", run_id], tmp_path / "stop", env)
    said = (
        f"ddptui: stopping every node: TERM sent; the ranks have 20 s (job.stop_grace) to finish "
        f"saving to {tmp_path / 'ckpt'}, then KILL"
    )
    wait_for(lambda: said in attach.stderr, 30, "the attach to say the stop's grace")
    assert "saved step" not in attach.stdout  # said while the ranks save
    assert stop.wait(90) == 0, stop.stderr
    assert said in stop.stderr
    assert attach.wait(60) == 130, attach.stderr
    assert attach.stderr.count(said) == 1
    [saved] = [line for line in attach.stdout.splitlines() if "saved step" in line]
    assert (tmp_path / "ckpt" / f"step_{int(saved.split()[-1])}.pt").exists()
    assert_nothing_left(cluster, run_id)
