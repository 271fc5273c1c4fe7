"""Every launch style as a Slurm job renders it, the pure parts: each node's spec once its batch
host has filled what the allocation told (remote/host/slurmjob.py's fill), and the script
`ddptui export slurm` prints. A real Slurm runs both: tests/e2e/test_slurm_styles_e2e.py."""

from __future__ import annotations

import base64
import json
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest

from ddptui.remote import inventory
from ddptui.remote.host import slurmjob
from ddptui.remote.run.plan import SCRATCH
from ddptui.remote.slurm import export, script

STYLES = {
    "torchrun-static": "nproc_per_node: 2",
    "torchrun-c10d": "nproc_per_node: 2, rdzv_backend: c10d",
    "launch": "nproc_per_node: 2, launcher: launch",
    "spawn": "launcher: spawn",
    "lightning": "nproc_per_node: 2, launcher: env",
}
MASTER = "127.0.0.1"  # node 1's own address is its route's source: 127.0.0.1 here too
FOUND = {"order": ["gpu07", "gpu03"], "master": MASTER, "port": 29500, "hub": 29612, "nproc": 2}


def parse(style: str, nccl: str = "") -> inventory.Inventory:
    text = (
        "defaults: {python: /opt/py, env: {EXTRA: x}}\n"
        "slurm: {login: hpc-login, nodes: 2}\n"
        f"job: {{script: train.py, args: [--lr, '1'], {STYLES[style]}{nccl}}}\n"
    )
    return inventory.parse(text, Path("inv.yaml"))


def filled(inv: inventory.Inventory) -> list[dict[str, Any]]:
    """Each node's spec as its supervisor gets it, on an allocation of gpu07 (the batch host)
    and gpu03."""
    data = json.loads(zlib.decompress(base64.b64decode(script.payload(inv, "r1"))))
    return [
        slurmjob.fill(spec, FOUND, "s" * 32, k, data["auto_ranks"])
        for k, spec in enumerate(data["specs"])
    ]


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize("style", STYLES)
def test_every_style_on_the_allocations_nodes(style: str) -> None:
    inv = parse(style, ", nccl: {debug: INFO, ib_disable: true}")
    for k, spec in enumerate(filled(inv)):
        argv, env = spec["argv"], spec["env"]
        words = [a for a in [*argv, *env.values()] if "{ddptui-" in a and SCRATCH not in a]
        assert not words, words  # the allocation's words filled (the scratch dir: its supervisor's)
        assert env["MASTER_ADDR"] == MASTER and env["MASTER_PORT"] == "29500"
        assert (env["NCCL_DEBUG"], env["NCCL_IB_DISABLE"], env["EXTRA"]) == ("INFO", "1", "x")
        assert spec["route_to"] == MASTER  # the interface variables: the route to node 0's
        assert set(slurmjob.TASK_VARS) <= set(spec["unset"])  # srun's, of ddptui's own step
        assert spec["names"] == ["gpu07", "gpu03"] and spec["master_addr"] == MASTER
        assert argv[0] == "/opt/py"
        if style in ("torchrun-static", "launch"):
            module = "torch.distributed.run" if style != "launch" else "torch.distributed.launch"
            assert argv[1:3] == ["-m", module]
            assert (flag(argv, "--nnodes"), flag(argv, "--nproc-per-node")) == ("2", "2")
            assert (flag(argv, "--node-rank"), flag(argv, "--master-addr")) == (str(k), MASTER)
            assert flag(argv, "--master-port") == "29500" and env["NODE_RANK"] == str(k)
            assert spec["ranks"] == [2 * k, 2 * k + 1]
        elif style == "torchrun-c10d":
            assert flag(argv, "--rdzv-endpoint") == f"{MASTER}:29500"
            assert (flag(argv, "--local-addr"), flag(argv, "--rdzv-id")) == (MASTER, "r1")
            assert flag(argv, "--rdzv-conf") == f"is_host={int(k == 0)}"
            assert "NODE_RANK" not in env and spec["ranks"] == []  # the rendezvous orders them
        elif style == "spawn":
            assert argv[1:] == ["train.py", "--lr", "1", "--world_size", "2", "--rank", str(k),
                                "--init_method", f"tcp://{MASTER}:29500"]  # fmt: skip
            assert "WORLD_SIZE" not in env and spec["ranks"] == []
        else:  # Lightning: plain python, its own launcher starts the node's processes
            assert argv[1:] == ["train.py", "--lr", "1"]
            assert (env["NODE_RANK"], env["WORLD_SIZE"]) == (str(k), "4")
            assert "LOCAL_RANK" in spec["unset"] and spec["ranks"] == []


def test_auto_takes_the_nodes_processes_once_the_allocation_says() -> None:
    text = "slurm: {login: hpc-login, nodes: 2}\njob: {script: train.py, nproc_per_node: auto}\n"
    inv = inventory.parse(text, Path("inv.yaml"))
    for k, spec in enumerate(filled(inv)):
        assert flag(spec["argv"], "--nproc-per-node") == "2"
        assert spec["ranks"] == [2 * k, 2 * k + 1]


@pytest.mark.parametrize("style", STYLES)
def test_every_style_exported(style: str) -> None:
    text = export.export(parse(style))
    assert subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True).stderr == ""
    assert "ddph" not in text and "<<'NODE' || true\n" in text and "$(cat <<" not in text
    assert 'IFNAME=$(ip -o addr show to "$NODE_ADDR"' in text  # node 0's too, never lo
    assert f"unset {' '.join(slurmjob.TASK_VARS)}\n" in text  # Lightning would take them
    node0, node1 = (line for line in text.splitlines() if line.startswith(("0) ", "1) ")))
    for k, line in enumerate((node0, node1)):
        assert 'NCCL_SOCKET_IFNAME="$IFNAME" GLOO_SOCKET_IFNAME="$IFNAME"' in line
        assert 'MASTER_ADDR="$MASTER_ADDR"' in line and "EXTRA=x" in line
        if style == "spawn":
            assert f'--rank {k} --init_method tcp://"$MASTER_ADDR":29500' in line
        if style == "torchrun-c10d":
            assert f'--local-addr "${"MASTER_ADDR" if k == 0 else "NODE_ADDR"}"' in line
        if style == "lightning":
            assert line.startswith(f"{k}) exec env -u LOCAL_RANK ") and "WORLD_SIZE=4" in line
    assert ("WORLD_SIZE=$((NPROC * 2))" in text) == (style != "spawn")  # spawn's: its script's
