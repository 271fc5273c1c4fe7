"""The training seen, not only its lines, on real sshd test hosts with real torchrun: a loop
printing `step N/T loss X` that fails once and is restarted (job.restarts)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from e2etools import Cli, Cmd, assert_nothing_left
from testhosts import TestCluster
from tmux import Tmux, wait_for

pytestmark = pytest.mark.e2e

STEPS = 30
JOB = {
    "script": "tests/data/steps.py", "nproc_per_node": 2, "master_port": "auto",
    "restarts": 1, "restart_delay": 0.5,
}  # fmt: skip


@pytest.fixture
def data_home(tmp_path: Path) -> dict[str, str]:
    return {"XDG_DATA_HOME": str(tmp_path / "data")}


def test_a_restarted_run_keeps_one_curve_one_wandb_run_and_its_last_values(
    cluster: TestCluster, tmp_path: Path, data_home: dict[str, str]
) -> None:
    job = {**JOB, "args": [str(STEPS), "--fail-rank", "3", "--step-time", "0.2"]}
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1])
    cli = Cli(inv, tmp_path / "run", env=data_home)
    run_id = cli.run_id()
    assert cli.wait() == 0, cli.stderr
    # the console: the link once, a progress line (in a pipe: at most one a minute)
    err = cli.stderr
    assert err.count("ddptui: W&B (fancy-sun-1): https://wandb.ai/team/proj/runs/x1") == 1
    assert sum(line.startswith("ddptui: step ") for line in err.splitlines()) == 1
    # lines stay as they are: every step in rank 0's log, both attempts
    log = (cli.run_dir / "rank-0.log").read_text().splitlines()
    assert log.count(f"step {STEPS}/{STEPS} loss {4 / STEPS:.4f}") == 1
    assert log.count("step 1/30 loss 4.0000") == 1  # the first attempt's start
    # the same W&B run in both attempts, named after the run
    said = [line for line in log if line.startswith("wandb env")]
    assert said == [f"wandb env attempt {a}: {run_id} allow {run_id}" for a in (0, 1)]
    # summary.json: the last values and the link; series.json: one curve across attempts
    summary = cli.summary()
    assert summary["progress"]["step"] == STEPS and summary["progress"]["total"] == STEPS
    assert summary["progress"]["metrics"] == {"loss": round(4 / STEPS, 4)}
    assert [link["url"] for link in summary["links"]] == ["https://wandb.ai/team/proj/runs/x1"]
    series = json.loads((cli.run_dir / "series.json").read_text())
    points = series["metrics"]["loss"]
    assert {p[2] for p in points} == {0, 1} and points[-1][:2] == [STEPS, round(4 / STEPS, 4)]
    assert [(a["attempt"], a["step"]) for a in series["attempts"]] == [(0, 1), (1, 10)]
    # runs: the last step and loss beside the run; --json: the last values
    listed = Cmd(["runs"], tmp_path / "runs", data_home)
    assert listed.wait(60) == 0, listed.stderr
    assert f"step {STEPS}/{STEPS} · loss {4 / STEPS:.4g}" in listed.stdout
    as_json = Cmd(["runs", "--json"], tmp_path / "runs-json", data_home)
    assert as_json.wait(60) == 0, as_json.stderr
    row = json.loads(as_json.stdout)["runs"][0]
    assert row["progress"]["step"] == STEPS and row["links"][0]["tracker"] == "W&B"
    # plot: the curve, a line per attempt
    plot = Cmd(["plot", run_id], tmp_path / "plot", data_home)
    assert plot.wait(60) == 0, plot.stderr
    assert "attempt 2" in plot.stdout and "loss" in plot.stdout
    assert plot.stdout.endswith(f"last: step {STEPS}/{STEPS} · loss {4 / STEPS:.4g}\n")
    assert_nothing_left(cluster, run_id)


def test_a_detached_runs_curve_comes_from_node_0s_host(
    cluster: TestCluster, tmp_path: Path, data_home: dict[str, str]
) -> None:
    job = {**JOB, "args": [str(STEPS), "--step-time", "0.1"], "restarts": 0}
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1])
    cli = Cli(inv, tmp_path / "run", flags=["--detach"], env=data_home)
    assert cli.wait(120) == 0, cli.stderr
    run_id = cli.stdout.splitlines()[-1]
    assert_nothing_left(cluster, run_id, timeout=120)  # it ran to its end, alone
    assert not (cli.run_dir / "summary.json").exists()  # no launcher saw its end
    plot = Cmd(["plot", run_id], tmp_path / "plot", data_home)
    assert plot.wait(60) == 0, plot.stderr
    assert plot.stdout.endswith(f"last: step {STEPS}/{STEPS} · loss {4 / STEPS:.4g}\n")
    listed = Cmd(["runs"], tmp_path / "runs", data_home)
    assert listed.wait(60) == 0, listed.stderr
    assert f"step {STEPS}/{STEPS} · loss {4 / STEPS:.4g}" in listed.stdout
    # an attach replays it all at once: node 0's curve stands in for the replay's
    attach = Cmd(["attach", run_id], tmp_path / "attach", data_home)
    assert attach.wait(60) == 0, attach.stderr
    series = json.loads((cli.run_dir / "series.json").read_text())
    assert [p[0] for p in series["metrics"]["loss"]] == list(range(1, STEPS + 1))
    assert json.loads((cli.run_dir / "summary.json").read_text())["progress"]["step"] == STEPS


def test_a_bar_redrawn_in_place_shows_its_progress_while_it_runs(
    cluster: TestCluster, tmp_path: Path, data_home: dict[str, str]
) -> None:
    """tqdm writes no newline until its bar closes: its progress still shows as it goes."""
    job = {**JOB, "args": ["20", "--bar", "--step-time", "0.25"], "restarts": 0}
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1])
    cli = Cli(inv, tmp_path / "run", env=data_home)
    assert cli.wait() == 0, cli.stderr
    said = [line for line in cli.stderr.splitlines() if line.startswith("ddptui: step ")]
    assert said and not said[0].startswith("ddptui: step 20/20"), cli.stderr  # before its end
    assert cli.summary()["progress"]["step"] == 20
    log = (cli.run_dir / "rank-0.log").read_bytes()  # the line as the bar wrote it
    assert log.count(b"\r") == 20 and log.endswith(b"20/20 [00:01<00:02, 4.00it/s]\n")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_the_dashboard_in_a_terminal_shows_the_panel_and_the_curve(
    cluster: TestCluster, tmp_path: Path, data_home: dict[str, str]
) -> None:
    job = {**JOB, "args": ["40", "--step-time", "0.25"], "restarts": 0}
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1])
    env = {**data_home, "TERM": "xterm-256color"}
    term = Tmux([str(Path(sys.executable).parent / "ddptui"), "-i", str(inv)], env, (120, 40))
    try:
        wait_for(lambda: "l Launch" in term.screen(), "the dashboard", 30, term)
        term.send("l")
        wait_for(lambda: "╭─ training" in term.screen(), "the training panel", 120, term)
        wait_for(lambda: "· loss " in term.screen() and "it/s" in term.screen(), "speed", 30, term)
        screen = term.screen()
        assert "W&B (fancy-sun-1):" in screen  # the link, shown once
        assert "┤" in screen and "step" in screen  # the plot's axes
        wait_for(lambda: "│ succeeded │" in term.screen(), "the run's end", 60, term)
        assert "step 40/40 · " in term.screen()
        term.send("q")
        wait_for(lambda: not term.alive, "ddptui to exit", 30, term)
    finally:
        term.kill()
