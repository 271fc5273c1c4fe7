"""`ddptui ssh` and the dashboard's `!`: the one ssh command line, built from the inventory."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.remote.agents import shell
from ddptui.remote.events import NodeRanks, NodeStarted, Notice
from ddptui.remote.inventory import parse

INVENTORY = """\
defaults: {user: root, workdir: "~/my proj"}
hosts:
  - host: gpu[1-2]
    port: 2222
    identity_file: ~/.ssh/id_x
    known_hosts: /etc/ddp%known
  - host: 10.0.0.9
    name: spare
    spare: true
  - host: localhost
    name: here
    transport: local
    workdir: /tmp
job: {script: t.py, nproc_per_node: 4}
"""
INV = parse(INVENTORY, Path("inv.yaml"))


@pytest.fixture(autouse=True)
def same_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shell, "home_config", lambda: None)  # ssh reads ~/.ssh/config itself


def test_the_inventory_s_settings_on_ssh_s_command_line() -> None:
    argv = shell.shell(INV.hosts[1]).argv
    home = os.path.expanduser("~")
    assert argv[1:] == [
        "-l", "root", "-p", "2222", "-i", f"{home}/.ssh/id_x",
        "-o", 'UserKnownHostsFile="/etc/ddp%%known"', "-o", "StrictHostKeyChecking=yes",
        "-t", "--", "gpu2", """cd ~/'my proj' && exec "$SHELL" -l""",
    ]  # fmt: skip
    assert argv[0].endswith("ssh")


def test_a_config_ddptui_reads_is_the_one_ssh_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shell, "home_config", lambda: "/home/x/.ssh/config")
    assert shell.shell(INV.hosts[0]).argv[1:3] == ["-F", "/home/x/.ssh/config"]


@pytest.mark.parametrize(
    ("workdir", "command"),
    [
        (None, 'exec "$SHELL" -l'),
        ("~", 'cd ~ && exec "$SHELL" -l'),
        ("~bob/x y", """cd ~bob/'x y' && exec "$SHELL" -l"""),
        ("/srv/a'b;rm -rf /", """cd '/srv/a'"'"'b;rm -rf /' && exec "$SHELL" -l"""),
        ("~$(id)/x", """cd '~$(id)/x' && exec "$SHELL" -l"""),
    ],
)
def test_the_workdir_reaches_the_shell_quoted_but_its_home(workdir: str, command: str) -> None:
    assert shell.remote_command(workdir) == command


def test_the_command_is_one_word_sh_reads_as_written(tmp_path: Path) -> None:
    """What sshd hands the login shell: `cd` into the quoted path, `~` its home."""
    odd = tmp_path / "a 'b' $x"
    odd.mkdir()
    for workdir in (str(odd), "~/a 'b' $x"):
        command = shell.remote_command(workdir).replace('exec "$SHELL" -l', "pwd")
        env = {**os.environ, "HOME": str(tmp_path)}
        out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env)
        assert out.stdout.strip() == str(odd), out.stderr


def test_a_local_host_is_a_login_shell_here_in_its_workdir() -> None:
    local = shell.shell(INV.hosts[2])
    assert (local.argv[1:], local.cwd) == (["-l"], "/tmp")


@pytest.mark.parametrize(
    ("spec", "name"),
    [("gpu1", "gpu1"), ("spare", "spare"), ("10.0.0.9", "spare"), ("1", "gpu2"), ("r5", "gpu2"),
     ("r0", "gpu1")],
)  # fmt: skip
def test_a_host_by_name_address_node_or_rank(spec: str, name: str) -> None:
    assert shell.find(INV, spec).name == name


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("gpu9", "no host, node or rank 'gpu9' in inv.yaml"),
        ("3", "no node 3: the inventory has nodes 0-2"),
        ("r12", "no rank 12: ranks are 0-11"),
    ],
)
def test_a_name_for_nothing_says_so(spec: str, words: str) -> None:
    with pytest.raises(shell.ShellError, match=words):
        shell.find(INV, spec)


def test_a_rank_placed_by_the_run_alone_asks_for_the_host() -> None:
    inv = parse(INVENTORY.replace("nproc_per_node: 4", "nproc_per_node: auto"), Path("i"))
    with pytest.raises(shell.ShellError, match=r"learned during a run .* name its host"):
        shell.find(inv, "r3")


def test_ddptui_ssh_becomes_that_shell(tmp_path: Path) -> None:
    """The command replaces ddptui (its status is the shell's): a local host, here."""
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"hosts: [{{host: localhost, transport: local, workdir: {tmp_path}}}]\n"
                   "job: {script: t.py}\n")  # fmt: skip
    env = {**os.environ, "SHELL": "/bin/sh", "ENV": ""}
    res = subprocess.run(
        [sys.executable, "-m", "ddptui.tui.cli", "ssh", "-i", str(inv), "0"],
        input="pwd; exit 7\n", capture_output=True, text=True, env=env, timeout=30,
    )  # fmt: skip
    assert (res.returncode, res.stdout.strip().splitlines()[-1]) == (7, str(tmp_path))
    bad = subprocess.run(
        [sys.executable, "-m", "ddptui.tui.cli", "ssh", "-i", str(inv), "nope"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert (bad.returncode, bad.stderr) == (2, f"ddptui: no host, node or rank 'nope' in {inv}\n")
    assert shlex.split(shell.remote_command("/x"))[0] == "cd"


def test_a_run_s_placement_names_each_rank_s_host(tmp_path: Path) -> None:
    """c10d or spawn: ranks learned in the run (events.jsonl), a spare's place taken later."""
    events = tmp_path / "events.jsonl"
    started = [NodeStarted("gpu1", 0, 1, "a", ()), NodeRanks("gpu1", 0, (4, 5, 6, 7)),
               NodeStarted("gpu2", 1, 2, "b", (0, 1, 2, 3)), Notice("info", "NodeStarted"),
               NodeStarted("spare", 1, 3, "c", (0, 1, 2, 3))]  # fmt: skip
    events.write_text("".join(e.to_json() + "\n" for e in started))
    ranks = shell.placed(events)
    assert ranks == {0: "spare", 1: "spare", 2: "spare", 3: "spare", 4: "gpu1", 5: "gpu1",
                     6: "gpu1", 7: "gpu1"}  # fmt: skip
    assert shell.find(INV, "r6", ranks).name == "gpu1"
    assert shell.find(INV, "r0", ranks).host == "10.0.0.9"
    with pytest.raises(shell.ShellError, match="the run placed no rank 8"):
        shell.find(INV, "r8", ranks)
    with pytest.raises(shell.ShellError, match="cannot read where the run placed"):
        shell.placed(tmp_path / "none.jsonl")


def test_ddptui_ssh_to_a_rank_of_a_run(tmp_path: Path) -> None:
    """`--run RUN`: the run's own inventory (no -i) and where it placed the rank."""
    run = tmp_path / "data" / "ddptui" / "runs" / "20260101-000000-abcd"
    run.mkdir(parents=True, mode=0o700)
    (run / "run.json").write_text('{"run_id": "20260101-000000-abcd"}')
    (run / "inventory.yaml").write_text(
        f"hosts:\n  - {{host: localhost, name: a, transport: local, workdir: {tmp_path}}}\n"
        "  - {host: localhost, name: b, transport: local, workdir: /}\n"
        "job: {script: t.py, launcher: spawn}\n"
    )
    (run / "events.jsonl").write_text(NodeRanks("a", 0, (0, 1)).to_json() + "\n")
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "SHELL": "/bin/sh", "ENV": ""}
    res = subprocess.run(
        [sys.executable, "-m", "ddptui.tui.cli", "ssh", "--run", "20260101", "r1"],
        input="pwd; exit 3\n", capture_output=True, text=True, env=env, timeout=30, cwd="/",
    )  # fmt: skip
    assert (res.returncode, res.stdout.strip()) == (3, str(tmp_path)), res.stderr
