"""One run: connect to every host, start the supervisors, relay lines, stop everything cleanly.

All or nothing: if any host cannot be reached, nothing starts. When one node fails, or the user
stops the run, every other node is told to stop (TERM, grace, KILL on its host). If ddptui dies,
each supervisor sees its stdin close and stops its node by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from pathlib import Path

from . import checks as checker
from . import plan as planner
from . import probe
from .events import (
    ChecksDone,
    Event,
    Failure,
    HostChecked,
    HostState,
    LogBatch,
    NodeExited,
    NodeRanks,
    NodeStarted,
    Notice,
    RunFinished,
    RunStarted,
    RunStatus,
    Stream,
)
from .exits import EXIT_FAILED as EXIT_FAILED  # re-exported: callers take them from here
from .exits import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from .exits import EXIT_OK as EXIT_OK
from .exits import EXIT_UNREACHABLE as EXIT_UNREACHABLE
from .exits import EXIT_USAGE as EXIT_USAGE
from .failures import FailureTracker, describe_exit, first
from .inventory import Host, Inventory
from .record import Recorder, default_runs_root
from .transport import HostError, Process, Transport, for_host

SUPERVISOR = (Path(__file__).parent / "supervisor.py").read_bytes()
# Reads the supervisor's source from stdin, so nothing is installed on the host.
BOOTSTRAP = (
    "import sys;b=sys.stdin.buffer;n=int(b.readline());"
    "exec(compile(b.read(n),'ddptui-supervisor','exec'))"
)
STREAMS: dict[int, Stream] = {1: "stdout", 2: "stderr"}
# A line as torchrun tees it, `[<global rank>]:text`; \d is what int() reads.
RANK_TAG = re.compile(r"^(?:\[(\d{1,9})\]:)?(.*)\n", re.MULTILINE)

GPU_REFRESH_S = 3.0  # live GPU figures while a job runs

Emit = Callable[[Event], None]


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def default_run_dir(run_id: str) -> Path:
    return default_runs_root() / run_id


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
        checks: bool = True,
    ) -> None:
        self.inv = inv
        self.run_id = run_id or new_run_id()
        self.run_dir = run_dir or default_run_dir(self.run_id)
        self.extra_args = tuple(extra_args)
        self.transports = list(transports or [for_host(h) for h in inv.hosts])
        self._emit_to = emit
        self.checks = checks  # probe every host first; any failed check stops the launch
        self._connect_s: dict[int, float] = {}  # node rank → seconds its login took
        self._unreachable_why: dict[int, str] = {}
        self._gpu_counts: dict[int, int] = {}  # node rank → GPUs found (`auto`, live refresh)
        self._procs: dict[int, Process] = {}
        self._tracker = FailureTracker()
        self._failures: list[Failure] = []
        self._cause: str | None = None  # "user" or "failure": why the run is ending early
        self._stop_sent = 0.0  # when (time.time) the nodes were told to stop
        self._unreachable = False
        self._t0 = time.monotonic()
        self.recorder: Recorder | None = None
        self._preparing: asyncio.Future[RunFinished | None] | None = None

    # -- public -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every node (TERM, grace, KILL on each host). Safe to call more than once."""
        self._stop_all("user")
        if self._preparing is not None:  # connecting or checking: end them now (no-op after)
            self._preparing.cancel()

    async def execute(self) -> RunFinished:
        self.recorder = Recorder(self.run_dir)
        try:
            return await self._execute()
        finally:
            await self._hang_up()
            await asyncio.gather(*(t.close() for t in self.transports), return_exceptions=True)
            self.recorder.close()

    async def _hang_up(self) -> None:
        """EOF to every supervisor, and wait for their sweep. A no-op after a normal end; after
        a cancel it stops each node (local nodes would see no link drop while ddptui lives)."""
        for proc in self._procs.values():
            proc.close_stdin()
        waits = [asyncio.ensure_future(proc.wait()) for proc in self._procs.values()]
        if waits:
            await asyncio.wait(waits, timeout=self.inv.job.stop_grace + 5)

    @property
    def stopping(self) -> bool:
        return self._cause is not None

    # -- the run ----------------------------------------------------------------------------

    async def check(self) -> ChecksDone:
        """Connect, probe every host, disconnect: the checks alone, nothing starts."""
        try:
            return await self._check_hosts(connect=True)
        finally:
            await asyncio.gather(*(t.close() for t in self.transports), return_exceptions=True)

    async def _execute(self) -> RunFinished:
        inv = self.inv
        names = tuple(h.name for h in inv.hosts)
        auto = inv.job.nproc_per_node == "auto"
        # auto: known once the GPUs are counted; spawn: the script decides
        world = None if auto or inv.job.launcher == "spawn" else sum(self.nprocs())
        self.emit(RunStarted(self.run_id, str(self.run_dir), names, world, inv.job.launcher))
        # Connecting and checking may take a minute: a task of its own, which stop() cancels.
        prepare = self._preparing = asyncio.ensure_future(self._prepare())
        try:
            await asyncio.wait([prepare])
        except asyncio.CancelledError:  # the run itself was cancelled
            prepare.cancel()
            raise
        if prepare.cancelled():  # stopped: a login that failed already still says exit 3
            self._unreachable = bool(self._unreachable_why)
            return self._finish()
        if (ended := prepare.result()) is not None:
            return ended
        nprocs = self.nprocs()
        if auto:
            per_host = ", ".join(f"{n} on {h.name}" for n, h in zip(nprocs, inv.hosts, strict=True))
            self.emit(Notice("info", f"nproc_per_node auto: {per_host} (world size {sum(nprocs)})"))
        plan = planner.build(
            inv,
            run_id=self.run_id,
            nprocs=nprocs,
            extra_args=self.extra_args,
            addrs=[t.address for t in self.transports],
        )
        for text in plan.notices:
            self.emit(Notice("warning", text))
        refresh = asyncio.create_task(self._refresh_gpus())
        try:
            await asyncio.gather(*(self._node(node) for node in plan.nodes))
        finally:
            refresh.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await refresh
        return self._finish()

    async def _prepare(self) -> RunFinished | None:
        """Connect to every host and check them: how the run ended, or None to launch."""
        if not await self._connect_all() or self._cause:
            return self._finish()
        if self.checks:
            done = await self._check_hosts()
            if not done.ok:
                return self._checks_failed(done)
        elif self.inv.job.nproc_per_node == "auto":
            await self._count_gpus()
        return self._finish() if self.stopping else None  # stopped while checking

    def nprocs(self) -> list[int]:
        """Processes per host. `auto` uses the GPUs found on the host, else `gpus:`, else 1."""
        return checker.nprocs(self.inv, self._gpu_counts)

    async def _connect(self, t: Transport) -> bool:
        h = t.host
        self.emit(HostState(h.name, h.node_rank, "connecting"))
        try:
            took = await t.connect()
        except HostError as exc:
            self.emit(HostState(h.name, h.node_rank, "unreachable", exc.reason))
            self._failures.append(Failure(h.name, None, None, exc.reason, seen_at=time.time()))
            self._unreachable_why[h.node_rank] = exc.reason
            return False
        self._connect_s[h.node_rank] = took
        self.emit(HostState(h.name, h.node_rank, "connected", f"{took:.2f} s"))
        return True

    async def _connect_all(self) -> bool:
        ok = all(await asyncio.gather(*(self._connect(t) for t in self.transports)))
        self._unreachable = not ok
        if not ok:
            self.emit(Notice("error", "not starting: every host must be reachable"))
        return ok

    # -- checks before launch -----------------------------------------------------------------

    async def _check_hosts(self, connect: bool = False) -> ChecksDone:
        """Probe every host (one round trip each), then judge them together. connect: each
        host's probe follows its own login, without waiting for the slowest host's."""
        master_known = asyncio.Event()  # the master's address is where its sshd answered from
        if not connect:
            master_known.set()

        async def one(t: Transport) -> HostChecked:
            k = t.host.node_rank
            if connect:
                try:
                    await self._connect(t)
                finally:
                    if k == 0:
                        master_known.set()
            await master_known.wait()
            master_addr = self.inv.job.master_addr or self.transports[0].address
            if k in self._unreachable_why:
                checked = probe.unreachable(t.host, self._unreachable_why[k])
            else:
                checked = await probe.probe(
                    t,
                    self.inv.job,
                    master_addr,
                    workdir=self._workdir(t.host),
                    connect_s=self._connect_s.get(k),
                )
            if checked.gpus:
                self._gpu_counts[k] = len(checked.gpus)
            self.emit(checked)
            return checked

        done = checker.done(await asyncio.gather(*(one(t) for t in self.transports)))
        self.emit(done)
        return done

    def _checks_failed(self, done: ChecksDone) -> RunFinished:
        failed = [f for f in done.findings if f.level == "failure"]
        for f in failed:
            message = f"check failed ({f.check}): {f.message}"
            self._failures.append(Failure(f.host or "checks", None, None, message, seen_at=0.0))
        self.emit(
            Notice(
                "error",
                f"not starting: checks failed on {len({f.host for f in failed})} host(s) "
                "(--skip-checks launches anyway)",
            )
        )
        return self._finish()

    async def _count_gpus(self) -> None:
        """`auto` without the checks: one GPU query per host, nothing else."""
        for stats in await asyncio.gather(*(probe.gpu_stats(t) for t in self.transports)):
            if stats is not None:
                self._gpu_counts[stats.node_rank] = len(stats.gpus)

    async def _refresh_gpus(self) -> None:
        """Live GPU figures while the job runs, over the open connections; ends by cancel."""
        targets = [t for t in self.transports if self._gpu_counts.get(t.host.node_rank)]
        while targets:
            await asyncio.sleep(GPU_REFRESH_S)
            for stats in await asyncio.gather(*(probe.gpu_stats(t) for t in targets)):
                if stats is not None:
                    self.emit(stats)

    # -- nodes ----------------------------------------------------------------------------------

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
                "workdir": self._workdir(node.host),
                "route_to": node.route_to,
                "ifname_vars": list(planner.IFNAME_VARS),
                "grace": self.inv.job.stop_grace,
                "scratch": node.scratch,
                "unset": list(node.unset),
                "learn_ranks": not node.ranks,  # c10d, spawn, env: only the run reveals them
                "nnodes": len(self.inv.hosts),
            }
        ).encode()

    def _workdir(self, host: Host) -> str | None:
        """A local node without workdir runs beside the inventory, where its script is."""
        if host.workdir or host.transport != "local":
            return host.workdir
        return str(self.inv.path.resolve().parent)

    async def _relay(self, node: planner.NodePlan, proc: Process) -> _End | None:
        """Turn supervisor messages into events; returns the final message, if any came."""
        h, k = node.host, node.node_rank
        seen = 0
        while line := await proc.readline():
            seen += 1
            if seen % 64 == 0:  # readline does not suspend while data is buffered: let the
                await asyncio.sleep(0)  # dashboard and the other nodes have the loop too
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
            elif kind == "ranks":
                ranks = tuple(msg["ranks"])
                self.emit(NodeRanks(h.name, k, ranks, msg.get("world")))
                self.emit(HostState(h.name, k, "running", _ranks_text(ranks)))
            elif kind == "error":
                return _End(error=msg["msg"])
            elif kind == "exit":
                return _End(code=msg["code"], stopped=msg["stopped"])
        return None

    def _lines(self, node: planner.NodePlan, stream: Stream, data: str) -> None:
        # The supervisor sends whole lines only. No Python call per line: 1M lines must flow.
        if node.rank_tagged:
            lines = _untag(data)
        else:
            lines = tuple(zip(repeat(None), data.split("\n")[:-1]))
        if stream == "stderr":
            self._tracker.feed(node.host.name, lines)
        self.emit(LogBatch(node.host.name, node.node_rank, stream, lines))

    def _node_exited(self, node: planner.NodePlan, code: int | None, stopped: bool) -> None:
        h = node.host
        if code == 0:
            self.emit(HostState(h.name, h.node_rank, "done"))
            self.emit(NodeExited(h.name, h.node_rank, code))
        elif stopped and self._cause:
            if self._cause == "failure":  # its own tracebacks from before the stop still count
                own = self._tracker.node_failures(h.name, code)
                self._failures.extend(f for f in own if f.seen_at < self._stop_sent)
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
            self._cause, self._stop_sent = cause, time.time()
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


def _untag(data: str) -> tuple[tuple[int | None, str], ...]:
    """Each whole line of data: `[3]:hello` → (3, "hello"); torchrun's own lines carry no tag."""
    found = RANK_TAG.findall(data)  # one pass in C over the whole chunk
    ranks = {tag: int(tag) if tag else None for tag in set(map(itemgetter(0), found))}
    if len(ranks) == 1:  # the usual chunk: one rank's lines
        return tuple(zip(repeat(ranks.popitem()[1]), map(itemgetter(1), found)))
    return tuple([(ranks[tag], text) for tag, text in found])


def _ranks_text(ranks: tuple[int, ...]) -> str:
    if not ranks:
        return ""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]}"


async def check(
    inv: Inventory, emit: Emit, transports: Sequence[Transport] | None = None
) -> ChecksDone:
    """`ddptui --headless check`: connect to every host, probe it, judge them all, disconnect."""
    return await Run(inv, emit, transports=transports).check()
