"""A run handed to Slurm, the pure parts: `slurm:` and `hosts: slurm` read, Slurm's host lists
expanded without scontrol, squeue's and sacct's words read, the batch script's options, the
exported script, and what a stop does with the supervisors it finds up. A real Slurm runs them
end to end: tests/e2e/test_slurm_e2e.py and tests/e2e/test_slurm_more_e2e.py."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any, cast

import pytest

from ddptui.remote import fold, inventory
from ddptui.remote.events import Notice, RunFinished
from ddptui.remote.host import hostlist
from ddptui.remote.inventory import InventoryError
from ddptui.remote.slurm import export, queue, script
from ddptui.remote.slurm import run as slurm_run
from ddptui.remote.slurm.run import SlurmRun

SLURM = """\
defaults: {user: alice, env: {EXTRA: "it's here"}}
slurm:
  login: hpc-login
  nodes: 3
  partition: gpu
  gpus_per_node: a100:4
  sbatch: ["--exclusive"]
job: {script: train.py, nproc_per_node: auto}
"""


def parse(text: str) -> inventory.Inventory:
    return inventory.parse(text, Path("inv.yaml"))


def mistake(text: str) -> str:
    with pytest.raises(InventoryError) as err:
        parse(text)
    return str(err.value)


def test_slurm_takes_the_place_of_hosts() -> None:
    inv = parse(SLURM)
    assert inv.slurm is not None and inv.slurm.nodes == 3
    assert [h.name for h in inv.hosts] == ["node0", "node1", "node2"]  # until Slurm says
    assert inv.login is not None and (inv.login.host, inv.login.user) == ("hpc-login", "alice")
    named = inventory.with_nodes(inv, ["gpu07", "gpu08", "gpu11"], since=2)
    assert [(h.name, h.since) for h in named.hosts] == [("gpu07", 2), ("gpu08", 2), ("gpu11", 2)]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (SLURM.replace("job:", "hosts: [{host: a}]\njob:"), "say either hosts: or slurm:"),
        ("job: {script: t.py}\n", "say either hosts: or slurm:"),
        (SLURM.replace('["--exclusive"]', '["-N", "2"]'), "inv.yaml:7: `slurm.sbatch`: '-N'"),
        (SLURM.replace('["--exclusive"]', '["--output=x"]'), "ddptui sets --output itself"),
        (SLURM.replace("nodes: 3", "nodes: 0"), "inv.yaml:4: `slurm.nodes`"),
        (SLURM.replace("  login: hpc-login\n", ""), "`slurm.login` is required"),
        (SLURM.replace("user: alice", "transport: local"), "a Slurm job's nodes are Slurm's"),
    ],
)
def test_slurm_mistakes_name_the_line(text: str, said: str) -> None:
    assert said in mistake(text)


def test_hosts_slurm_takes_the_allocations_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "hosts: slurm\njob: {script: t.py}\n"
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    assert mistake(text).startswith("inv.yaml:1: hosts: slurm takes an allocation's nodes")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[07-08],cpu1")
    assert [h.name for h in parse(text).hosts] == ["gpu07", "gpu08", "cpu1"]
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[07-")
    assert "SLURM_JOB_NODELIST 'gpu[07-' is not a host list" in mistake(text)


@pytest.mark.parametrize(
    ("listed", "names"),
    [
        ("n1", ["n1"]),
        ("gpu[01-03,07],cpu1", ["gpu01", "gpu02", "gpu03", "gpu07", "cpu1"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("a-1,b[9-10]", ["a-1", "b9", "b10"]),
    ],
)
def test_a_host_list_expands_as_scontrol_show_hostnames(listed: str, names: list[str]) -> None:
    assert hostlist.expand(listed) == names
    assert fold.names(listed) == names  # the launcher's side reads Slurm's lists alike


@pytest.mark.parametrize("bad", ["n[1-", "n[1-2]]", "n[a-b]"])
def test_a_host_list_that_is_not_one_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        hostlist.expand(bad)


def test_squeue_says_pending_with_its_reason_and_expected_start() -> None:
    job = queue.parse_squeue("12|ddptui-r1|PENDING|Resources|2030-06-01T14:03:00|||alice\n")
    assert job is not None and (job.state, job.reason, job.nodes) == ("PENDING", "Resources", ())
    assert not job.running and not job.ended and job.mine("ddptui-r1")
    assert queue.pending_text(job, now=job.start - 190).startswith(  # type: ignore[operator]
        "job 12 pending (Resources): expected to start at 2030-06-01 14:03 (in 3 m 10 s"
    )
    running = queue.parse_squeue("12|ddptui-r1|RUNNING|None|N/A|n[1-3]|n2|alice\n")
    assert running is not None and running.running and running.start is None
    assert running.nodes == ("n2", "n1", "n3")  # the batch host first: node 0


def test_sacct_says_how_it_ended() -> None:
    out = "7|ddptui-r1|CANCELLED by 0|None|2030-06-01T14:03:00|n[1-2]|0:15\n7.batch|batch|...\n"
    job = queue.parse_sacct(out)
    assert job is not None and job.ended and job.state == "CANCELLED"
    assert queue.ended_text(job) == "job 7 CANCELLED, exit code 0:15"
    assert queue.parse_squeue("") is None and queue.parse_sacct("") is None


def test_the_batch_scripts_options() -> None:
    inv = parse(SLURM)
    opts = script.options(inv, script.job_name("r1"), exclude=["n9"])
    assert opts == [
        "--job-name=ddptui-r1", "--nodes=3", "--ntasks-per-node=1", "--partition=gpu",
        "--gpus-per-node=a100:4", "--exclude=n9", "--exclusive",
    ]  # fmt: skip
    assert script.world_size(inv) == 12  # auto: gpus_per_node's count
    text = script.render(inv, "r1", exclude=["n9"])
    assert "#SBATCH --exclude=n9\n#SBATCH --no-requeue\n#SBATCH --exclusive\n" in text
    assert text.startswith("#!/bin/bash\n#SBATCH --job-name=ddptui-r1\n")
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_the_exported_script_is_shell_and_names_no_ddptui_code() -> None:
    text = export.export(parse(SLURM))
    assert "#SBATCH --nodes=3" in text and "srun" in text and "--node-rank 2" in text
    assert "ddph" not in text  # no host code of ddptui's: srun and torchrun alone
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


@pytest.mark.parametrize(("up", "followed"), [({0, 1, 2}, True), ({0}, False), (set(), False)])
async def test_a_stop_follows_the_supervisors_that_are_up(
    tmp_path: Path, up: set[int], followed: bool
) -> None:
    """`ddptui stop RUN` (or Ctrl-C) as the job runs: every node's supervisor asked once, not
    waited for; all up, the run is followed live and stopped by the supervisors' own stop (TERM,
    job.stop_grace, KILL) before any scancel, whose KILL comes after Slurm's KillWait instead.
    Before, a stop skipped them: the nodes were never reached, and scancel ended the ranks."""
    run = SlurmRun(parse(SLURM), [].append, run_dir=tmp_path, stop=True)
    asked: list[int] = []

    async def answers(k: int, since: int) -> bool:
        asked.append(k)
        return k in up

    run._up = answers  # type: ignore[method-assign]
    run.fleet = cast(Any, object())
    assert await run._supervisors_up(run.inv) is followed
    assert sorted(asked) == [0, 1, 2]


@pytest.mark.parametrize(("state", "left"), [("CANCELLED", 1), ("RUNNING", 2)])
def test_a_sweep_the_jobs_end_cut_short_is_nothing_left(
    tmp_path: Path, state: str, left: int
) -> None:
    """`ddptui stop RUN`: the supervisors stopped, the job's batch script ends with them, and
    Slurm ends the job's other steps, the `srun --overlap` a node's sweep goes through among
    them (seen: exit 143 'task 0: Terminated'). That sweep unreached is not something left once
    Slurm says the job ended; what a sweep found and could not kill still is."""
    run = SlurmRun(parse(SLURM), [].append, run_dir=tmp_path)
    reached = "n0: pid 12 (python3) would not die"
    unreached = "n1: ddptui's agent ended (exit 143): srun: error: n1: task 0: Terminated"
    run.run = cast(
        Any, type("Run", (), {"leftovers": [reached, unreached], "unswept": [unreached]})
    )
    run.job = queue.Job("7", "ddptui-x", state)
    assert run.leftovers == [reached, unreached][:left]


async def test_a_stop_the_login_node_never_answers_ends_within_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C as the login node's link has gone silent (no FIN, no RST): every node and the
    scancel go through it, so the stop ends once it has not answered for STOP_REACH_S, naming
    the job to scancel by hand, exit 130. Before, the stop waited on the dead link (the nodes'
    lease, then a scancel with no answer): a Ctrl-C held for minutes."""
    monkeypatch.setattr(slurm_run, "STOP_REACH_S", 0.2)
    events: list[Any] = []
    run = SlurmRun(parse(SLURM), events.append, run_dir=tmp_path)
    run.info["job"] = "7"
    stuck = asyncio.Event()

    async def followed() -> RunFinished:  # the nodes' streams, over the dead link
        await stuck.wait()
        raise AssertionError("not reached")

    async def silent() -> None:  # the login node: no answer, no error
        await stuck.wait()

    run._execute = followed  # type: ignore[method-assign]
    run.login.agent = silent  # type: ignore[assignment,method-assign]
    ending = asyncio.ensure_future(run.execute())
    await asyncio.sleep(0)
    run.stop()
    fin = await asyncio.wait_for(ending, 5)
    assert (fin.status, fin.exit_code) == ("stopped", 130)
    said = [e.text for e in events if isinstance(e, Notice)]
    assert any("could not reach the login node hpc-login to cancel job 7" in t for t in said)
    assert any("scancel 7" in t for t in said)
