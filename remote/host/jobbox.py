"""A node's job in its container (job.container), attempt after attempt, as its supervisor
(remote/host/daemon.py) runs it: each attempt's command through the runtime's client, the
shim written once (remote/host/shim.py), how the client ended, and the label sweep of what a
client could not remove (remote/host/container.py). A node without a container has nothing
of it. python3 >= 3.8, stdlib only.
"""

from __future__ import annotations

import contextlib
import os

from . import container, job, protocol
from .common import log
from .protocol import DAEMONS

TYPE_CHECKING = False  # typing's names cost import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Callable

    from .attempt import Attempt


class JobBox:
    """save_state: the supervisor's, where a sweep's failure is kept."""

    def __init__(self, spec: protocol.Spec, ndir: str, save_state: Callable[..., None]) -> None:
        self.spec, self.dir, self.save_state = spec, ndir, save_state
        self.box = spec["container"]  # the inventory's spec, or None
        self.node, self.host = spec["node"], spec["names"][spec["node"]]
        self.runtime: str | None = self.box["runtime"] if self.box else None
        self.unswept: Attempt | None = None  # the last attempt whose container is yet to be swept

    def command(
        self, argv: list[str], env: dict[str, str], cwd: str | None, scratch: str
    ) -> tuple[list[str], dict[str, str]]:
        """The runtime's argv and environment for the node's command: one attached container,
        its shim ending the job when the container's stdin closes (remote/host/shim.py)."""
        with contextlib.suppress(OSError):  # the last attempt's, if any
            os.unlink(os.path.join(self.dir, container.READY))
        path = os.path.join(self.dir, container.SHIM)
        if not os.path.exists(path):  # written once: every attempt's container runs it
            here = os.path.dirname(os.path.abspath(__file__))
            with open(os.path.join(here, "shim.py"), encoding="utf-8") as f:
                source = f.read()
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(source)
        code = job.code_dir()
        shared = [scratch] + ([code] if any(code in a for a in argv) else [])
        return container.command(
            self.box, argv, env, self.spec["run_id"], self.node, cwd, self.dir,
            grace=self.spec["grace"], shared=shared,
        )  # fmt: skip

    def name(self) -> str | None:
        """The container's name, for a runtime with a daemon (docker, podman)."""
        if not self.box or self.runtime not in DAEMONS:
            return None
        return container.name(self.spec["run_id"], self.node)

    def ended(self, att: Attempt) -> tuple[int | None, str | None]:
        """The job's exit code as subprocess gives it (-N: signal N), or why its container did
        not start at all (then no rank failed: the runtime's own words)."""
        code = att.code
        if not self.box or att.job is None or code is None:
            return code, None
        started = os.path.exists(os.path.join(self.dir, container.READY))
        said = att.err[-4096:].decode("utf-8", "replace")
        why = container.start_failure(self.box, code, said, started)
        if self.runtime in DAEMONS and 128 < code < 160:
            code = -(code - 128)  # docker and podman say 128+N for a signal
        return code, why

    def finished(self, att: Attempt) -> None:
        """An attempt's job ended: its container swept now, unless its client removed it itself
        (`run --rm`, the client ended on its own, unstopped): then the sweep is only the net,
        done before anything else starts here, or once the end is told."""
        self.unswept = att
        ended = not att.stopped.is_set() and att.code is not None and att.code >= 0
        if not (ended and os.path.exists(os.path.join(self.dir, container.READY))):
            self.sweep()

    def sweep(self) -> None:
        """The label sweep of the last attempt's container, for a client that could not remove
        it (killed, stopped, a runtime's failure). Its failure is in the node's state."""
        att, self.unswept = self.unswept, None
        if att is not None and self.box and self.runtime:  # a box always names its runtime
            _, why = container.sweep(self.runtime, self.spec["run_id"], self.node)
            if why:
                att.survivors.append("containers of the run: {}".format(why))
                log("{}: {}".format(self.host, att.survivors[-1]))
                self.save_state(survivors=att.survivors)
