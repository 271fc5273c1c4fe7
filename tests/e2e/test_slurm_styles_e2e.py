"""Every launch style handed to a real Slurm (support/slurmhosts.py), behind `-m slow_slurm`
(scripts/slurm_e2e.sh): torchrun with static and c10d rendezvous, the legacy
torch.distributed.launch, an mp.spawn script and Lightning's own launcher, each on 2 Slurm nodes
with 2 processes a node (tests/data/styles_env.py: every process says its rank and world as its
process group has them, the host it runs on and its environment).

- launched by ddptui through the login node: every rank's line streamed, tagged with the Slurm
  node it ran on; the world whole; MASTER_ADDR the allocation's node 0 as the nodes reach it;
  the inventory's NCCL settings and the interface ddptui picks (NCCL_SOCKET_IFNAME,
  GLOO_SOCKET_IFNAME) in every rank's environment, srun's task variables of ddptui's own step
  not;
- exported (`ddptui export slurm`) and submitted by hand with sbatch: COMPLETED, the same world,
  ranks and environment.

The default run keeps the cheap side: tests/unit/test_slurm_styles.py renders every style.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from e2etools import Cli, Cmd
from slurmhosts import SlurmCluster
from test_slurm_more_e2e import done

pytestmark = [pytest.mark.e2e, pytest.mark.slow_slurm, pytest.mark.timeout(300)]

SCRIPT = "tests/data/styles_env.py"
STYLES: dict[str, dict[str, object]] = {
    "torchrun-static": {"nproc_per_node": 2},
    "torchrun-c10d": {"nproc_per_node": 2, "rdzv_backend": "c10d"},
    "launch": {"launcher": "launch", "nproc_per_node": 2},
    "spawn": {"launcher": "spawn"},
    "lightning": {"launcher": "env", "nproc_per_node": 2, "args": ["--lightning", "2"]},
}
SHOWN = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "NODE_RANK", "NCCL_SOCKET_IFNAME",
         "GLOO_SOCKET_IFNAME", "NCCL_DEBUG", "NCCL_IB_DISABLE", "EXTRA", "SLURM_NTASKS",
         "SLURM_PROCID")  # fmt: skip
ENV = {"EXTRA": "it's here", "DDPTUI_SHOW": ",".join(SHOWN)}
NCCL = {"debug": "WARN", "ib_disable": True}  # socket_ifname: auto (the default)
TAGGED = re.compile(r"^\[r(\d+) (\S+)\] seen (\{.*\})$")


def job(style: str) -> dict[str, object]:
    return {"script": SCRIPT, "nccl": NCCL, "start_timeout": 120, **STYLES[style]}


def assert_world(slurm: SlurmCluster, seen: dict[int, dict[str, Any]], nodes: list[str]) -> None:
    """Four processes, two on each node of the job (nodes: node 0 first), each in the whole
    group, node 0 as the nodes reach it for their master, the NCCL settings theirs."""
    addrs = {n.name: n.addr for n in slurm.nodes}
    assert sorted(seen) == [0, 1, 2, 3], seen
    assert sorted(s["host"] for s in seen.values()) == sorted(nodes * 2), seen
    for rank, s in seen.items():
        env = s["env"]
        assert (s["rank"], s["world"], s["sum"]) == (rank, 4, 6), s
        assert env["RANK"] in (None, str(rank)) and env["WORLD_SIZE"] in (None, "4"), s
        assert env["MASTER_ADDR"] == addrs[nodes[0]], s  # never loopback, never a name
        assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "eth0", s
        assert (env["NCCL_DEBUG"], env["NCCL_IB_DISABLE"]) == ("WARN", "1"), s
        assert env["EXTRA"] == "it's here", s


@pytest.mark.parametrize("style", STYLES)
def test_every_style_runs_in_a_slurm_job(slurm: SlurmCluster, tmp_path: Path, style: str) -> None:
    inv = slurm.write_inventory(tmp_path / "inv.yaml", job(style), env=ENV)
    cli = Cli(inv, tmp_path / "run")
    run = cli.run_id()
    assert cli.wait(240) == 0, cli.stderr
    summary = cli.summary()
    nodes = summary["slurm"]["nodes"]
    assert summary["status"] == "succeeded" and summary["hosts"] == nodes
    assert summary["slurm"]["state"] == "COMPLETED" and len(nodes) == 2
    seen: dict[int, dict[str, Any]] = {}
    for line in cli.stdout.splitlines():
        if found := TAGGED.match(line):
            said = json.loads(found[3])
            assert said["host"] == found[2], line  # tagged with the node it ran on
            seen[int(found[1])] = said
    assert_world(slurm, seen, nodes)
    for rank, said in seen.items():  # its own log too
        log = (cli.run_dir / f"rank-{rank}.log").read_text()
        assert "seen " + json.dumps(said, sort_keys=True) in log
        assert said["env"]["SLURM_NTASKS"] is None  # ddptui's step's, not the job's
    assert not slurm.squeue()
    assert not slurm.pids_with_env("DDPTUI_RUN_ID", run)


@pytest.mark.parametrize("style", STYLES)
def test_every_style_exported_runs_by_hand_to_completed(
    slurm: SlurmCluster, tmp_path: Path, style: str
) -> None:
    inv = slurm.write_inventory(tmp_path / "inv.yaml", job(style), env=ENV)
    export = Cmd(["export", "slurm", "-i", str(inv)], tmp_path / "export")
    assert export.wait(30) == 0, export.stderr
    script = slurm.home / f"exported-{style}.sh"
    script.write_text(export.stdout)
    job_id = slurm.ssh(f"cd {slurm.home} && sbatch --parsable {script.name}").stdout.strip()
    state = done(slurm, job_id)
    out = (slurm.home / f"slurm-{job_id}.out").read_text()
    assert state == "COMPLETED", out
    said = [json.loads(line.split("seen ", 1)[1]) for line in out.splitlines() if "seen {" in line]
    seen = {s["rank"]: s for s in said}
    assert len(said) == 4, out
    nodes = re.search(r"^nodes: (.*); node 0 at ", out, re.M)[1].split()  # type: ignore[index]
    assert_world(slurm, seen, nodes)
