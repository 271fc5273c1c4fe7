"""Hosts behind a bastion: a private network this machine cannot route to, reached through
`ProxyJump` in ~/.ssh/config, every host written by its alias (which only the bastion resolves).

The test hosts' prefix and subnet: DDPTUI_TESTHOSTS_BASTION=PREFIX:SUBNET, by default the
session's prefix + "j" and the next /24 (ddpt:10.213.7 → ddptj:10.213.8; the benchmarks own ddptb).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from conftest import PREFIX, SUBNET
from e2etools import Cli, Cmd
from testhosts import REPO, TestCluster

pytestmark = pytest.mark.e2e

a, b, c = SUBNET.split(".")
DEFAULT = f"{PREFIX}j:{a}.{b}.{int(c) + 1}"
BASTION_PREFIX, _, BASTION_SUBNET = os.environ.get("DDPTUI_TESTHOSTS_BASTION", DEFAULT).partition(
    ":"
)

# Every rank says where its MASTER_ADDR points, then the three hosts meet over gloo.
SCRIPT = """\
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
print(f"MASTER_ADDR={os.environ['MASTER_ADDR']} sum={int(t.item())}", flush=True)
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def private(
    require_testhosts: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestCluster]:
    root = tmp_path_factory.mktemp("bastion")
    with TestCluster(
        3, root=root, prefix=BASTION_PREFIX, subnet=BASTION_SUBNET, bastion=True
    ) as cluster:
        yield cluster


@pytest.fixture
def home(private: TestCluster, tmp_path: Path) -> dict[str, str]:
    """A HOME whose ~/.ssh/config is the cluster's: ProxyJump bastion for every host."""
    ssh = tmp_path / "home" / ".ssh"
    ssh.mkdir(parents=True)
    (ssh / "config").write_text(private.ssh_config.read_text())
    return {"HOME": str(ssh.parent)}


def test_unreachable_from_here(private: TestCluster) -> None:
    route = subprocess.run(
        ["ip", "route", "get", private.hosts[0].addr], capture_output=True, text=True
    )
    assert private.bridge not in route.stdout  # only the bastion's leg is on our bridge
    assert private.ssh(0, "hostname").stdout.strip() == "node0"  # ssh gets there, jumping


def test_check_learns_the_private_address_in_one_bastion_login(
    private: TestCluster, home: dict[str, str], tmp_path: Path
) -> None:
    inv = private.write_inventory(tmp_path / "inv.yaml", {"script": "examples/train.py"})
    before = private.bastion_logins()
    argv = [sys.executable, "-m", "ddptui.tui.cli", "--headless", "check", "-i", str(inv), "--json"]
    env = {**os.environ, **home}
    res = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    hosts = json.loads(res.stdout)["hosts"]
    master = private.hosts[0].addr
    for h in hosts:
        assert h["facts"]["master_addr"] == master
        assert h["facts"]["ifname"] == "eth0"  # not lo
    assert [h["facts"]["address"] for h in hosts] == [h.addr for h in private.hosts]
    assert private.bastion_logins() - before == 1  # one connection carried all three


@pytest.mark.parametrize("rdzv", ["static", "c10d"])
def test_torchrun_across_the_private_network(
    private: TestCluster, home: dict[str, str], tmp_path: Path, rdzv: str
) -> None:
    (tmp_path / "meet.py").write_text(SCRIPT)
    job = {"script": "meet.py", "nproc_per_node": 1, "master_port": 29641, "rdzv_backend": rdzv}
    inv = private.write_inventory(tmp_path / "inv.yaml", job, workdir=str(tmp_path))
    before = private.bastion_logins()
    # c10d without the checks: the addresses come from the hosts all the same.
    flags = ["--skip-checks"] if rdzv == "c10d" else []
    cli = Cli(inv, tmp_path / "run", flags=flags, env=home)
    assert cli.wait() == 0, cli.stderr
    master = private.hosts[0].addr
    for r in range(3):
        assert f"MASTER_ADDR={master} sum=3" in (cli.run_dir / f"rank-{r}.log").read_text()
    assert private.bastion_logins() - before == 1


def test_attach_and_stop_through_the_bastion(
    private: TestCluster, home: dict[str, str], tmp_path: Path
) -> None:
    job = {"script": "examples/train.py", "nproc_per_node": 1, "master_port": 29643}
    args = ["--epochs", "1000", "--step-time", "0.1"]
    inv = private.write_inventory(tmp_path / "inv.yaml", {**job, "args": args})
    cli = Cli(inv, tmp_path / "run", flags=["--detach", "--skip-checks"], env=home)
    assert cli.wait() == 0, cli.stderr
    info = json.loads((cli.run_dir / "run.json").read_text())
    assert info["master_addr"] == private.hosts[0].addr
    stop = Cmd(["stop", str(cli.run_dir)], tmp_path / "stop", env=home)
    assert stop.wait() == 0, stop.stderr


def chain_home(private: TestCluster, tmp_path: Path, known_hosts: str | None) -> dict[str, str]:
    """~/.ssh/config: node1 behind `ProxyJump bastion,node0`, and `UserKnownHostsFile none`
    for the bastion, the chain's first hop; ~/.ssh/known_hosts as given."""
    assert private.bastion is not None
    common = [  # after a block's own lines: the first value given wins
        "User root",
        f"IdentityFile {private.identity_file}",
        "IdentitiesOnly yes",
        f"UserKnownHostsFile {private.known_hosts}",
        "BatchMode yes",
    ]

    def block(host: str, *lines: str) -> str:
        return "\n    ".join([f"Host {host}", *lines, *common]) + "\n"

    ssh = tmp_path / "home" / ".ssh"
    ssh.mkdir(parents=True)
    (ssh / "config").write_text(
        block("bastion", f"HostName {private.bastion.addr}", "UserKnownHostsFile none",
              "StrictHostKeyChecking no")
        + block("node0", "HostName node0", "ProxyJump bastion")
        + block("node1", f"HostName {private.hosts[1].addr}", "ProxyJump bastion,node0")
    )  # fmt: skip
    if known_hosts is not None:
        (ssh / "known_hosts").write_text(known_hosts)
    return {**os.environ, "HOME": str(ssh.parent)}


@pytest.mark.security
@pytest.mark.parametrize("known", [False, True])
def test_every_hop_of_a_proxyjump_chain_is_verified(
    private: TestCluster, tmp_path: Path, known: bool
) -> None:
    """The chain's first hop was accepted unverified under `UserKnownHostsFile none` (asyncssh
    connected it itself): now its key is checked against ~/.ssh/known_hosts like any host's."""
    env = chain_home(private, tmp_path, private.known_hosts.read_text() if known else None)
    inv = private.write_inventory(tmp_path / "inv.yaml", {"script": "examples/train.py"}, [1])
    argv = [sys.executable, "-m", "ddptui.tui.cli", "--headless", "check", "-i", str(inv)]
    res = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, timeout=180)
    out = res.stdout + res.stderr
    if known:
        assert res.returncode == 0, out
        assert "warn node1 ssh: ssh_config sets `UserKnownHostsFile none` for bastion" in out
    else:
        assert res.returncode == 3, out
        assert "jump host bastion (ProxyJump): host key not verified" in out, out


def site_config(private: TestCluster) -> str:
    """The cluster's ProxyJump and bastion, as a site puts them in /etc/ssh/ssh_config.d/."""
    assert private.bastion is not None
    return (
        "Host node*\n    ProxyJump bastion\n"
        f"Host bastion\n    HostName {private.bastion.addr}\n    User root\n"
        f"    IdentityFile {private.identity_file}\n    IdentitiesOnly yes\n"
        f"    UserKnownHostsFile {private.known_hosts}\n    BatchMode yes\n"
    )


def launch_meet(
    private: TestCluster, tmp_path: Path, env: dict[str, str], wrap: Sequence[str] = ()
) -> str:
    """Launch the three hosts' gloo meeting (`wrap` runs the command); its run's rank-0 log.
    The inventory names no ProxyJump: ssh_config alone says the way in."""
    (tmp_path / "meet.py").write_text(SCRIPT)
    job = {"script": "meet.py", "nproc_per_node": 1, "master_port": 29645}
    inv = private.write_inventory(tmp_path / "inv.yaml", job, workdir=str(tmp_path))
    launch = ["-m", "ddptui.tui.cli", "--headless", "launch", "-i", str(inv)]
    argv = [*wrap, sys.executable, *launch, "--run-dir", str(tmp_path / "run")]
    res = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return (tmp_path / "run" / "rank-0.log").read_text()


def test_a_proxyjump_set_only_in_the_system_wide_files(
    private: TestCluster, tmp_path: Path
) -> None:
    """/etc/ssh/ssh_config.d/ (in a private mount namespace of the launcher's: the machine's
    own /etc is never touched), a HOME with no ~/.ssh/config."""
    site = tmp_path / "ssh_config.d"
    site.mkdir()
    (site / "50-cluster.conf").write_text(site_config(private))
    (tmp_path / "home").mkdir()
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    before = private.bastion_logins()
    mount = f'mount --bind {site} /etc/ssh/ssh_config.d && exec "$0" "$@"'
    log = launch_meet(private, tmp_path, env, wrap=["unshare", "-m", "sh", "-c", mount])
    assert f"MASTER_ADDR={private.hosts[0].addr} sum=3" in log
    assert private.bastion_logins() - before == 1  # the shared jump connection, as ever
    assert "50-cluster.conf" not in " ".join(os.listdir("/etc/ssh/ssh_config.d"))


def test_a_proxyjump_from_an_included_file(private: TestCluster, tmp_path: Path) -> None:
    conf = tmp_path / "home" / ".ssh" / "conf.d"
    conf.mkdir(parents=True)
    (conf / "cluster.conf").write_text(site_config(private))
    (conf.parent / "config").write_text(f"Include {conf}/*.conf\n")
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    log = launch_meet(private, tmp_path, env)
    assert f"MASTER_ADDR={private.hosts[0].addr} sum=3" in log
