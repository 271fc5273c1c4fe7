"""`ddptui export slurm`: the sbatch script of an inventory for people who submit by hand. The
job `ddptui launch` runs (world size, ranks, environment), with srun and torchrun alone: no
ddptui in it, and every line readable. Pure.

The nodes' commands are remote/slurm/script.py's plan, the allocation's words turned into shell
variables the script sets on its batch host (node 0): the nodes expanded in Python (not
`scontrol show hostnames`: a node may lack scontrol), node 0's address as the others reach it
(its route to them: its own name may resolve to loopback on the nodes), a free port for
`master_port: auto`, the processes per node for `auto`. The launcher's own parts stay out:
torchrun's output goes to the job's output file (`--tee 3` instead of ddptui's files), and no
W&B run id ties attempts together.
"""

from __future__ import annotations

import inspect
import re
import shlex
from collections.abc import Callable
from typing import Any

from ddptui.remote.host import hostlist, slurmjob
from ddptui.remote.inventory import Inventory
from ddptui.remote.run.plan import SCRATCH, NodePlan, tracker_env
from ddptui.remote.slurm import script

WORDS = {
    slurmjob.MASTER: "MASTER_ADDR",
    slurmjob.ADDR: "NODE_ADDR",
    slurmjob.PORT: "MASTER_PORT",
    slurmjob.NPROC: "NPROC",
    slurmjob.WORLD: "WORLD_SIZE",
}
ROUTE = 'ip -o route get "$MASTER_ADDR"'
LAUNCHERS_OWN = ("DDPTUI_RANK_TAGS",)  # ddptui's whole-lines wrapper's switch: not here

# On the batch host: the nodes (node 0 first), node 0's address, a port, the processes per node;
# as shell assignments. Its functions are the ones ddptui's own batch host runs.
HEAD = """
import os, re, socket, subprocess
{functions}
nodes = in_order(expand(os.environ["SLURM_JOB_NODELIST"]), me())
master = os.environ.get("MASTER_ADDR") or own_address(nodes)
if os.environ.get("MASTER_PORT"):
    port = os.environ["MASTER_PORT"]
else:
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
nproc = os.environ.get("NPROC") or gpus_here()
said = (" ".join(nodes), master, port, nproc)
print("NODES='{{}}' MASTER_ADDR={{}} MASTER_PORT={{}} NPROC={{}}".format(*said))
"""


def export(inv: Inventory) -> str:
    """The whole script."""
    assert inv.slurm is not None
    planned, nproc = script.plan(inv, "export")
    job, n = inv.job, len(planned.nodes)
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", job.script.rsplit("/", 1)[-1]) or "job"
    lines = [
        f"Written by `ddptui export slurm` from {inv.path.name}: the job `ddptui launch` runs",
        "(world size, ranks, environment), for sbatch by hand. Nothing of ddptui runs in it.",
    ]
    opts = [o for o in script.options(inv, name) if not o.startswith("--job-name=")]
    given = {
        "MASTER_ADDR": job.master_addr or "",
        "MASTER_PORT": str(job.master_port) if isinstance(job.master_port, int) else "",
        "NPROC": str(nproc or ""),
    }
    out = [script.header([f"--job-name={name}", *opts], lines)]
    out.append("set -euo pipefail\n")
    out.append("# node 0 (this batch host) first; its address as the other nodes reach it\n")
    out.append("export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in given.items()) + "\n")
    # Each program read into a variable, never a heredoc inside "$(...)": bash 5.2 loses such
    # a heredoc's end where a comment in it has a quote.
    out.append(f"read -r -d '' HEAD <<'PY' || true\n{_head()}PY\n")
    out.append(f'eval "$({_word(inv.hosts[0].python, home=True)} -c "$HEAD")"\n')
    said = "nodes: $NODES; node 0 at $MASTER_ADDR:$MASTER_PORT"
    if job.launcher == "spawn":  # the script decides its world: none is said, nor exported
        out.append("export NODES MASTER_ADDR MASTER_PORT NPROC\n")
    else:
        out.append(f"WORLD_SIZE=$((NPROC * {n}))\n")
        out.append("export NODES MASTER_ADDR MASTER_PORT NPROC WORLD_SIZE\n")
        said += "; world size $WORLD_SIZE"
    out.append(f'echo "{said}"\n')
    out.append(f"read -r -d '' NODE <<'NODE' || true\n{_nodes(inv, planned.nodes)}NODE\n")
    out.append(f"srun --nodes={n} --ntasks={n} --ntasks-per-node=1 --kill-on-bad-exit=1 ")
    out.append('bash -c "$NODE"\n')
    return "".join(out)


def _head() -> str:
    functions: list[Callable[..., Any]] = [
        hostlist._items,
        hostlist._expand_one,
        hostlist._numbers,
        hostlist.expand,
    ]
    functions += [slurmjob.me, slurmjob.in_order, slurmjob.own_address, slurmjob._addresses,
                  slurmjob._source, slurmjob._loopback, slurmjob.gpus_here]  # fmt: skip
    source = "\n".join(inspect.getsource(f) for f in functions)
    source = source.replace("raise Failed(", "raise SystemExit(")
    source = "_PART = re.compile(r'\\[([^\\]]*)\\]')\n" + source
    return HEAD.format(functions=source).lstrip("\n")


def _nodes(inv: Inventory, nodes: tuple[NodePlan, ...]) -> str:
    """Each node's command, by its place in $NODES."""
    out = [
        "set -euo pipefail\n",
        'read -r -a nodes <<< "$NODES"\n',
        'for i in "${!nodes[@]}"; do [ "${nodes[$i]}" = "$SLURMD_NODENAME" ] && k=$i; done\n',
    ]
    ifname = any(node.route_to for node in nodes)
    if ifname or any(slurmjob.ADDR in a for node in nodes for a in node.argv):
        out.append("# this node's own address: where its route to node 0 starts from\n")
        out.append(f"NODE_ADDR=$({ROUTE} | sed -n 's/.* src \\([^ ]*\\).*/\\1/p')\n")
    if ifname:  # node 0's own route is `lo`: its address's interface is the one peers reach
        out.append("# the interface with that address, for gloo and NCCL\n")
        out.append("IFNAME=$(ip -o addr show to \"$NODE_ADDR\" | awk '{print $2; exit}')\n")
    out.append("# srun's words for its one task a node, not the job's ranks (Lightning's)\n")
    out.append(f"unset {' '.join(slurmjob.TASK_VARS)}\n")
    workdir = inv.hosts[0].workdir
    if workdir:
        out.append(f"cd {_word(workdir, home=True)}\n")
    out.append('case "$k" in\n')
    for node in nodes:
        out.append(f"{node.node_rank}) {_command(node)} ;;\n")
    out.append("esac\n")
    return "".join(out)


def _command(node: NodePlan) -> str:
    ours = tracker_env("export")
    env = {k: v for k, v in node.env.items() if k not in ours and k not in LAUNCHERS_OWN}
    env = {k: v for k, v in env.items() if SCRATCH not in v}
    if node.route_to:
        for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
            env.setdefault(var, "{ifname}")
    argv = list(node.argv)
    if "--redirects" in argv:  # ddptui reads each rank's files; here the job's output has them
        at = argv.index("--redirects")
        del argv[at : at + 4]  # --redirects 3 --log-dir SCRATCH
        argv[at:at] = ["--tee", "3"]
    words = ["exec", "env", *(f"-u {name}" for name in node.unset)]
    words += [f"{k}={_word(v)}" for k, v in env.items()]
    words += [_word(a, home=i in node.expand) for i, a in enumerate(argv)]
    return " ".join(words)


def _word(text: str, home: bool = False) -> str:
    """One shell word: the allocation's words as "$VARIABLES", the rest quoted; a leading `~`
    left to the shell where the inventory allows one (paths)."""
    if home and (text == "~" or text.startswith("~/")):
        return "~" + (_word(text[1:]) if len(text) > 1 else "")
    text = text.replace("{ifname}", "\0IFNAME\0")
    for word, var in WORDS.items():
        text = text.replace(word, f"\0{var}\0")
    parts = text.split("\0")
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f'"${part}"')
        elif part:
            out.append(shlex.quote(part))
    return "".join(out) or "''"
