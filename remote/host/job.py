"""The node's job as it starts: its command line, environment and working directory.

A pure function of the node's spec (remote/host/protocol.py) and what the supervisor found on
this host, so that what a job gets is read in one place and tested without starting one; the
supervisor (remote/host/daemon.py) starts it, in a container or not.
"""

from __future__ import annotations

import os

from . import protocol

TYPE_CHECKING = False  # typing's names cost import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Callable, Mapping


def node_tags(run_id: str, node: int) -> dict[str, str]:
    """What every process of the node's job carries in its environment."""
    return {"DDPTUI_RUN_ID": run_id, "DDPTUI_NODE": str(node)}


def code_dir() -> str:
    """This host's ddptui code (the directory holding ddph/): ddptui's own workers run from it.
    Asked in the supervisor only: an agent running from memory imports this module too, and
    has no file."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def command(
    spec: protocol.Spec, attempt: int, tags: Mapping[str, str], host_env: Mapping[str, str],
    scratch: Callable[[], str], ifname: str | None = None, site: str | None = None,
    checkpoint: str | None = None,
) -> tuple[list[str], dict[str, str], str | None]:  # fmt: skip
    """The job's argv, environment and working directory for `attempt`, from the node's spec:
    the host's environment under the spec's (a container starts from its image's own), the
    run's tags, `~` and the code's directory resolved. scratch() is the attempt's directory for
    torchrun's --log-dir, made the first time it is asked (only where the spec names it).
    ifname: the interface that routes to spec.route_to; site: the whole-lines sitecustomize's
    directory (spec.line_buffer); checkpoint: job.checkpoint's newest, as DDPTUI_CHECKPOINT
    ("": none yet; None: job.checkpoint is not set)."""
    env = {} if spec["container"] else dict(host_env)
    env.update(spec["env"])
    for name in spec["unset"]:  # e.g. a LOCAL_RANK the host exports stops Lightning
        env.pop(name, None)
    if ifname:
        for name in spec["ifname_vars"]:
            if name not in spec["env"]:
                env[name] = ifname
    if site:  # spawn and Lightning: a node's processes share one stdout
        env["PYTHONPATH"] = os.pathsep.join(p for p in (site, env.get("PYTHONPATH")) if p)
    env.update(tags, DDPTUI_ATTEMPT=str(attempt))
    if checkpoint is not None:
        env["DDPTUI_CHECKPOINT"] = checkpoint
    argv = [expand(a) if i in spec["expand"] else a for i, a in enumerate(spec["argv"])]
    mark = spec["scratch_arg"]
    argv = [scratch() if a == mark else a.replace(protocol.CODE, code_dir()) for a in argv]
    for name, value in list(env.items()):  # paths in it (the flight recorder's files)
        if mark and mark in value:
            env[name] = value.replace(mark, scratch())
    cwd = expand(spec["workdir"]) if spec["workdir"] else None
    return argv, env, cwd


def expand(path: str) -> str:
    """`~` and `~user` as the host's shell would (design: paths in the inventory)."""
    return os.path.expanduser(path)
