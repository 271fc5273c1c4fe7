"""A job handed to a real Slurm, the longer stories (-m slow_slurm, scripts/slurm_e2e.sh):
detach, attach and stop; a stop that gives the ranks job.stop_grace to save before scancel; the
exported script run by hand; `hosts: slurm` inside salloc; a hang
and a GPU failure inside a Slurm job; a node Slurm fails mid-job, named and left out; and the
pitfalls the field hit: a head address that resolves to loopback on the nodes, no scontrol where
the job runs, the output's directory missing at submit, job ids that repeat after a controller
restart.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import nvidia_smi
import pytest
from e2etools import Cli, Cmd, wait_for
from slurmhosts import SlurmCluster, tick_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow_slurm, pytest.mark.timeout(600)]

DATA = Path(__file__).parents[1] / "data"


def done(slurm: SlurmCluster, job: str) -> str:
    """The job's state once Slurm says it ended."""

    def state() -> str | None:
        out = slurm.slurm(["squeue", "-h", "--states=all", "-j", job, "-o", "%T"]).stdout.strip()
        return out if out and out not in ("PENDING", "RUNNING", "COMPLETING") else None

    return str(wait_for(state, 300, f"job {job} to end"))


def test_detach_attach_and_stop(slurm: SlurmCluster, tmp_path: Path) -> None:
    inv = slurm.write_inventory(tmp_path / "inv.yaml", tick_job(100000, 0.1))
    cli = Cli(inv, tmp_path / "run", flags=["--detach"])
    assert cli.wait(60) == 0, cli.stderr
    run = cli.stdout.splitlines()[-1]
    assert "detached: Slurm holds job" in cli.stderr
    runs = Cmd(["runs", "--json"], tmp_path / "runs")
    assert runs.wait(60) == 0, runs.stderr
    [row] = [r for r in json.loads(runs.stdout)["runs"] if r["id"] == run]
    assert row["status"] in ("pending", "running") and row["slurm"]["job"]
    attach = Cmd(["attach", run], tmp_path / "attach")
    wait_for(lambda: "[r3 " in attach.stdout, 120, "the attach to stream every rank")
    attach.proc.send_signal(2)  # Ctrl-C detaches
    assert attach.wait(60) == 130, attach.stderr
    assert any("ddptui-" + run in line for line in slurm.squeue())  # it runs on
    stop = Cmd(["stop", run], tmp_path / "stop")
    assert stop.wait(90) == 0, stop.stderr
    assert "nothing of it is left" in stop.stderr
    assert not slurm.squeue()
    assert not slurm.pids_with_env("DDPTUI_RUN_ID", run)


def test_a_stop_gives_the_ranks_stop_grace_to_save_before_scancel(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """`ddptui stop RUN` on a detached Slurm run: the supervisors send TERM and wait out
    job.stop_grace (30 s), said, while rank 0 saves where it stands for 8 s, longer than
    Slurm's KillWait (5 s) a scancel at once would have given it; then the job is scancelled
    and nothing is left."""
    ckpt = tmp_path / "ckpt"
    args = [str(ckpt), "--steps", "1000", "--save-time", "8"]
    job = {"script": str(DATA / "checkpointed.py"), "args": args, "nproc_per_node": 1,
           "stop_grace": 30, "checkpoint": str(ckpt)}  # fmt: skip
    inv = slurm.write_inventory(tmp_path / "inv.yaml", job)
    cli = Cli(inv, tmp_path / "run", flags=["--detach"])
    assert cli.wait(60) == 0, cli.stderr
    run = cli.stdout.splitlines()[-1]
    wait_for(lambda: (ckpt / "step_5.pt").exists(), 120, "the ranks to step and save")
    stop = Cmd(["stop", run], tmp_path / "stop")
    assert stop.wait(120) == 0, stop.stderr
    said = (
        "ddptui: stopping every node: TERM sent; the ranks have 30 s (job.stop_grace) to finish "
        f"saving to {ckpt}, then KILL"
    )
    assert said in stop.stderr and "nothing of it is left" in stop.stderr
    assert "warning: scancel" not in stop.stderr  # the job was over: nothing to cancel
    log = (tmp_path / "run" / "rank-0.log").read_text().splitlines()
    [saved] = [line for line in log if line.startswith("saved step ")]  # 8 s after TERM
    assert (ckpt / f"step_{saved.split()[-1]}.pt").exists()
    assert not slurm.squeue()
    assert not slurm.pids_with_env("DDPTUI_RUN_ID", run)


def test_the_exported_script_runs_by_hand_to_completed(slurm: SlurmCluster, tmp_path: Path) -> None:
    job = {"script": "tests/data/print_env.py", "launcher": "env", "args": ["x"]}
    env = {"EXTRA": "it's here", "DDPTUI_SHOW": "RANK,WORLD_SIZE,NODE_RANK,MASTER_PORT,EXTRA"}
    inv = slurm.write_inventory(tmp_path / "inv.yaml", job, env=env, nodes=3)
    export = Cmd(["export", "slurm", "-i", str(inv)], tmp_path / "export")
    assert export.wait(30) == 0, export.stderr
    script = slurm.home / "exported.sh"
    script.write_text(export.stdout)
    job_id = slurm.ssh(f"cd {slurm.home} && sbatch --parsable exported.sh").stdout.strip()
    assert done(slurm, job_id) == "COMPLETED"
    out = (slurm.home / f"slurm-{job_id}.out").read_text()
    said = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    nodes = sorted(s["env"]["NODE_RANK"] for s in said)
    assert nodes == ["0", "1", "2"], out
    assert {s["env"]["WORLD_SIZE"] for s in said} == {"3"}
    assert {s["env"]["EXTRA"] for s in said} == {"it's here"}
    assert all(s["argv"] == ["x"] for s in said)


def test_hosts_slurm_inside_salloc(slurm: SlurmCluster, tmp_path: Path) -> None:
    job = tick_job(10, 0.05)
    inv = slurm.write_inventory(tmp_path / "inv.yaml", job, allocation=True)
    argv = ["salloc", "-N", "2", "--quiet", sys.executable, "-m", "ddptui.tui.cli", "--headless",
            "launch", "-i", str(inv), "--run-dir", str(tmp_path / "run")]  # fmt: skip
    done_ = slurm.slurm(argv, timeout=240)
    assert done_.returncode == 0, done_.stderr
    names = slurm.node_names[:2]
    assert f"[r3 {names[1]}] tick 3 9" in done_.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["hosts"] == names and summary["status"] == "succeeded"


def test_pitfalls_loopback_head_no_scontrol_no_output_dir(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """node 0's name resolves to loopback on every node (a Debian /etc/hosts line), scontrol
    fails wherever it is run, and the state dir where the job's output goes is not there
    yet: the run still streams every rank and succeeds."""
    head = slurm.node_names[0]
    slurm.write_hosts([f"127.0.1.1 {head}"])
    slurm.put_everywhere(
        "scontrol", "#!/bin/sh\necho 'scontrol: command not found' >&2\nexit 127\n"
    )
    shutil.rmtree(slurm.home / ".local" / "state" / "ddptui", ignore_errors=True)
    try:
        inv = slurm.write_inventory(tmp_path / "inv.yaml", tick_job(5, 0.05, rdzv_backend="c10d"))
        cli = Cli(inv, tmp_path / "run")
        assert cli.wait(180) == 0, cli.stderr
        assert "tick 3 4" in cli.stdout
        said = (slurm.home / ".local/state/ddptui/runs" / cli.run_id()).glob("slurm-*.out")
        text = "".join(p.read_text() for p in said)
        assert f"node 0 at {slurm.nodes[0].addr}:" in text  # its address, not 127.0.1.1
    finally:
        slurm.write_hosts()
        slurm.remove_everywhere("scontrol")


def test_a_job_id_slurm_counted_again_is_not_taken_for_the_run(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    slurm.stop_controller()
    slurm.start_controller(fresh=True)  # ids from 1
    slurm.wait_idle()
    inv = slurm.write_inventory(tmp_path / "inv.yaml", tick_job(3, 0.01))
    cli = Cli(inv, tmp_path / "run", flags=["--detach"])
    assert cli.wait(60) == 0, cli.stderr
    run = cli.stdout.splitlines()[-1]
    mine = json.loads((tmp_path / "run" / "run.json").read_text())["slurm"]["job"]
    done(slurm, mine)
    slurm.stop_controller()
    slurm.start_controller(fresh=True)  # its state lost: the ids count again
    slurm.wait_idle()
    others = []  # held jobs of somebody else's, until one has the run's id
    while not others or others[-1] != mine:
        argv = ["sbatch", "--parsable", "--hold", "-J", "someone-else", "--wrap", "true"]
        others.append(slurm.slurm(argv).stdout.strip())
        assert len(others) < 10, others
    try:
        runs = Cmd(["runs", "--json"], tmp_path / "runs")
        assert runs.wait(60) == 0, runs.stderr
        [row] = [r for r in json.loads(runs.stdout)["runs"] if r["id"] == run]
        assert row["status"] == "succeeded", row  # its spools' word, not someone-else's job
        attach = Cmd(["attach", run], tmp_path / "attach")
        assert attach.wait(60) == 0, attach.stderr
        assert f"Slurm's job {mine} is 'someone-else' now, not this run's" in attach.stderr
        assert "tick 3 2" in attach.stdout
        stop = Cmd(["stop", run], tmp_path / "stop")
        stop.wait(60)
        assert f"{mine} PENDING someone-else" in slurm.squeue(), stop.stderr  # never cancelled
        slurm.slurm(["scancel", f"--name=ddptui-{run}", mine])  # as ddptui's scancel: a no-op
        assert f"{mine} PENDING someone-else" in slurm.squeue()
    finally:
        slurm.slurm(["scancel", *others])


@pytest.fixture
def gpu_node1(slurm: SlurmCluster, tmp_path: Path) -> Iterator[Path]:
    """Slurm's node 1 with an H100 stand-in (nvidia-smi) and a journal of its own."""
    machine = tmp_path / "h100"
    shutil.copytree(nvidia_smi.DATA / nvidia_smi.H100_BUSY, machine)
    journal = tmp_path / "journal.txt"
    journal.write_text("kernel: Linux version 6.8.0-49-generic\n")
    slurm.put_tool(slurm.nodes[1], "nvidia-smi", nvidia_smi.stand_in(str(machine)))
    slurm.put_tool(slurm.nodes[1], "journalctl", f"#!/bin/sh\ncat {journal}\n")
    try:
        yield machine
    finally:
        for tool in ("nvidia-smi", "journalctl"):
            (slurm.nodes[1].bin_dir / tool).unlink(missing_ok=True)


def test_a_gpu_failing_inside_a_slurm_job(
    slurm: SlurmCluster, gpu_node1: Path, tmp_path: Path
) -> None:
    inv = slurm.write_inventory(tmp_path / "inv.yaml", tick_job(100000, 0.1))
    cli = Cli(inv, tmp_path / "run")
    wait_for(lambda: "[r3 " in cli.stdout, 120, "every rank's lines")
    shutil.copy(nvidia_smi.DATA / "health" / "ecc" / "health.csv", gpu_node1 / "health.csv")
    node1 = slurm.node_names[1]
    cause = f"GPU 3 (00000000:5D:00.0) on {node1}: 2 uncorrectable ECC errors"
    assert cli.wait(120) == 1, cli.stderr
    assert cause in cli.stderr
    assert cli.summary()["failure"]["message"] == cause
    assert not slurm.squeue()


def test_a_hang_inside_a_slurm_job_restarts_within_the_allocation(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    job = {"script": str(DATA / "hang_once.py"), "nproc_per_node": 2, "restarts": 1,
           "restart_delay": 0.5, "hang_after": 40.0}  # fmt: skip
    inv = slurm.write_inventory(tmp_path / "inv.yaml", job)
    cli = Cli(inv, tmp_path / "run")
    assert cli.wait(400) == 0, cli.stderr
    node1 = slurm.node_names[1]
    assert f"rank 3 on {node1} stuck in load_batch" in cli.stderr
    assert "run succeeded after 2 attempts" in cli.stderr
    summary = cli.summary()
    assert len(summary["slurm"]["jobs"]) == 1  # the restart stayed in the allocation


def test_a_node_slurm_fails_is_named_and_the_job_asked_again_without_it(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """Node 1's slurmd killed: Slurm marks it down (SlurmdTimeout) and fails the job; the run
    names the node and submits again without it, to success on the two nodes left."""
    inv = slurm.write_inventory(tmp_path / "inv.yaml", tick_job("100000/20", 0.1, restarts=1))
    cli = Cli(inv, tmp_path / "run")
    run = cli.run_id()
    wait_for(lambda: "[r3 " in cli.stdout, 120, "every rank's lines")
    node1 = slurm.node_names[1]
    slurm.stop_slurmd(1)
    try:
        wait_for(lambda: f"{node1} failed: Slurm says job" in cli.stderr, 120, "the node named")
        assert cli.wait(300) == 0, cli.stderr
        again = f"asking Slurm again without {node1} (attempt 2)"
        assert any("NODE_FAIL" in x and again in x for x in cli.stderr.splitlines()), cli.stderr
        summary = cli.summary()
        first, second = summary["slurm"]["jobs"]
        assert summary["slurm"]["state"] == "COMPLETED" and summary["slurm"]["job"] == second
        assert summary["slurm"]["exclude"] == [node1]
        assert node1 not in summary["slurm"]["nodes"] and len(summary["slurm"]["nodes"]) == 2
        assert "tick 3 19" in (cli.run_dir / "rank-3.log").read_text()  # attempt 2's end
        sacct = slurm.slurm(["sacct", "-c", "-X", "-n", "-P", "-j", first, "-o", "State"])
        assert "NODE_FAIL" in sacct.stdout  # never requeued by Slurm behind the run
        assert not slurm.squeue()
    finally:
        if cli.proc.poll() is None:
            cli.proc.send_signal(signal.SIGINT)  # a failed test's run: scancelled, not left
            cli.wait(60)
        slurm.start_slurmd(1)
        slurm.wait_idle(120)
    assert not slurm.pids_with_env("DDPTUI_RUN_ID", run)
