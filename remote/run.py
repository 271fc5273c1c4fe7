"""One run: connect to every host, start the supervisors, relay lines, stop everything cleanly.

All or nothing: if any host cannot be reached, nothing starts. When one node fails, or the user
stops the run, every other node is told to stop (TERM, grace, KILL on its host). If ddptui dies,
each supervisor sees its stdin close and stops its node by itself.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from . import plan as planner
from .events import (
    Event,
    Failure,
    HostState,
    LogBatch,
    NodeExited,
    NodeStarted,
    Notice,
    RunFinished,
    RunStarted,
    RunStatus,
    Stream,
)
from .failures import FailureTracker, describe_exit, first
from .inventory import Inventory
from .record import Recorder
from .transport import HostError, Process, Transport, for_host

SUPERVISOR = (Path(__file__).parent / "supervisor.py").read_bytes()
# Reads the supervisor's source from stdin, so nothing is installed on the host.
BOOTSTRAP = (
    "import sys;b=sys.stdin.buffer;n=int(b.readline());"
    "exec(compile(b.read(n),'ddptui-supervisor','exec'))"
)
STREAMS: dict[int, Stream] = {1: "stdout", 2: "stderr"}

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

Emit = Callable[[Event], None]


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def default_run_dir(run_id: str) -> Path:
    return platformdirs.user_data_path("ddptui") / "runs" / run_id


class Run:
    """Drive one run; `execute()` returns the final event, `stop()` asks it to end early."""

    def __init__(
        self,
        inv: Inventory,
        emit: Emit,
        *,
        run_dir: Path | None = None,
        run_id: str | None = None,
        extra_args: Sequence[str] = (),
        transports: Sequence[Transport] | None = None,
    ) -> None:
        self.inv = inv
        self.run_id = run_id or new_run_id()
        self.run_dir = run_dir or default_run_dir(self.run_id)
        self.extra_args = tuple(extra_args)
        self.transports = list(transports or [for_host(h) for h in inv.hosts])
        self._emit_to = emit
        self._procs: dict[int, Process] = {}
        self._tracker = FailureTracker()
        self._failures: list[Failure] = []
        self._cause: str | None = None  # "user" or "failure": why the run is ending early
        self._unreachable = False
        self._t0 = time.monotonic()
        self.recorder: Recorder | None = None

    # -- public -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every node (TERM, grace, KILL on each host). Safe to call more than once."""
        self._stop_all("user")

    async def execute(self) -> RunFinished:
        self.recorder = Recorder(self.run_dir)
        try:
            return await self._execute()
        finally:
            await asyncio.gather(*(t.close() for t in self.transports), return_exceptions=True)
            self.recorder.close()

    @property
    def stopping(self) -> bool:
        return self._cause is not None

    # -- the run ----------------------------------------------------------------------------

    async def _execute(self) -> RunFinished:
        inv = self.inv
        names = tuple(h.name for h in inv.hosts)
        nprocs = self.nprocs()
        self.emit(RunStarted(self.run_id, str(self.run_dir), names, sum(nprocs), inv.job.launcher))
        if not await self._connect_all() or self._cause:
            return self._finish()
        plan = planner.build(
            inv,
            run_id=self.run_id,
            nprocs=nprocs,
            extra_args=self.extra_args,
            addrs=[t.address for t in self.transports],
        )
        for text in plan.notices:
            self.emit(Notice("warning", text))
        await asyncio.gather(*(self._node(node) for node in plan.nodes))
        return self._finish()

    def nprocs(self) -> list[int]:
        """Processes per host. `auto` uses the host's GPU count, else `gpus:`, else 1."""
        n = self.inv.job.nproc_per_node
        return [n if isinstance(n, int) else (h.gpus or 1) for h in self.inv.hosts]

    async def _connect_all(self) -> bool:
        async def connect(t: Transport) -> bool:
            h = t.host
            self.emit(HostState(h.name, h.node_rank, "connecting"))
            try:
                took = await t.connect()
            except HostError as exc:
                self.emit(HostState(h.name, h.node_rank, "unreachable", exc.reason))
                self._failures.append(Failure(h.name, None, None, exc.reason, seen_at=time.time()))
                return False
            self.emit(HostState(h.name, h.node_rank, "connected", f"{took:.2f} s"))
            return True

        ok = all(await asyncio.gather(*(connect(t) for t in self.transports)))
        self._unreachable = not ok
        if not ok:
            self.emit(Notice("error", "not starting: every host must be reachable"))
        return ok

    async def _node(self, node: planner.NodePlan) -> None:
        """Start one node's supervisor and relay what it says until it is done."""
        h, k = node.host, node.node_rank
        if self._cause:
            return
        self.emit(HostState(h.name, k, "starting"))
        transport = self.transports[k]
        try:
            proc = await transport.start([h.python, "-u", "-c", BOOTSTRAP])
        except HostError as exc:
            self._node_failed(
                node, None, [Failure(h.name, None, None, exc.reason, seen_at=time.time())]
            )
            return
        self._procs[k] = proc
        proc.write(b"%d\n" % len(SUPERVISOR) + SUPERVISOR + self._spec(node) + b"\n")
        if self.stopping:  # a stop came while this node was starting
            proc.write(b"stop\n")
        end = await self._relay(node, proc)
        code = await proc.wait()
        if end is None:  # no word from the supervisor: it never ran, or the link died
            why = proc.stderr_tail().splitlines()[-1:] or ["connection to the host lost"]
            if code == 127:
                why = [f"cannot run {h.python} on the host (python3 >= 3.8 needed)"]
            self._node_failed(
                node, code, [Failure(h.name, None, code, why[0], seen_at=time.time())]
            )
        elif end.error:
            self._node_failed(
                node, None, [Failure(h.name, None, None, end.error, seen_at=time.time())]
            )
        else:
            self._node_exited(node, end.code, end.stopped)

    def _spec(self, node: planner.NodePlan) -> bytes:
        return json.dumps(
            {
                "run_id": self.run_id,
                "node": node.node_rank,
                "argv": list(node.argv),
                "env": node.env,
                "workdir": node.host.workdir or self._local_workdir(node),
                "route_to": node.route_to,
                "ifname_vars": list(planner.IFNAME_VARS),
                "grace": self.inv.job.stop_grace,
                "scratch": node.scratch,
            }
        ).encode()

    def _local_workdir(self, node: planner.NodePlan) -> str | None:
        """A local node without workdir runs beside the inventory, where its script is."""
        if node.host.transport == "local":
            return str(self.inv.path.resolve().parent)
        return None

    async def _relay(self, node: planner.NodePlan, proc: Process) -> _End | None:
        """Turn supervisor messages into events; returns the final message, if any came."""
        h, k = node.host, node.node_rank
        while line := await proc.readline():
            msg = json.loads(line)
            kind = msg["t"]
            if kind == "out":
                self._lines(node, STREAMS[msg["s"]], msg["d"])
            elif kind == "started":
                self.emit(
                    NodeStarted(
                        h.name, k, msg["pid"], msg["hostname"], node.ranks, msg.get("ifname")
                    )
                )
                self.emit(HostState(h.name, k, "running", _ranks_text(node.ranks)))
            elif kind == "error":
                return _End(error=msg["msg"])
            elif kind == "exit":
                return _End(code=msg["code"], stopped=msg["stopped"])
        return None

    def _lines(self, node: planner.NodePlan, stream: Stream, data: str) -> None:
        texts = data.split("\n")[:-1]  # the supervisor sends whole lines only
        if node.rank_tagged:
            lines = tuple(_untag(t) for t in texts)
        else:
            lines = tuple((None, t) for t in texts)
        if stream == "stderr":
            self._tracker.feed(node.host.name, lines)
        self.emit(LogBatch(node.host.name, node.node_rank, stream, lines))

    def _node_exited(self, node: planner.NodePlan, code: int | None, stopped: bool) -> None:
        h = node.host
        if code == 0:
            self.emit(HostState(h.name, h.node_rank, "done"))
            self.emit(NodeExited(h.name, h.node_rank, code))
        elif stopped and self._cause:
            self.emit(HostState(h.name, h.node_rank, "stopped", describe_exit(code)))
            self.emit(NodeExited(h.name, h.node_rank, code, stopped=True))
        else:
            self._node_failed(node, code, self._tracker.node_failures(h.name, code))

    def _node_failed(
        self, node: planner.NodePlan, code: int | None, failures: list[Failure]
    ) -> None:
        h = node.host
        # Failures after a stop are its echo (ranks dying of TERM or of a lost peer).
        own = self._cause != "user"
        if own:
            self._failures.extend(failures)
        detail = failures[0].message if failures else describe_exit(code)
        self.emit(HostState(h.name, h.node_rank, "failed", detail))
        self.emit(NodeExited(h.name, h.node_rank, code, tuple(failures)))
        self._stop_all("failure")

    def _stop_all(self, cause: str) -> None:
        if self._cause is None:
            self._cause = cause
            if cause == "user":
                self.emit(
                    Notice(
                        "info",
                        "stopping every node (TERM, then KILL after "
                        f"{self.inv.job.stop_grace:g} s)",
                    )
                )
        for proc in self._procs.values():
            proc.write(b"stop\n")

    def _finish(self) -> RunFinished:
        elapsed = time.monotonic() - self._t0
        root = first(self._failures)
        status: RunStatus
        if self._unreachable:
            status, code = "unreachable", EXIT_UNREACHABLE
        elif root is not None:
            status, code = "failed", EXIT_FAILED
        elif self._cause == "user":
            status, code = "stopped", EXIT_INTERRUPTED
        else:
            status, code = "succeeded", EXIT_OK
        fin = RunFinished(
            status,
            code,
            elapsed,
            root,
            tuple(sorted(self._failures, key=lambda f: f.seen_at)),
        )
        self.emit(fin)
        return fin

    def emit(self, event: Event) -> None:
        if self.recorder is not None:
            self.recorder(event)
        self._emit_to(event)


@dataclass(frozen=True)
class _End:
    """How a supervisor's conversation ended: the job's exit, or why it could not start."""

    code: int | None = None
    stopped: bool = False
    error: str | None = None


def _untag(text: str) -> tuple[int | None, str]:
    """`[3]:hello` → (3, "hello"); torchrun's own lines carry no tag."""
    if text.startswith("["):
        end = text.find("]:", 1, 12)
        if end > 1 and text[1:end].isdigit():
            return int(text[1:end]), text[end + 2 :]
    return None, text


def _ranks_text(ranks: tuple[int, ...]) -> str:
    if not ranks:
        return ""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]}"
