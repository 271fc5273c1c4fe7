"""`ddptui init`: the hosts ~/.ssh/config names, resolved by OpenSSH itself (`ssh -G`, for
real here: Include, Match and ProxyJump are its to apply), written as an inventory that loads
and that the schema takes."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

import jsonschema
import pytest
import yaml

from ddptui.remote import init_inventory as init
from ddptui.remote import inventory, schema
from ddptui.remote.agents import openssh

CONFIG = """\
Include {dir}/conf.d/*.conf
Host bastion
    HostName 203.0.113.5
    User jump
Host gpu01 gpu02 gpu03 gpu04
    ProxyJump bastion
Host gpu01
    HostName 10.1.0.1
Host gpu02
    HostName 10.1.0.2
Host gpu03
    HostName 10.1.0.3
Host gpu04
    HostName 10.1.0.4
Host gpu-* !gpu-x *.example
    User root
Match originalhost gpu07
    Port 2222
Host gpu07 gpu09
    HostName %h.lab
Host *
    User alice
"""
LAB = "Host lab\n  HostName 10.0.0.9\n  Port 2200\n"

needs_ssh = pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")


@pytest.fixture
def config(tmp_path: Path) -> Path:
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "lab.conf").write_text(LAB)
    path = tmp_path / "config"
    path.write_text(CONFIG.format(dir=tmp_path))
    return path


def write(config: Path, *asked: str) -> tuple[str, str]:
    resolve = partial(openssh.ssh_g, config_file=str(config))
    return asyncio.run(
        init.inventory(asked, script="train.py", workdir="/srv/p", config=config, resolve=resolve)
    )


def hosts_of(text: str) -> list[tuple[str, str]]:
    return [(h.name, h.host) for h in inventory.parse(text, Path("inv.yaml")).hosts]


def test_the_config_names_hosts_through_include_never_patterns(config: Path) -> None:
    assert init.config_hosts(config) == [
        "lab", "bastion", "gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "gpu09",
    ]  # fmt: skip


@needs_ssh
def test_every_host_but_the_bastion_in_ranges_with_what_ssh_resolved(config: Path) -> None:
    text, said = write(config)
    assert said == "7 hosts (lab, gpu[01-04], gpu07, gpu09); left out the jump host bastion"
    assert "  - host: gpu[01-04]       # alice@10.1.0.[1-4]:22 via bastion\n" in text
    assert "  - host: gpu07            # alice@gpu07.lab:2222\n" in text  # Match: OpenSSH's
    assert "  - host: gpu09            # alice@gpu09.lab:22\n" in text  # another port: apart
    assert "  # left out: bastion (the others jump through it)\n" in text
    assert [name for name, _ in hosts_of(text)] == [
        "lab", "gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "gpu09",
    ]  # fmt: skip


@needs_ssh
def test_patterns_and_names_in_the_order_given(config: Path) -> None:
    text, _ = write(config, "gpu0[7-9]", "gpu0[1-2]", "10.0.0.7", "bastion")
    assert hosts_of(text) == [
        ("gpu07", "gpu07"),
        ("gpu09", "gpu09"),
        ("gpu01", "gpu01"),
        ("gpu02", "gpu02"),
        ("10.0.0.7", "10.0.0.7"),
        ("bastion", "bastion"),
    ]  # fmt: skip  (a host named outright is kept, a bastion too)


@needs_ssh
def test_the_file_loads_passes_the_schema_and_names_it(config: Path) -> None:
    text, _ = write(config)
    assert text.splitlines()[0] == schema.modeline() == f"{schema.MODELINE}{schema.FILE.as_uri()}"
    inv = inventory.parse(text, Path("inv.yaml"))
    assert (inv.job.script, inv.job.nproc_per_node, inv.job.master_port) == (
        "train.py", "auto", "auto",
    )  # fmt: skip
    assert all(h.workdir == "/srv/p" and h.user is None and h.port is None for h in inv.hosts)
    jsonschema.validate(yaml.safe_load(text), schema.generate())


def test_a_workdir_or_script_yaml_would_misread_is_quoted() -> None:
    text = init.render([("gpu[1-2]", "x")], [], [], script="a: b.py", workdir="[weird]")
    inv = inventory.parse(text, Path("inv.yaml"))
    assert (inv.job.script, inv.hosts[0].workdir, len(inv.hosts)) == ("a: b.py", "[weird]", 2)


@pytest.mark.parametrize(
    ("asked", "words"),
    [
        (["nope-*"], "no host in ~/.ssh/config matches 'nope-*' (its hosts: lab, bastion"),
        (["gpu-*", "lab"], "no host in ~/.ssh/config matches 'gpu-*'"),
    ],
)
@needs_ssh
def test_nothing_to_write_says_why(config: Path, asked: list[str], words: str) -> None:
    with pytest.raises(init.InitError) as info:
        write(config, *asked)
    assert words in str(info.value)


def test_an_empty_config_asks_for_names(tmp_path: Path) -> None:
    with pytest.raises(init.InitError, match="names no host: name them"):
        write(tmp_path / "none")


RECORDED = {  # ssh -G's output, the lines that matter (OpenSSH 9.2)
    "a1": "host a1\nhostname 10.0.0.1\nuser root\nport 22\nproxyjump j@jump:2222,hop2\n",
    "a2": "host a2\nhostname 10.0.0.2\nuser root\nport 22\nproxyjump j@jump:2222,hop2\n",
    "a3": "host a3\nhostname 10.0.0.3\nuser bob\nport 22\n",
    "hop2": "host hop2\nhostname 10.9.0.1\nuser root\nport 22\n",
}


def test_recorded_answers_fold_by_route_and_find_every_hop() -> None:
    async def resolve(host: str) -> openssh.Settings:
        return openssh.parse(RECORDED[host])

    resolved = asyncio.run(init.resolve_all(list(RECORDED), resolve))
    assert init.jump_hosts(resolved) == {"jump", "hop2"}
    assert init.entries(resolved) == [
        ("a[1-2]", "root@10.0.0.[1-2]:22 via j@jump:2222,hop2"),
        ("a3", "bob@10.0.0.3:22"),
        ("hop2", "root@10.9.0.1:22"),
    ]


def test_a_refused_config_is_openssh_s_own_words(tmp_path: Path) -> None:
    async def resolve(host: str) -> openssh.Settings:
        raise openssh.OpenSSHError("/x/config line 3: Bad configuration option: prot")

    with pytest.raises(init.InitError, match=r"ssh -G a: .*Bad configuration option: prot"):
        asyncio.run(init.resolve_all(["a"], resolve))


@needs_ssh
def test_ddptui_init_writes_once_and_refuses_to_overwrite(tmp_path: Path) -> None:
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text("Host a1 a2\n    User root\n")
    env = {**os.environ, "HOME": str(tmp_path)}
    inv = tmp_path / "inv.yaml"

    def ddptui(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "ddptui.tui.cli", "init", "-i", str(inv), "--no-check", *args]
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)

    first = ddptui()
    assert (first.returncode, first.stderr) == (0, f"ddptui: wrote {inv}: 2 hosts (a[1-2])\n")
    assert "  - host: a[1-2]           # root@a[1-2]:22\n" in inv.read_text()
    again = ddptui("a1")
    assert (again.returncode, again.stderr) == (
        2, f"ddptui: {inv} exists: give another -i, or --force to overwrite it\n",
    )  # fmt: skip
    assert ddptui("a1", "--force").returncode == 0 and "host: a1 " in inv.read_text()
    inv = tmp_path / "no such dir" / "inv.yaml"
    assert ddptui("a1").stderr == f"ddptui: cannot write {inv}: No such file or directory\n"
    none = ddptui("--force", "b*")
    assert (none.returncode, none.stderr) == (
        2, "ddptui: no host in ~/.ssh/config matches 'b*' (its hosts: a1, a2)\n",
    )  # fmt: skip


@needs_ssh
@pytest.mark.security
def test_ddptui_init_writes_no_file_through_a_link_and_0644_whatever_the_umask(
    tmp_path: Path,
) -> None:
    """A link planted where the inventory goes (a shared workdir) is never written through:
    a dangling one is refused as a file that exists, and --force replaces the link itself,
    leaving its target as it was; the file is 0644 under any umask."""
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text("Host a1\n    User root\n")
    inv, victim = tmp_path / "inv.yaml", tmp_path / "victim"

    def ddptui(umask: int, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "ddptui.tui.cli", "init", "-i", str(inv), "--no-check", *args]
        env = {**os.environ, "HOME": str(tmp_path)}
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60,
                              umask=umask)  # fmt: skip

    inv.symlink_to(victim)  # dangling: exists() says no, and open() would create its target
    refused = ddptui(0o022)
    assert (refused.returncode, refused.stderr) == (
        2, f"ddptui: {inv} exists: give another -i, or --force to overwrite it\n",
    )  # fmt: skip
    assert not victim.exists()
    victim.write_text("the victim's own\n")
    assert ddptui(0o077, "--force").returncode == 0
    assert victim.read_text() == "the victim's own\n" and not inv.is_symlink()
    assert "host: a1 " in inv.read_text() and (inv.stat().st_mode & 0o777) == 0o644
    inv.unlink()
    assert ddptui(0o000).returncode == 0 and (inv.stat().st_mode & 0o777) == 0o644
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
