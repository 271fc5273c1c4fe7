"""A run's sbatch script: `#SBATCH` lines from the inventory's `slurm:`, and a body that starts
ddptui's supervisor on every node (remote/host/slurmjob.py) with the host code carried in the
script itself: nothing is installed on the cluster. Pure.

The nodes' specs are planned here as for SSH hosts (remote/run/plan.py: build, node_spec), with
what only the allocation knows left as words the batch host fills (node 0's address, each
node's own, the ports, the processes per node for `auto`): node k's spec is the k-th, node 0
the batch host.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import shlex
import zlib
from collections.abc import Sequence
from typing import Any

from ddptui.remote.agents import shipper
from ddptui.remote.host import slurmjob
from ddptui.remote.inventory import Inventory
from ddptui.remote.run.plan import Plan, build, node_spec
from ddptui.remote.slurm.queue import job_name

# python3 >= 3.8, on the batch host and on every node (argv: head | node). The payload is on
# stdin: base64 of zlib'd JSON, the code under the state dir as an agent's (or in memory).
BOOT = """\
import os,sys
sys.path[:]=[p for p in sys.path if p]
import base64,json,zlib
raw=sys.stdin.buffer.read()
p=json.loads(zlib.decompress(base64.b64decode(raw)))
s=p["code"]
g={}
exec(compile(s["state"],"ddph/state.py","exec"),g)
c=g["install_code"](p["hash"],s) or g["from_memory"](s)
if c:sys.path.insert(0,c)
from ddph import slurmjob
slurmjob.main(sys.argv[1],p,raw)
"""
EOF = "DDPTUI_PAYLOAD"


def options(
    inv: Inventory, name: str, exclude: Sequence[str] = (), followed: bool = False
) -> list[str]:
    """The job's sbatch options: one task per node (its supervisor), the inventory's keys, then
    its `sbatch:` list as given. followed (the job ddptui submits and follows): never requeued
    by Slurm, whose requeue would run it again unfollowed and hide its NODE_FAIL; ddptui asks
    again itself, the failed nodes excluded (remote/slurm/run.py)."""
    s = inv.slurm
    assert s is not None
    out = [f"--job-name={name}", f"--nodes={s.nodes}", "--ntasks-per-node=1"]
    for flag, value in (
        ("partition", s.partition),
        ("account", s.account),
        ("time", s.time),
        ("qos", s.qos),
        ("constraint", s.constraint),
        ("gpus-per-node", s.gpus_per_node),
    ):
        if value is not None:
            out.append(f"--{flag}={value}")
    if exclude:
        out.append("--exclude=" + ",".join(exclude))
    if followed:
        out.append("--no-requeue")
    return out + list(s.sbatch)


def header(opts: Sequence[str], lines: Sequence[str] = ()) -> str:
    head = ["#!/bin/bash", *(f"#SBATCH {o}" for o in opts), *(f"# {line}" for line in lines)]
    return "\n".join(head) + "\n"


def gpus(value: int | str | None) -> int | None:
    """slurm.gpus_per_node as a count: 8, "8" or "a100:8"."""
    if value is None:
        return None
    found = re.fullmatch(r"(?:[^:]+:)?(\d+)", str(value))
    return int(found[1]) if found else None


def world_size(inv: Inventory) -> int | None:
    """Every process of the job, where known before the allocation (not `auto` without
    gpus_per_node; not spawn's: the script decides)."""
    assert inv.slurm is not None
    job = inv.job
    nproc = gpus(inv.slurm.gpus_per_node) if job.nproc_per_node == "auto" else job.nproc_per_node
    if job.launcher == "spawn" or not isinstance(nproc, int):
        return None
    return nproc * inv.slurm.nodes


# -- what ddptui submits ---------------------------------------------------------------------


def plan(inv: Inventory, run_id: str, extra: Sequence[str] = ()) -> tuple[Plan, int | None]:
    """Every node's plan, the allocation's words in place (remote/host/slurmjob.py), and the
    processes per node: None when they wait for the allocation (`auto` without
    gpus_per_node), the ranks with them."""
    job, n = inv.job, len(inv.hosts)
    assert inv.slurm is not None
    auto = job.nproc_per_node == "auto"
    nproc = gpus(inv.slurm.gpus_per_node) if auto else job.nproc_per_node
    assert not isinstance(nproc, str)
    port = job.master_port if isinstance(job.master_port, int) else slurmjob.PORT
    planned = build(
        inv,
        run_id=run_id,
        addrs=[slurmjob.MASTER] + [slurmjob.ADDR] * (n - 1),
        nprocs=[nproc or 1] * n,
        master_port=port,
        extra_args=extra,
    )
    return (planned if nproc else _waiting(planned)), nproc


def _waiting(planned: Plan) -> Plan:
    """The plan, its processes per node a word the batch host fills."""
    nodes = []
    for node in planned.nodes:
        argv = list(node.argv)
        if "--nproc-per-node" in argv:
            argv[argv.index("--nproc-per-node") + 1] = slurmjob.NPROC
        env = dict(node.env)
        if "WORLD_SIZE" in env:
            env["WORLD_SIZE"] = slurmjob.WORLD
        nodes.append(dataclasses.replace(node, argv=tuple(argv), env=env, ranks=()))
    return dataclasses.replace(planned, nodes=tuple(nodes), world_size=None)


def payload(inv: Inventory, run_id: str, attempt: int = 0, extra: Sequence[str] = ()) -> bytes:
    """What the batch host reads on stdin: the code, every node's spec, what it must find."""
    planned, nproc = plan(inv, run_id, extra)
    job = inv.job
    specs = [
        node_spec(
            inv,
            run_id,
            node,
            slurmjob.MASTER,
            env=node.env,
            workdir=node.host.workdir,
            secret="",
            attempt=attempt,
        )
        for node in planned.nodes
    ]
    static = job.launcher == "launch" or (
        job.launcher == "torchrun" and job.rdzv_backend == "static"
    )
    data: dict[str, Any] = {
        "run_id": run_id,
        "specs": specs,
        "boot": BOOT,
        "hash": shipper.digest(),
        "code": shipper.sources(),
        "master_addr": job.master_addr,
        "master_port": job.master_port if isinstance(job.master_port, int) else None,
        "nproc": nproc,
        "auto_ranks": nproc is None and static,
    }
    # the fastest level: the submission waits for it (the script is a little longer for it)
    return base64.encodebytes(zlib.compress(json.dumps(data).encode(), 1))


def render(
    inv: Inventory,
    run_id: str,
    attempt: int = 0,
    exclude: Sequence[str] = (),
    extra: Sequence[str] = (),
) -> str:
    """The whole batch script ddptui submits for this run (attempt: where its supervisors
    start counting; exclude: nodes Slurm must not give it; extra: the script's arguments
    after its own)."""
    data = payload(inv, run_id, attempt, extra)
    python = inv.hosts[0].python
    lines = [
        f"ddptui run {run_id}: one supervisor per node, then the job on each; ddptui's "
        "host code travels below (nothing is installed)"
    ]
    run = shlex.join(["sh", "-c", shipper.WRAPPER, "ddptui", python, BOOT, "head"])
    body = f"exec {run} <<'{EOF}'\n{data.decode()}{EOF}\n"
    return header(options(inv, job_name(run_id), exclude, followed=True), lines) + body
