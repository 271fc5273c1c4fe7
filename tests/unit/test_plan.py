"""The plan: per-node argv and environment for every launch style, node count and rendezvous."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from ddptui.remote import inventory
from ddptui.remote.checks import judge as checks
from ddptui.remote.run import plan
from ddptui.remote.run.plan import SCRATCH

RUN = "20260101-000000-abcd"


def make(job: str, hosts: int = 3, defaults: str = "") -> inventory.Inventory:
    host_lines = "".join(f"  - host: 10.0.0.{11 + i}\n" for i in range(hosts))
    text = f"defaults:\n  python: /opt/py\n{defaults}hosts:\n{host_lines}job:\n{job}"
    return inventory.parse(text, Path("inv.yaml"))


def build(inv: inventory.Inventory, nprocs: list[int] | None = None, **kw: object) -> plan.Plan:
    n = len(inv.hosts)
    addrs = [f"10.0.0.{11 + i}" for i in range(n)]
    return plan.build(inv, run_id=RUN, addrs=addrs, nprocs=nprocs or [2] * n, **kw)  # type: ignore[arg-type]


def flag(argv: tuple[str, ...], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize(("hosts", "nproc"), itertools.product([1, 2, 3, 5], [1, 2, 8]))
def test_static_torchrun_every_node(hosts: int, nproc: int) -> None:
    inv = make(f"  script: train.py\n  args: [--epochs, '3']\n  nproc_per_node: {nproc}\n", hosts)
    p = build(inv, [nproc] * hosts, extra_args=["--lr", "0.1"])
    assert p.world_size == hosts * nproc
    for k, node in enumerate(p.nodes):
        argv = node.argv
        assert argv[:3] == ("/opt/py", "-m", "torch.distributed.run")
        assert flag(argv, "--nnodes") == str(hosts)
        assert flag(argv, "--nproc-per-node") == str(nproc)
        assert flag(argv, "--node-rank") == str(k)
        assert flag(argv, "--master-addr") == "10.0.0.11"
        assert flag(argv, "--master-port") == "29500"
        assert flag(argv, "--rdzv-backend") == "static"
        assert flag(argv, "--redirects") == "3"  # each rank's own files, read by its host
        assert flag(argv, "--log-dir") == SCRATCH and "--tee" not in argv
        assert argv[-5:] == ("train.py", "--epochs", "3", "--lr", "0.1")
        assert node.ranks == tuple(range(k * nproc, (k + 1) * nproc))
        assert node.env["NODE_RANK"] == str(k)
        assert node.env["MASTER_ADDR"] == "10.0.0.11"
        assert node.env["MASTER_PORT"] == "29500"
        assert node.env["PYTHONUNBUFFERED"] == "1"
        assert node.tail_ranks  # no wrapper in the rank: its host reads its files
        assert node.route_to == "10.0.0.11"  # socket_ifname: auto by default


def test_uneven_nprocs_give_contiguous_ranks() -> None:
    p = build(make("  script: t.py\n  nproc_per_node: auto\n"), [8, 4, 1])
    assert [n.ranks for n in p.nodes] == [tuple(range(8)), tuple(range(8, 12)), (12,)]
    assert [flag(n.argv, "--nproc-per-node") for n in p.nodes] == ["8", "4", "1"]
    assert p.world_size == 13


def test_master_addr_override_and_port() -> None:
    inv = make("  script: t.py\n  master_addr: 192.168.1.5\n  master_port: 1234\n")
    for node in build(inv).nodes:
        assert flag(node.argv, "--master-addr") == "192.168.1.5"
        assert node.env["MASTER_ADDR"] == "192.168.1.5"
        assert node.env["MASTER_PORT"] == "1234"
        assert node.route_to == "192.168.1.5"


def test_c10d_rendezvous() -> None:
    inv = make("  script: t.py\n  rdzv_backend: c10d\n  max_restarts: 2\n")
    p = build(inv)
    for k, node in enumerate(p.nodes):
        argv = node.argv
        assert flag(argv, "--rdzv-backend") == "c10d"
        assert flag(argv, "--rdzv-endpoint") == "10.0.0.11:29500"
        assert flag(argv, "--rdzv-id") == RUN
        assert flag(argv, "--local-addr") == f"10.0.0.{11 + k}"
        assert flag(argv, "--max-restarts") == "2"
        assert "--node-rank" not in argv  # c10d ignores it; ranks come from the rendezvous
        assert flag(argv, "--rdzv-conf") == f"is_host={int(k == 0)}"
        assert "NODE_RANK" not in node.env  # the rendezvous orders the nodes, not the inventory
        assert node.ranks == ()


def test_legacy_launch_uses_env_and_says_it_is_deprecated() -> None:
    p = build(make("  script: t.py\n  launcher: launch\n"))
    argv = p.nodes[1].argv
    assert argv[:4] == ("/opt/py", "-m", "torch.distributed.launch", "--use-env")
    assert flag(argv, "--node-rank") == "1"
    assert any("deprecated" in n for n in p.notices)
    assert p.nodes[1].ranks == (2, 3)


def test_spawn_style_passes_node_arguments() -> None:
    job = "  script: main.py\n  args: [--epochs, '1']\n  launcher: spawn\n"
    p = build(make(job))
    for k, node in enumerate(p.nodes):
        assert node.argv == (
            "/opt/py",
            "main.py",
            "--epochs",
            "1",
            "--world_size",
            "3",
            "--rank",
            str(k),
            "--init_method",
            "tcp://10.0.0.11:29500",
        )
        assert SCRATCH not in node.argv
    assert p.world_size is None
    assert any("node" in n for n in p.notices)


def test_spawn_argument_names_are_configurable() -> None:
    job = (
        "  script: main.py\n  launcher: spawn\n"
        "  spawn_args: {world_size: --nodes, rank: --node, init_method: --dist-url}\n"
    )
    argv = build(make(job, hosts=2)).nodes[1].argv
    assert argv[2:] == ("--nodes", "2", "--node", "1", "--dist-url", "tcp://10.0.0.11:29500")


def test_env_style_for_lightning() -> None:
    inv = make("  script: fit.py\n  launcher: env\n", defaults="  env: {LOCAL_RANK: '3'}\n")
    p = build(inv, [2, 2, 2])
    for k, node in enumerate(p.nodes):
        assert node.argv == ("/opt/py", "fit.py")
        assert node.env["NODE_RANK"] == str(k)
        assert node.env["WORLD_SIZE"] == "6"
        assert node.env["MASTER_PORT"] == "29500"
        assert "LOCAL_RANK" not in node.env  # Lightning would spawn nothing
        assert node.unset == ("LOCAL_RANK",)  # not even from the host's own environment
        assert node.ranks == ()  # the Trainer's `devices` decides; learned during the run
        assert not node.tail_ranks  # its processes share one stdout: whole lines from a wrapper


def test_nccl_settings() -> None:
    job = "  script: t.py\n  nccl: {socket_ifname: eth0, ib_disable: true, debug: INFO}\n"
    env = build(make(job)).nodes[0].env
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "eth0"
    assert env["NCCL_IB_DISABLE"] == "1"
    assert env["NCCL_DEBUG"] == "INFO"
    assert build(make(job)).nodes[0].route_to is None


def test_no_interface_setting_leaves_it_to_the_host() -> None:
    node = build(make("  script: t.py\n  nccl: {socket_ifname: null}\n")).nodes[0]
    assert node.route_to is None
    assert "GLOO_SOCKET_IFNAME" not in node.env


def test_host_env_merges_over_defaults_but_not_over_rendezvous() -> None:
    text = """\
defaults:
  env: {A: "1", B: "x", NCCL_DEBUG: WARN, MASTER_ADDR: nope}
hosts:
  - host: a
    env: {B: "y"}
  - host: b
job:
  script: t.py
  nccl: {debug: INFO}
"""
    inv = inventory.parse(text, Path("i.yaml"))
    p = build(inv)
    a, b = p.nodes[0].env, p.nodes[1].env
    assert (a["A"], a["B"], b["B"]) == ("1", "y", "x")
    assert a["NCCL_DEBUG"] == "WARN"  # the user's own env wins over ddptui's defaults
    assert a["MASTER_ADDR"] == "10.0.0.11"  # but the rendezvous is ddptui's to set


def test_torchrun_logs_go_to_a_scratch_dir_the_host_makes() -> None:
    nodes = build(make("  script: t.py\n")).nodes
    assert all(flag(n.argv, "--log-dir") == SCRATCH for n in nodes)  # mkdtemp on the host


def test_paths_to_expand_on_the_host_are_python_and_script() -> None:
    for launcher in ("torchrun", "launch", "spawn", "env"):
        job = f"  script: ~/t.py\n  args: [~/x]\n  launcher: {launcher}\n"
        for node in build(make(job)).nodes:
            assert [node.argv[i] for i in node.expand] == [node.host.python, "~/t.py"]


def test_ipv6_master_is_bracketed_in_urls() -> None:
    inv = make("  script: t.py\n  launcher: spawn\n  master_addr: 'fd00::1'\n")
    assert build(inv).nodes[0].argv[-1] == "tcp://[fd00::1]:29500"


def test_master_address_must_reach_the_other_hosts() -> None:
    remote = ["10.0.0.11", "10.0.0.12"]
    assert checks.master_problem("10.0.0.11", remote) is None
    assert checks.master_problem("", ["", "10.0.0.12"]) == (
        "node 0's address is not known; set job.master_addr"
    )
    why = checks.master_problem("127.0.0.1", ["127.0.0.1", "10.0.0.12"])
    assert why is not None and why.startswith("the master address 127.0.0.1 is a loopback")
    assert checks.master_problem("::1", ["::1", "fd00::2"]) is not None
    # every node on this machine (the bundled inventory), or a single host: loopback is right
    assert checks.master_problem("127.0.0.1", ["127.0.0.1", "127.0.0.1"]) is None
    assert checks.master_problem("", [""]) is None


def test_every_attempt_has_the_same_wandb_run_and_the_inventory_env_wins() -> None:
    env = build(make("  script: t.py\n")).nodes[1].env
    assert env["WANDB_RUN_ID"] == RUN and env["WANDB_RUN_GROUP"] == RUN
    assert env["WANDB_RESUME"] == "allow"
    mine = make("  script: t.py\n", defaults="  env: {WANDB_RESUME: never, WANDB_RUN_ID: x}\n")
    assert build(mine).nodes[0].env["WANDB_RUN_ID"] == "x"
    assert build(mine).nodes[0].env["WANDB_RESUME"] == "never"
    assert plan.tracker_env("a/b:c")["WANDB_RUN_ID"] == "a-b-c"
