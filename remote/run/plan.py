"""What to run on each node: argv, environment, ranks. Pure: no I/O, fully unit-tested.

Every launch style from the field is planned here (job.launcher):
  torchrun  `python -m torch.distributed.run`, static or c10d rendezvous (default)
  launch    legacy `python -m torch.distributed.launch --use-env` (deprecated upstream)
  spawn     the script mp.spawns itself and takes --world_size/--rank/--init_method
  env       plain `python script` with MASTER_ADDR/PORT, NODE_RANK, WORLD_SIZE (Lightning)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ddptui.remote.host import protocol
from ddptui.remote.inventory import Host, Inventory
from ddptui.remote.stalls import flight

# torchrun's --log-dir, and the flight recorder's files (in env values): the supervisor puts a
# fresh private directory (mkdtemp) in its place. In the torchrun styles each rank's stdout and
# stderr go to files there (--redirects 3), which the supervisor reads (remote/host/tail.py).
SCRATCH = "{ddptui-scratch}"
# The interface variables `nccl.socket_ifname` sets; gloo needs a concrete name.
IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


@dataclass(frozen=True)
class NodePlan:
    host: Host
    argv: tuple[str, ...]
    env: dict[str, str]  # exported to the job, on top of the host's own environment
    ranks: tuple[int, ...]  # global ranks on this node; () when only the run reveals them
    route_to: str | None  # set IFNAME_VARS to the interface that routes to this address
    unset: tuple[str, ...] = ()  # removed from the job's environment, even the host's own
    expand: tuple[int, ...] = ()  # argv items that are paths: `~` expanded on the host
    tail_ranks: bool = False  # torchrun writes each rank's output to files the host reads

    @property
    def node_rank(self) -> int:
        return self.host.node_rank


@dataclass(frozen=True)
class Plan:
    nodes: tuple[NodePlan, ...]
    world_size: int | None  # None when the script decides (spawn)
    master_addr: str  # where every node reaches node 0 (torch's store, ddptui's hub)
    notices: tuple[str, ...] = ()


def build(
    inv: Inventory,
    *,
    run_id: str,
    addrs: Sequence[str],
    nprocs: Sequence[int],
    extra_args: Sequence[str] = (),
    master_port: int | str | None = None,
) -> Plan:
    """addrs: each host's address as its peers reach it; nprocs: processes per host;
    master_port: the one node 0 picked (job.master_port: auto), else the job's; a word in
    place of an address or port is left for the host to fill (a Slurm job's, before its
    allocation: remote/slurm/script.py)."""
    job = inv.job
    master_addr = job.master_addr or addrs[0]
    port = master_port or job.master_port
    if port == "auto":
        raise ValueError("job.master_port is auto: the port node 0 picked is needed")
    world = sum(nprocs)
    nodes = []
    for host in inv.hosts:
        k = host.node_rank
        first = sum(nprocs[:k])
        argv = _argv(inv, k, run_id, (master_addr, port), addrs[k], nprocs[k], extra_args)
        ranks = tuple(range(first, first + nprocs[k])) if _ranks_known(inv) else ()
        # The flight recorder's pipes and traces go in the node's scratch dir (the host makes
        # it); the inventory's env may still override any of it.
        recorder = flight.env(SCRATCH, host.env) if job.nccl.flight_recorder else {}
        nodes.append(
            NodePlan(
                host=host,
                argv=argv,
                env={**recorder, **_env(inv, host, (master_addr, port), world, run_id)},
                ranks=ranks,
                route_to=master_addr if job.nccl.socket_ifname == "auto" else None,
                expand=(0, argv.index(job.script, 1)),
                # Lightning spawns nothing when LOCAL_RANK is set.
                unset=("LOCAL_RANK",) if job.launcher == "env" else (),
                tail_ranks=job.launcher in ("torchrun", "launch"),
            )
        )
    notices = []
    if job.launcher == "launch":
        notices.append(
            "torch.distributed.launch is deprecated upstream; "
            "launcher: torchrun starts the same job"
        )
    if job.launcher in ("spawn", "env"):
        notices.append(
            f"launcher {job.launcher}: the script starts its own processes; a line is tagged "
            "with its rank once its process has joined the process group (before, with its "
            "node), and each node's ranks are shown once its processes have started"
            + (" (taken to be node rank * processes + index)" if job.launcher == "spawn" else "")
        )
    return Plan(
        nodes=tuple(nodes),
        world_size=None if job.launcher == "spawn" else world,
        master_addr=master_addr,
        notices=tuple(notices),
    )


def _ranks_known(inv: Inventory) -> bool:
    """c10d assigns ranks in the order of the nodes' addresses at rendezvous; spawn scripts
    and Lightning (its Trainer's `devices`) decide their own. The supervisor learns those."""
    job = inv.job
    if job.launcher == "torchrun":
        return job.rdzv_backend == "static"
    return job.launcher == "launch"


def _argv(
    inv: Inventory,
    k: int,
    run_id: str,
    rendezvous: tuple[str, int | str],
    local_addr: str,
    nproc: int,
    extra: Sequence[str],
) -> tuple[str, ...]:
    job, host = inv.job, inv.hosts[k]
    master, port = rendezvous
    script = (job.script, *job.args, *extra)
    nnodes = str(len(inv.hosts))
    if job.launcher == "spawn":
        names = job.spawn_args
        return (
            host.job_python,
            *script,
            names.world_size,
            nnodes,
            names.rank,
            str(k),
            names.init_method,
            f"tcp://{_url_host(master)}:{port}",
        )
    if job.launcher == "env":
        return (host.job_python, *script)
    # torchrun and the legacy launcher take the same node arguments.
    module = (
        ["torch.distributed.run"]
        if job.launcher == "torchrun"
        else ["torch.distributed.launch", "--use-env"]
    )
    common = [
        "--nnodes",
        nnodes,
        "--nproc-per-node",
        str(nproc),
        "--max-restarts",
        str(job.max_restarts),
        "--redirects",
        "3",
        "--log-dir",
        SCRATCH,
    ]
    if job.launcher == "torchrun" and job.rdzv_backend == "c10d":
        rdzv = [
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            f"{_url_host(master)}:{port}",
            "--rdzv-id",
            run_id,
            "--local-addr",
            local_addr,
        ]
        # Say who hosts the store: without is_host, torch resolves this host's own name to
        # decide, which raises where hostnames do not resolve.
        rdzv += ["--rdzv-conf", f"is_host={int(k == 0)}"]
    else:
        rdzv = [
            "--rdzv-backend",
            "static",
            "--node-rank",
            str(k),
            "--master-addr",
            master,
            "--master-port",
            str(port),
        ]
    return (host.job_python, "-m", *module, *common, *rdzv, *script)


def tracker_env(run_id: str) -> dict[str, str]:
    """Every attempt of a run goes on in the same W&B run (W&B's "resume a run"): its id from
    the run's (W&B refuses / \\ # ? % : in one), resumed if it exists, grouped by run."""
    wandb_id = re.sub(r"[/\\#?%:]", "-", run_id)[:64]
    return {"WANDB_RUN_ID": wandb_id, "WANDB_RESUME": "allow", "WANDB_RUN_GROUP": run_id}


def _env(
    inv: Inventory, host: Host, rendezvous: tuple[str, int | str], world: int, run_id: str
) -> dict[str, str]:
    job = inv.job
    master, port = rendezvous
    env = {"PYTHONUNBUFFERED": "1", **tracker_env(run_id)}
    nccl = job.nccl
    if nccl.socket_ifname and nccl.socket_ifname != "auto":
        env.update(dict.fromkeys(IFNAME_VARS, nccl.socket_ifname))
    if nccl.ib_disable:
        env["NCCL_IB_DISABLE"] = "1"
    if nccl.debug:
        env["NCCL_DEBUG"] = nccl.debug
    env.update(host.env)  # the user's word wins over our defaults...
    env.update(
        {  # ...but not over what makes the nodes find each other
            "MASTER_ADDR": master,
            "MASTER_PORT": str(port),
            "NODE_RANK": str(host.node_rank),
        }
    )
    if job.launcher == "torchrun" and job.rdzv_backend == "c10d":
        del env["NODE_RANK"]  # the rendezvous orders the nodes, not the inventory
    if job.launcher in ("spawn", "env"):
        env["DDPTUI_RANK_TAGS"] = "1"  # remote/host/linebuf.py: `[rank]:` once in the group
    if job.launcher == "env":
        env["WORLD_SIZE"] = str(world)
        env.pop("LOCAL_RANK", None)  # Lightning spawns nothing when LOCAL_RANK is set
    return env


def _url_host(addr: str) -> str:
    return f"[{addr}]" if ":" in addr else addr


def node_spec(
    inv: Inventory,
    run_id: str,
    node: NodePlan,
    master_addr: str,
    *,
    env: dict[str, str],
    workdir: str | None,
    secret: str,
    attempt: int = 0,
    lease: dict[str, Any] | None = None,
) -> protocol.Spec:
    """What node's supervisor is handed (remote/host/protocol.py's spec): its plan, and the
    job's keys its host acts on. A launch's (Launch.spec) and a Slurm job's alike."""
    job = inv.job
    notify = job.notify.model_dump() if job.notify else None
    given: protocol.Spec = {
            "run_id": run_id,
            "node": node.node_rank,
            "names": [h.name for h in inv.hosts],
            "argv": list(node.argv),
            "expand": list(node.expand),
            "scratch_arg": SCRATCH,
            "env": env,
            "workdir": workdir,
            "route_to": node.route_to,
            "ifname_vars": list(IFNAME_VARS),
            "master_addr": master_addr,
            "grace": job.stop_grace,
            "unset": list(node.unset),
            "ranks": list(node.ranks),
            "learn_ranks": not node.ranks,  # c10d, spawn, env: only the run reveals them
            "tail_ranks": node.tail_ranks,
            "line_buffer": not node.tail_ranks,
            "container": node.host.container.spec() if node.host.container else None,
            "link_timeout": job.link_timeout,
            "spool_max": int(job.spool_max_mb * (1 << 20)),
            "secret": secret,
            "attempt": attempt,
            "restarts": job.restarts,
            "restart_delay": job.restart_delay,
            "spares": len(inv.usable_spares),
            "standbys": [h.name for h in inv.usable_spares] if node.node_rank == 0 else [],
            "restart_on": job.restart_on,
            "notify": notify,
            "progress": job.progress,
            "hang_after": job.hang_after,
            "on_hang": job.on_hang,
            "on_straggler": job.on_straggler,
            "checkpoint": job.checkpoint,
            "lease": lease,  # its GPUs' (remote/host/lease.py); a Slurm job's are Slurm's
        }  # fmt: skip
    return protocol.spec(given)
