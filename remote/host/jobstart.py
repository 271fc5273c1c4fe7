"""A node's job, started: its command (remote/host/job.py) in a session of its own, bound to die
with its supervisor (remote/host/deathsig.py). The daemon starts each attempt's this way; a Slurm
node starts its first one before the rest of its supervisor loads (remote/host/slurmjob.py), so
that torchrun imports torch while the supervisor imports itself.
"""

from __future__ import annotations

import os
import subprocess

from . import deathsig, job, linebuf, netif, procs

TYPE_CHECKING = False  # typing costs import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Callable, Mapping

    from . import protocol


def command(
    spec: protocol.Spec, ndir: str, number: int, tags: Mapping[str, str],
    scratch: Callable[[], str], checkpoint: str | None, boxed: bool,
) -> tuple[list[str], dict[str, str], str | None, str | None]:  # fmt: skip
    """Attempt `number`'s argv, environment and directory, and the interface that routes to
    spec.route_to (boxed: a container's ranks go with it, its own sitecustomize)."""
    ifname = netif.route_ifname(spec["route_to"]) if spec["route_to"] else None
    lines = spec["line_buffer"]
    site = linebuf.site_dir(ndir, lines) if lines or not boxed else None
    argv, env, cwd = job.command(spec, number, tags, os.environ, scratch, ifname, site, checkpoint)
    env[deathsig.VAR] = str(os.getpid())  # its ranks die with their launcher
    return argv, env, cwd, ifname


def popen(
    argv: list[str], env: dict[str, str], cwd: str | None, stdin: int
) -> tuple[subprocess.Popen[bytes] | None, str | None]:
    """The job's process, or why it could not start."""
    try:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=stdin,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            preexec_fn=deathsig.preexec(procs.libc),  # it never outlives its supervisor
        )  # fmt: skip
    except OSError as exc:
        what = cwd if cwd and exc.filename == cwd else argv[0]
        return None, "cannot start {}: {}".format(what, exc.strerror)
    return proc, None


def scratch_dir(run_id: str, node: int, ndir: str) -> str:
    """A fresh private directory for torchrun's --log-dir (one per attempt)."""
    import tempfile  # here: a job started early waits for nothing it does not need

    runtime = os.environ.get("XDG_RUNTIME_DIR")
    where = runtime if runtime and os.access(runtime, os.W_OK) else ndir
    return tempfile.mkdtemp(prefix="ddptui-{}-n{}-".format(run_id, node), dir=where)


class Early:
    """A node's first attempt, started before its supervisor is up: only where its role has
    nothing to say first (no container, no checkpoint to look for). The daemon takes it on as
    that attempt's job (Daemon._start_job)."""

    def __init__(self, spec: protocol.Spec, ndir: str) -> None:
        self.number, self.scratch = spec["attempt"], None
        run_id, node = spec["run_id"], spec["node"]

        def scratch() -> str:
            if self.scratch is None:
                self.scratch = scratch_dir(run_id, node, ndir)
            return self.scratch

        tags = job.node_tags(run_id, node)
        argv, env, cwd, self.ifname = command(spec, ndir, self.number, tags, scratch, None, False)
        self.proc, self.error = popen(argv, env, cwd, subprocess.DEVNULL)

    @staticmethod
    def fits(spec: protocol.Spec) -> bool:
        return not spec["container"] and spec["checkpoint"] is None
