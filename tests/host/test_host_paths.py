"""`~` in the inventory's paths (python, script, workdir) is the host's home, as ssh's shell
would make it: expanded on the host, the same way by the check and by every command that execs
there (the one command that starts the host's agent, remote/agents/shipper.py). Here through the
local transport, with HOME pointed at a directory of the test's own."""

from __future__ import annotations

import asyncio
import os
import pwd
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from probetools import free_port, levels, local_inventory, run_probe, with_agent
from probetools import message as _message

from ddptui.remote import inventory
from ddptui.remote.agents import shipper
from ddptui.remote.agents.agent import Agent
from ddptui.remote.host import job, protocol


def tilde(word: str, home: str) -> str:
    """What shipper.TILDE makes of `word` with HOME=home."""
    script = "py=$1\n" + shipper.TILDE + '\nprintf %s "$py"'
    res = subprocess.run(
        ["sh", "-c", script, "t", word], capture_output=True, text=True, env={"HOME": home}
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


ROOT_HOME = pwd.getpwuid(0).pw_dir


@pytest.mark.parametrize(
    ("word", "want"),
    [
        ("~", "/h o"),
        ("~/venv/bin/python", "/h o/venv/bin/python"),
        ("~root/x y", f"{ROOT_HOME}/x y"),
        ("~root", ROOT_HOME),
        ("~no-such-user/x", "~no-such-user/x"),  # as a shell leaves it
        ("~a;b/x", "~a;b/x"),  # not a user name: never reaches eval
        ("~$(touch /tmp/ddptui-pwned)/x", "~$(touch /tmp/ddptui-pwned)/x"),
        ("~-/x", "~-/x"),  # bash's OLDPWD form: not a home
        ("/usr/bin/python3", "/usr/bin/python3"),
        ("python3", "python3"),
        ("a~/b", "a~/b"),
    ],
)
def test_tilde_like_the_login_shell(word: str, want: str) -> None:
    assert tilde(word, "/h o") == want
    assert not Path("/tmp/ddptui-pwned").exists()


@pytest.mark.parametrize("word", ["~", "~/venv/bin/python", "~root/x y", "~no-such-user/x"])
def test_the_daemon_expands_as_the_shell_does(word: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/h o")
    assert job.expand(word) == tilde(word, "/h o")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME holding ~/venv/bin/python (a wrapper around this interpreter) and ~/proj."""
    home = tmp_path / "home"
    (home / "venv" / "bin").mkdir(parents=True)
    python = home / "venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    (home / "proj").mkdir()
    (home / "job.py").write_text("print('hi')\n")
    monkeypatch.setenv("HOME", str(home))
    return home


def test_check_finds_python_script_and_workdir_under_tilde(home: Path, tmp_path: Path) -> None:
    text = (
        "defaults: {transport: local, python: ~/venv/bin/python, workdir: ~/proj}\n"
        "hosts: [{host: localhost}]\n"
        f"job: {{script: ~/job.py, master_port: {free_port()}}}\n"
    )
    checked = run_probe(inventory.parse(text, tmp_path / "inventory.yaml"))
    assert levels(checked)["python"] == "ok", checked.findings
    assert checked.facts["python_exe"] == sys.executable
    assert checked.facts["workdir"] == str(home / "proj")
    assert checked.facts["script"] == str(home / "job.py") and checked.facts["script_found"]


def test_missing_python_under_tilde_names_where_it_looked(home: Path, tmp_path: Path) -> None:
    checked = run_probe(local_inventory(tmp_path, host="  python: ~/nowhere/python\n"))
    assert levels(checked)["python"] == "failure"
    want = f"no python at ~/nowhere/python ({home}/nowhere/python) on this host"
    assert _message(checked, "python") == want


def test_the_agent_runs_a_tilde_python(home: Path, tmp_path: Path) -> None:
    """Every command's agent (check, launch, attach, stop, runs) runs `~/venv/bin/python`."""
    inv = local_inventory(tmp_path, host="  python: ~/venv/bin/python\n")

    async def status(agent: Agent) -> dict[str, Any]:
        assert agent.hello is not None and agent.hello.missing_python is None
        return await agent.request(protocol.STATUS, {"nodes": [["no-such-run", 0]]})

    got = asyncio.run(with_agent(inv, 0, status))
    assert got["runs"] == {"no-such-run": {"0": None}}
    assert os.environ["HOME"] == str(home)
