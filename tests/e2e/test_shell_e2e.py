"""`ddptui init` and a shell on any host, on the ssh test hosts, in a real terminal (tmux):

- `ddptui init` on the test hosts' ssh_config (as ~/.ssh/config) writes an inventory that
  passes `check` as written, and a launch of it runs;
- `ddptui ssh NODE` lands in a login shell on that host, in the job's workdir;
- `!` in the dashboard does the same and comes back to the dashboard as it was;
- behind the bastion too, through its one login.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2etools import Cli, ssh_home
from test_bastion_e2e import home, private  # noqa: F401 (fixtures: the bastion's cluster)
from testhosts import REPO, TestCluster
from tmux import Tmux, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux"),
]

DDPTUI = str(Path(sys.executable).parent / "ddptui")
# Typed in the shell: says where it landed (the typed line itself does not match the answer).
WHERE = 'echo "at $(hostname) in $(pwd)"'


@pytest.fixture
def cluster_home(cluster: TestCluster, tmp_path: Path) -> dict[str, str]:
    """A HOME whose ~/.ssh/config is the test hosts' (node0..node3 by alias)."""
    return ssh_home(cluster.ssh_config, tmp_path / "home")


@pytest.fixture
def terminals() -> Iterator[list[Tmux]]:
    made: list[Tmux] = []
    yield made
    for term in made:
        term.kill()


def init(env: dict[str, str], inv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "ddptui.tui.cli", "init", "-i", str(inv), *args]
    return subprocess.run(
        argv, capture_output=True, text=True, cwd=REPO, env={**os.environ, **env}, timeout=300
    )


def test_init_writes_what_check_passes_and_a_launch_runs(
    cluster: TestCluster, cluster_home: dict[str, str], tmp_path: Path
) -> None:
    inv = tmp_path / "inventory.yaml"
    res = init(cluster_home, inv, "--script", "examples/train.py")
    assert res.returncode == 0, res.stdout + res.stderr  # the check, as written, passed
    assert f"ddptui: wrote {inv}: 4 hosts (node[0-3])" in res.stderr
    text = inv.read_text()
    assert "  - host: node[0-3]        # root@10.213.7.[11-14]:22\n" in text.replace(
        cluster.subnet, "10.213.7"
    )
    assert f"  workdir: {REPO}" in text and "4 hosts: checks passed" in res.stdout
    cli = Cli(inv, tmp_path / "run", "--epochs", "1", env=cluster_home)
    assert cli.wait() == 0, cli.stderr
    for r in range(4):  # one rank a host: nproc_per_node auto on hosts without a GPU
        assert f"rank {r}/4 on node{r}" in (cli.run_dir / f"rank-{r}.log").read_text()
    assert "done" in (cli.run_dir / "rank-0.log").read_text()


def test_ssh_lands_in_the_workdir_on_that_host(
    cluster: TestCluster, tmp_path: Path, terminals: list[Tmux]
) -> None:
    workdir = tmp_path / "my work"
    workdir.mkdir()
    inv = cluster.write_inventory(
        tmp_path / "inv.yaml", {"script": "t.py"}, hosts=(0, 1), workdir=str(workdir)
    )
    term = Tmux([DDPTUI, "ssh", "-i", str(inv), "node1"], {"TERM": "xterm-256color"}, (120, 30))
    terminals.append(term)
    term.send(WHERE, "Enter")
    wait_for(lambda: f"at node1 in {workdir}" in term.screen(), "the shell on node1", 60, term)
    term.send("exit", "Enter")
    wait_for(lambda: not term.alive, "the shell to end, and ddptui with it", 30, term)


TITLE = re.compile(r"─ ?([^─│]+?) · (?:following|paused)")  # the log pane's border title


def log_title(term: Tmux) -> str | None:
    """The view the log pane's title names (`all ranks`, `rank 1`...), None before it shows."""
    m = TITLE.search(term.screen())
    return m[1].strip() if m else None


def test_bang_in_the_dashboard_and_back_with_the_run_going_on(
    cluster: TestCluster, tmp_path: Path, terminals: list[Tmux]
) -> None:
    """A shell twice as long as the run's lease: the dashboard's loop kept the run alive."""
    job = {
        "script": "tests/data/tick.py", "args": ["100000", "0.1"], "nproc_per_node": 1,
        "master_port": 29653, "link_timeout": 3, "stop_grace": 2,
    }  # fmt: skip
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=(0, 1))
    env = {"XDG_DATA_HOME": str(tmp_path / "data"), "TERM": "xterm-256color"}
    term = Tmux([DDPTUI, "-i", str(inv)], env, (100, 30))
    terminals.append(term)
    wait_for(lambda: "l Launch" in term.screen(), "the dashboard", 60, term)
    term.send("l")
    wait_for(lambda: re.search(r"r1 node1 │ tick 1 \d+", term.screen()), "rank 1", 120, term)
    while (shown := log_title(term)) != "rank 1":
        term.send("]")  # the next view, until rank 1's log: `!` goes to its host
        # one key at a time: a key sent before the last one's view is drawn would run past
        wait_for(lambda b=shown: log_title(term) not in (b, None), "the next view", 10, term)
    term.send("!")
    wait_for(lambda: "ddptui: node1: " in term.screen(), "the dashboard to give way", 30, term)
    term.send(f"sleep 6; {WHERE}", "Enter")  # in the shell for twice link_timeout
    wait_for(lambda: f"at node1 in {REPO}" in term.screen(), "the shell on node1", 60, term)
    term.send("exit", "Enter")
    wait_for(lambda: "│ running │" in term.screen(), "the dashboard back, running", 30, term)
    before = max(map(int, re.findall(r"tick 1 (\d+)", term.screen())))
    wait_for(
        lambda: max(map(int, re.findall(r"tick 1 (\d+)", term.screen())), default=0) > before,
        "rank 1's lines to go on",
        30,
        term,
    )
    term.send("q")
    wait_for(lambda: "A job is running on 2 hosts." in term.screen(), "the question", 30, term)
    term.send("s")  # stop the job and quit
    wait_for(lambda: not term.alive, "the dashboard to quit", 60, term)


def test_ssh_and_init_behind_the_bastion(
    private: TestCluster,  # noqa: F811
    home: dict[str, str],  # noqa: F811
    tmp_path: Path,
    terminals: list[Tmux],
) -> None:
    inv = private.write_inventory(tmp_path / "inv.yaml", {"script": "t.py"}, hosts=(0, 2))
    before = private.bastion_logins()
    term = Tmux([DDPTUI, "ssh", "-i", str(inv), "node2"], home, (120, 30))
    terminals.append(term)
    term.send(WHERE, "Enter")
    wait_for(lambda: f"at node2 in {REPO}" in term.screen(), "the shell on node2", 60, term)
    term.send("exit", "Enter")
    wait_for(lambda: not term.alive, "the shell to end", 30, term)
    assert private.bastion_logins() - before == 1  # through the bastion, OpenSSH's ProxyJump

    written = tmp_path / "init.yaml"
    res = init(home, written, "--script", "examples/train.py")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "3 hosts (node[0-2]); left out the jump host bastion" in res.stderr
    assert "via bastion" in written.read_text()
