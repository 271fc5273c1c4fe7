"""remote/agents/sshclient.py's command line and its reading of ssh's words (the real sshds:
tests/e2e/test_sshclient_e2e.py)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from ddptui.remote import inventory
from ddptui.remote.agents import fanout, shipper, sshclient
from ddptui.remote.slurm import early

INV = """\
defaults: {user: alice, port: 2222, identity_file: ~/.ssh/id_x, ssh_config: /etc/cfg,
           known_hosts: /tmp/kh}
slurm: {login: "hpc-login", nodes: 2}
job: {script: t.py}
"""


def login() -> inventory.Host:
    inv = inventory.parse(INV, Path("inv.yaml"))
    assert inv.login is not None
    return inv.login


def test_the_command_line_verifies_keys_never_prompts_and_quotes_the_command() -> None:
    argv = sshclient.argv_for(
        sshclient.Reach.of(login()), ["sh", "-c", "echo $HOME; rm -rf /", "a b"]
    )
    options = " ".join(argv)
    for option in ("BatchMode=yes", "StrictHostKeyChecking=yes", "ControlPath=none"):
        assert f"-o {option}" in options
    assert argv[argv.index("-F") + 1] == "/etc/cfg"
    assert argv[argv.index("-l") + 1] == "alice" and argv[argv.index("-p") + 1] == "2222"
    assert argv[argv.index("-i") + 1] == str(Path("~/.ssh/id_x").expanduser())
    assert 'UserKnownHostsFile="/tmp/kh"' in argv
    assert argv[-3:-1] == ["--", "hpc-login"]  # the host, then the command: one shell word
    assert shlex.split(argv[-1]) == ["sh", "-c", "echo $HOME; rm -rf /", "a b"]


@pytest.mark.parametrize(
    ("said", "reason", "tries"),
    [
        (
            "No ED25519 host key is known for 10.0.0.1 and you have requested strict "
            "checking.\nHost key verification failed.",
            "host key not verified for alice@hpc-login:2222; check /tmp/kh",
            1,
        ),
        (
            "alice@10.0.0.1: Permission denied (publickey).",
            "authentication refused for alice@hpc-login:2222 (tried ~/.ssh/id_x)",
            1,
        ),
        (
            "ssh: connect to host 10.0.0.1 port 2222: Connection refused",
            "connection refused by alice@hpc-login:2222",
            fanout.REFUSED_TRIES,
        ),
        (
            "ssh: Could not resolve hostname hpc-login: Name or service not known",
            "cannot resolve host name 'hpc-login'",
            1,
        ),
        (
            "ssh: connect to host 10.0.0.1 port 2222: Connection timed out",
            "timed out connecting to alice@hpc-login:2222",
            1,
        ),
        (
            "kex_exchange_identification: Connection closed by remote host\n"
            "Connection closed by 10.0.0.1 port 2222",
            "cannot connect to alice@hpc-login:2222: Connection closed by 10.0.0.1 port 2222",
            fanout.DROPPED_TRIES,
        ),
    ],
)
def test_ssh_s_words_become_the_reason_asyncssh_s_would_give(
    said: str, reason: str, tries: int
) -> None:
    assert sshclient.reason(said, login()).startswith(reason)
    assert sshclient.tries(said) == tries


def test_ssh_s_own_chatter_is_not_the_host_s_words() -> None:
    lines = [
        'Authenticated to 10.0.0.1 ([10.0.0.1]:22) using "publickey".',
        "bash: conda: command not found",
        "Transferred: sent 3472, received 3324 bytes, in 0.0 seconds",
        "Bytes per second: sent 71072.3, received 68042.8",
    ]
    assert [line for line in lines if not sshclient.CHATTER.match(line)] == [lines[1]]


@pytest.mark.parametrize(
    "text",
    [
        INV,
        "slurm: {login: hpc, nodes: 1}\njob: {script: t.py}\n",
        "defaults: {ssh_config: cfg/ssh, python: /opt/py/bin/python3, port: '2200'}\n"
        "slurm: {login: hpc, nodes: 4}\njob: {script: t.py}\n",
        "defaults: {ssh_config: ~/cfg, user: bob}\n"
        "slurm: {login: hpc, nodes: 2}\njob: {script: t.py}\n",
    ],
)
def test_the_early_login_is_the_one_the_checked_inventory_asks_for(
    text: str, tmp_path: Path
) -> None:
    """remote/slurm/early.py reads the file as written; the checked inventory's login asks ssh
    for the same command line, so the transport takes the early one on."""
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    found = early.guess(path)
    login = inventory.load(path).login
    assert found is not None and login is not None
    reach, python = found
    command = shipper.command(python, prefork=False)
    assert sshclient.argv_for(reach, command) == sshclient.argv_for(
        sshclient.Reach.of(login), shipper.command(login.python, prefork=False)
    )


@pytest.mark.parametrize(
    "text",
    ["hosts: [a]\njob: {script: t.py}\n", "slurm: [x]\n", "slurm: {login: [a, b]}\n", ": :\n"],
)
def test_no_early_login_without_a_login_node_written(text: str, tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    assert early.guess(path) is None
