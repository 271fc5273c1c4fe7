"""Hosts set up their own way, on real sshd test hosts with real torchrun: paths under `~`, a
python wrapper and a .bashrc that greet on stdout and stderr. Every command that execs on the
hosts (check, launch, stacks, runs, stop, attach) must read through them."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import nvidia_smi
import pytest
from e2etools import Cli, Cmd, assert_nothing_left, cmdline, ns_pids, wait_for
from testhosts import REPO, TestCluster, veth_name

pytestmark = pytest.mark.e2e

GREETER = """#!/bin/sh
echo "Welcome to the cluster! (conda base activated)"
echo "module: loaded cuda/12.4" >&2
{unfinished}exec {python} "$@"
"""
# The probe's line follows it on the same line. (The job's first line would too, as it would in
# a terminal: the job's own output, left as it is.)
UNFINISHED = "printf 'a banner without a newline'\n"
BASHRC = 'echo "hello from .bashrc"\necho "bashrc on stderr" >&2\n'
TRAIN = "examples/train.py"


def ddptui(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "ddptui.tui.cli", "--headless", *args]
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=timeout)


def no_traceback_of_ours(stderr: str) -> None:
    """Ranks' tracebacks arrive tagged (`[node0] Traceback`); ddptui's own would not be."""
    assert not any(line.startswith("Traceback") for line in stderr.splitlines()), stderr
    assert "JSONDecodeError" not in stderr, stderr


@pytest.fixture
def homes(cluster: TestCluster, request: pytest.FixtureRequest) -> Iterator[list[Path]]:
    """node0 and node1's homes, each with a wrapper python in ~/venv/bin, a script ~/job.py
    and a directory ~/proj; emptied again after the test. The wrapper's greeting may end with
    more shell lines (the fixture's param)."""
    unfinished = getattr(request, "param", "")
    made = []
    for host in cluster.hosts[:2]:
        home = host.home
        (home / "venv" / "bin").mkdir(parents=True)
        python = home / "venv" / "bin" / "python"
        python.write_text(GREETER.format(python=cluster.python, unfinished=unfinished))
        python.chmod(0o755)
        (home / "job.py").write_text((REPO / TRAIN).read_text())
        (home / "proj").mkdir()
        made.append(home)
    try:
        yield made
    finally:
        for home in made:  # what this fixture made, not the runs' state under ~/.local
            shutil.rmtree(home / "venv")
            shutil.rmtree(home / "proj")
            (home / "job.py").unlink()


def test_tilde_paths_check_and_launch(
    cluster: TestCluster, homes: list[Path], tmp_path: Path
) -> None:
    """python, script and workdir all under `~`: the check passes, torchrun runs, and the job
    ran in ~/proj."""
    job = {"script": "~/job.py", "nproc_per_node": 2, "master_port": 29751}
    inv = cluster.write_inventory(
        tmp_path / "inv.yaml", job, hosts=[0, 1], python="~/venv/bin/python", workdir="~/proj"
    )
    res = ddptui("check", "-i", str(inv), "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads(res.stdout)
    for h, home in zip(report["hosts"], homes, strict=True):
        facts = h["facts"]
        assert facts["python_exe"] == cluster.python  # the wrapper exec'd the real one
        assert facts["workdir"] == str(home / "proj")
        assert facts["script"] == str(home / "job.py") and facts["script_found"]
    cli = Cli(inv, tmp_path / "run")
    assert cli.wait(180) == 0, cli.stderr
    no_traceback_of_ours(cli.stderr)
    for r in range(4):
        assert f"rank {r}/4" in (tmp_path / "run" / f"rank-{r}.log").read_text()
    # The job's working directory: torchrun's ranks ran in ~/proj on each host.
    assert all((home / "proj").is_dir() for home in homes)


def test_tilde_python_missing_says_the_expanded_path(cluster: TestCluster, tmp_path: Path) -> None:
    job = {"script": TRAIN, "master_port": 29752}
    inv = cluster.write_inventory(
        tmp_path / "inv.yaml", job, hosts=[0], python="~/nowhere/bin/python"
    )
    res = ddptui("check", "-i", str(inv))
    assert res.returncode == 1
    home = cluster.hosts[0].home
    want = f"no python at ~/nowhere/bin/python ({home}/nowhere/bin/python) on this host"
    assert want in res.stdout, res.stdout


@pytest.fixture
def greeting_bashrc(cluster: TestCluster) -> Iterator[None]:
    with cluster.login_shell(BASHRC, 0, 1):
        yield


@pytest.mark.parametrize("homes", [UNFINISHED], indirect=True)
@pytest.mark.usefixtures("greeting_bashrc")
def test_greeting_wrapper_and_bashrc_through_every_command(
    cluster: TestCluster, homes: list[Path], tmp_path: Path
) -> None:
    """A python wrapper and a .bashrc that greet: check, launch --detach, runs, stacks, stop,
    attach each read past the greetings; none of them crashes on them."""
    job = {
        "script": "tests/data/tick.py",
        "args": ["100000", "0.1"],
        "nproc_per_node": 2,
        "master_port": 29753,
    }
    inv = cluster.write_inventory(
        tmp_path / "inv.yaml", job, hosts=[0, 1], python="~/venv/bin/python"
    )
    res = ddptui("check", "-i", str(inv))
    assert res.returncode == 0, res.stdout + res.stderr
    no_traceback_of_ours(res.stderr)

    run_dir = tmp_path / "run"
    launch = ddptui("launch", "-i", str(inv), "--run-dir", str(run_dir), "--detach")
    assert launch.returncode == 0, launch.stderr
    no_traceback_of_ours(launch.stderr)
    run_id = launch.stdout.split()[-1]
    attach = Cmd(["attach", str(run_dir)], tmp_path / "attach")
    wait_for(lambda: "[r3 node1] tick 3 " in attach.stdout, 60, "rank 3 to tick")
    # The greetings are each host's own output, shown as such, not a crash.
    assert "[node0] Welcome to the cluster!" in attach.stdout, attach.stdout
    assert "[node0] hello from .bashrc" in attach.stdout

    runs = ddptui("runs", "--json", "--runs-root", str(tmp_path))
    no_traceback_of_ours(runs.stderr)
    assert runs.returncode == 0, runs.stderr
    [listed] = [r for r in json.loads(runs.stdout)["runs"] if r["id"] == run_id]
    assert listed["status"] == "running"

    stacks = ddptui("stacks", str(run_dir), "--json")
    no_traceback_of_ours(stacks.stderr)
    report = json.loads(stacks.stdout)
    ranks = sorted(r for g in report["groups"] + report["errors"] for r in g["ranks"])
    assert ranks == [0, 1, 2, 3], report

    stop = ddptui("stop", str(run_dir))
    assert stop.returncode == 0, stop.stderr
    no_traceback_of_ours(stop.stderr)
    assert_nothing_left(cluster, run_id)
    attach.wait(60)
    no_traceback_of_ours(attach.stderr)


# -- nproc_per_node: auto counts what the job will see ----------------------------------------


@pytest.fixture
def limited_gpus(cluster: TestCluster) -> Iterator[None]:
    """node0: 8 H100s, its .bashrc exporting CUDA_VISIBLE_DEVICES=0,1; node1: 2 A100s, one in
    MIG mode with 3 MIG devices (written from the documented format, not captured)."""
    cluster.put_tool(0, "nvidia-smi", nvidia_smi.stand_in(nvidia_smi.H100_BUSY))
    cluster.put_tool(1, "nvidia-smi", nvidia_smi.stand_in(nvidia_smi.A100_MIG))
    try:
        with cluster.login_shell("export CUDA_VISIBLE_DEVICES=0,1\n", 0):
            yield
    finally:
        for host in cluster.hosts[:2]:
            (host.bin_dir / "nvidia-smi").unlink()


TICKS = {"script": "tests/data/tick.py", "args": ["3", "0.01"], "nproc_per_node": "auto"}


@pytest.mark.usefixtures("limited_gpus")
def test_auto_counts_the_visible_gpus(cluster: TestCluster, tmp_path: Path) -> None:
    inv = cluster.write_inventory(tmp_path / "inv.yaml", {**TICKS, "master_port": 29754}, [0, 1])
    res = ddptui("check", "-i", str(inv))
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert "ok node0 gpu-visible: 2 of 8 GPUs visible (CUDA_VISIBLE_DEVICES=0,1)" in lines
    listed = cluster.ssh(1, "nvidia-smi -L").stdout  # the stand-in's UUIDs are node1's own
    mig = next(w.rstrip(")") for w in listed.split() if w.startswith("MIG-"))
    want = f"ok node1 gpu-visible: 1 of 4 GPUs and MIG devices visible (a CUDA process sees one MIG device, {mig})"  # noqa: E501
    assert want in lines, res.stdout
    for flags in ((), ("--skip-checks",)):  # with the checks' count, and with its own
        cli = Cli(inv, tmp_path / f"run{len(flags)}", flags=flags)
        assert cli.wait(180) == 0, cli.stderr
        assert "nproc_per_node auto: 2 on node0, 1 on node1 (world size 3)" in cli.stderr
        assert sorted(ln for ln in cli.stdout.splitlines() if ln.endswith(" 2")) == [
            "[r0 node0] tick 0 2",
            "[r1 node0] tick 1 2",
            "[r2 node1] tick 2 2",
        ]


@pytest.mark.usefixtures("limited_gpus")
def test_the_inventorys_cuda_visible_devices_wins(cluster: TestCluster, tmp_path: Path) -> None:
    node0 = {"host": cluster.hosts[0].addr, "name": "node0", "env": {"CUDA_VISIBLE_DEVICES": "5"}}
    inv = cluster.write_inventory(tmp_path / "inv.yaml", {**TICKS, "master_port": 29755}, [node0])
    report = json.loads(ddptui("check", "-i", str(inv), "--json").stdout)
    facts = report["hosts"][0]["facts"]
    assert (facts["gpu_count"], facts["visible_gpus"]) == (8, 1)
    assert facts["visible_note"] == (
        "1 of 8 GPUs visible (CUDA_VISIBLE_DEVICES=5 in the inventory's env)"
    )


# -- a slow login shell is a host starting, not a host lost -------------------------------------

SLOW_S = 4  # conda init on a busy network home, say: longer than the lease below


@pytest.fixture
def slow_login(cluster: TestCluster) -> Iterator[None]:
    with cluster.login_shell(f"sleep {SLOW_S}\n", 1):
        yield


@pytest.mark.usefixtures("slow_login")
def test_a_slow_login_shell_is_starting_not_lost(cluster: TestCluster, tmp_path: Path) -> None:
    """node1's login shell takes 4 s, longer than the 3 s lease: the lease starts at its agent's
    hello, so the launch goes through; a start_timeout shorter than the login names the host
    and what it waited for, never a network cut."""
    job = {"script": "tests/data/tick.py", "args": ["20", "0.01"], "nproc_per_node": 1,
           "master_port": 29755, "link_timeout": 3}  # fmt: skip
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1])
    launch = Cli(inv, tmp_path / "run")
    assert launch.wait(120) == 0, launch.stderr
    states = [json.loads(e) for e in launch.events() if '"HostState"' in e]
    node1 = [(e["state"], e["detail"]) for e in states if e["host"] == "node1"]
    assert [s for s, _ in node1[:3]] == ["connecting", "starting", "connected"]
    assert float(node1[2][1].split()[0]) >= SLOW_S  # connected after its login shell, in 4 s+
    assert "lost" not in launch.stderr
    assert_nothing_left(cluster, launch.run_id())

    short = cluster.write_inventory(
        tmp_path / "short.yaml", {**job, "start_timeout": 1}, hosts=[0, 1]
    )
    refused = Cli(short, tmp_path / "refused")
    assert refused.wait(120) == 1, refused.stderr
    assert "FAIL node1 start: the login shell or python did not start within 1 s" in refused.stderr
    assert "network cut" not in refused.stderr
    assert refused.summary()["failing_host"] == "node1"


def test_a_link_cut_while_the_login_shell_starts_is_lost_by_name(
    cluster: TestCluster, tmp_path: Path
) -> None:
    """node1's login shell would take a minute, and its link goes silent meanwhile: the SSH
    keepalives name it lost, long before start_timeout (300 s) would."""
    inv = cluster.write_inventory(tmp_path / "inv.yaml", {"script": "x.py"}, hosts=[0, 1])
    veth = veth_name(cluster.prefix, 1)

    def shell() -> list[int]:
        return [p for p in ns_pids(cluster.hosts[1].netns) if "sleep 61" in cmdline(p)]

    try:
        with cluster.login_shell("sleep 61\n", 1):
            check = Cmd(["check", "-i", str(inv)], tmp_path / "check")
            wait_for(shell, 60, "node1's login shell")
            subprocess.run(["ip", "link", "set", veth, "down"], check=True)
            assert check.wait(60) == 3, check.stdout + check.stderr  # unreachable
    finally:
        subprocess.run(["ip", "link", "set", veth, "up"], check=True)
        for pid in shell():
            os.kill(pid, signal.SIGKILL)
    said = check.stdout + check.stderr
    assert "node1" in said and "lost while its login shell started" in said, said


# -- one login shell per host per command -----------------------------------------------------


@pytest.fixture
def logins(cluster: TestCluster) -> Iterator[Callable[[], list[int]]]:
    """Every login shell on hosts 0 and 1 leaves a line in ~/logins: `taken()` counts each
    host's since the last call."""
    hosts = cluster.hosts[:2]

    def taken() -> list[int]:
        counts = []
        for h in hosts:
            f = h.home / "logins"
            counts.append(len(f.read_text().splitlines()) if f.exists() else 0)
            f.unlink(missing_ok=True)
        return counts

    try:
        with cluster.login_shell('echo login >> "$HOME/logins"\n', 0, 1):
            yield taken
    finally:
        for h in hosts:
            (h.home / "logins").unlink(missing_ok=True)


def test_each_command_costs_one_login_shell_per_host(
    cluster: TestCluster, tmp_path: Path, logins: Callable[[], list[int]]
) -> None:
    """`check` and `launch` (its checks included) one login shell per host; `runs`, `stop` and
    `attach` at most one: everything rides the one agent (a slow home pays each login)."""
    job = {"script": "tests/data/tick.py", "args": ["100000", "0.05"], "nproc_per_node": 1,
           "master_port": 29757}  # fmt: skip
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1])
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    logins()
    check = Cmd(["check", "-i", str(inv)], tmp_path / "check", env)
    assert check.wait(120) == 0, check.stderr
    assert logins() == [1, 1]
    launch = Cli(inv, tmp_path / "run", flags=["--detach"], env=env)
    assert launch.wait(120) == 0, launch.stderr
    assert logins() == [1, 1]
    run = str(tmp_path / "run")
    for args in (["runs"], ["stop", run], ["attach", run]):
        cmd = Cmd(args, tmp_path / args[0], env)
        cmd.wait(120)
        assert max(logins()) <= 1, f"{args[0]}: {cmd.stderr}"
    assert_nothing_left(cluster, launch.run_id())
