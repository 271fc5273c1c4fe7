"""One run: connect to every host, check them, start the supervisors, follow them to the end.

All or nothing: if any host cannot be reached, nothing starts. When one node fails, or the user
stops the run, every other node is told to stop (TERM, grace, KILL on its host). The run lives
on its hosts (remote/gang.py, remote/host/): if ddptui dies or its link drops, each supervisor
stops its node after `job.link_timeout` without a word from a launcher, unless one comes back;
a detached run needs no launcher at all.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from . import checks as checker
from . import fanout, hang, monitor, probe, runs, stacks, sync
from . import plan as planner
from .events import (
    ChecksDone,
    Event,
    Failure,
    HostChecked,
    HostState,
    Notice,
    RunFinished,
    RunStarted,
    RunStatus,
)
from .exits import EXIT_FAILED as EXIT_FAILED  # re-exported: callers take them from here
from .exits import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from .exits import EXIT_OK as EXIT_OK
from .exits import EXIT_UNREACHABLE as EXIT_UNREACHABLE
from .exits import EXIT_USAGE as EXIT_USAGE
from .failures import first
from .gang import Gang, Node
from .inventory import Host, Inventory
from .record import Recorder
from .transport import HostError, Transport, for_host

CHECKPOINT_S = 1.0  # how often the run dir notes how far its logs go (attach resumes there)

Emit = Callable[[Event], None]


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


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
        detach: bool = False,
    ) -> None:
        self.inv = inv
        self.run_id = run_id or new_run_id()
        self.run_dir = run_dir or runs.default_dir(self.run_id)
        self.extra_args = tuple(extra_args)
        self.transports = list(transports or [for_host(h) for h in inv.hosts])
        self._emit_to = emit
        self.checks = checks  # probe every host first; any failed check stops the launch
        self.detach_when_running = detach  # leave the run to itself once every node runs
        self._connect_s: dict[int, float] = {}  # node rank → seconds its login took
        self._unreachable_why: dict[int, str] = {}
        self._gpu_counts: dict[int, int] = {}  # node rank → GPUs found (`auto`, live refresh)
        self._failures: list[Failure] = []  # of logins and checks; the nodes' are the gang's
        self._unreachable = False
        self._phase: asyncio.Future[bool] | None = None  # connecting, checking: stop cancels it
        self._secret = secrets.token_hex(16)  # the supervisors' proof to each other (hub)
        self._t0 = time.monotonic()
        self.recorder: Recorder | None = None
        self.record: runs.RunRecord | None = None  # a run started earlier (attach, stop)
        self.stop_now = False
        self.leftovers: list[str] = []  # what a stop could not kill
        job = inv.job
        self.gang = Gang(self.run_id, self.transports, self.emit, job.link_timeout, job.stop_grace)
        self._hang = hang.HangWatch(job.hang_after)  # fed every event (emit)

    @classmethod
    def rejoin(cls, record: runs.RunRecord, emit: Emit, *, stop: bool = False) -> Run:
        """A run started earlier (attach, stop): every host's stream, followed from byte 0."""
        run = cls(record.inventory(), emit, run_dir=record.dir, run_id=record.run_id)
        run.record, run.stop_now = record, stop
        return run

    # -- public -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every node (TERM, grace, KILL on each host). Safe to call more than once."""
        self.gang.stop("user")
        if self._phase is not None:  # still connecting or checking: stop that at once
            self._phase.cancel()

    def detach(self) -> None:
        """Leave the run to its hosts: it goes on, and ends (and cleans up) by itself."""
        self.gang.detach()

    @property
    def stopping(self) -> bool:
        return self.gang.cause is not None

    async def execute(self) -> RunFinished:
        record = self.record
        started = record.started_at if record else None
        self.recorder = Recorder(self.run_dir, resume=record is not None, started_at=started)
        try:
            if record is not None:
                return await self._rejoin(record)
            runs.register(self.run_dir, self.run_id, self.inv, launcher=self.inv.job.launcher)
            return await self._execute()
        finally:
            if not self.gang.detached:  # after a cancel: stop what runs, read to the end
                await self.gang.hang_up()
            await asyncio.gather(*(t.close() for t in self.transports), return_exceptions=True)
            self.recorder.close()

    async def check(self, *, close: bool = True) -> ChecksDone:
        """Connect, probe every host, disconnect: the checks alone, nothing starts. close=False
        keeps the connections (the dashboard streams GPU figures over them: remote/cluster.py)."""
        try:
            return await self._check_hosts(connect=True)
        finally:
            if close:
                await asyncio.gather(*(t.close() for t in self.transports), return_exceptions=True)

    # -- the run ----------------------------------------------------------------------------

    async def _execute(self) -> RunFinished:
        inv = self.inv
        names = tuple(h.name for h in inv.hosts)
        auto = inv.job.nproc_per_node == "auto"
        # auto: known once the GPUs are counted; spawn: the script decides
        world = None if auto or inv.job.launcher == "spawn" else sum(self.nprocs())
        self.emit(RunStarted(self.run_id, str(self.run_dir), names, world, inv.job.launcher))
        if not await self._until_stopped(self._prepare()) or self.stopping:
            return self._finish()
        nprocs = self.nprocs()
        if auto:
            per_host = ", ".join(f"{n} on {h.name}" for n, h in zip(nprocs, inv.hosts, strict=True))
            self.emit(Notice("info", f"nproc_per_node auto: {per_host} (world size {sum(nprocs)})"))
        addrs = [t.address for t in self.transports]
        if why := planner.master_problem(inv.job.master_addr or addrs[0], addrs):
            self._failures.append(Failure(inv.master.name, None, None, why, seen_at=time.time()))
            self.emit(Notice("error", f"not starting: {why}"))
            return self._finish()
        plan = planner.build(
            inv, run_id=self.run_id, nprocs=nprocs, extra_args=self.extra_args, addrs=addrs
        )
        for text in plan.notices:
            self.emit(Notice("warning", text))
        self.gang.master_addr = plan.master_addr
        runs.write_info(self.run_dir, master_addr=plan.master_addr, world_size=plan.world_size)
        starts = [
            (
                Node(n.host.name, n.node_rank, n.ranks),
                {"do": "start", "spec": self._spec(n)},
            )
            for n in plan.nodes
        ]
        await self._follow(starts)
        return self._finish()

    async def _rejoin(self, record: runs.RunRecord) -> RunFinished:
        inv, info = self.inv, record.info
        names = tuple(h.name for h in inv.hosts)
        world = info.get("world_size")
        self.emit(RunStarted(self.run_id, str(self.run_dir), names, world, inv.job.launcher))
        why = "cannot reach every host: the run's part on those is not known"
        await self._until_stopped(self._connect_all(why))
        self.gang.master_addr = str(info.get("master_addr") or "")
        if self.recorder is not None:  # lines the run dir has: shown again, not stored again
            self.gang.stored = dict(self.recorder.stored)
        if self.stop_now:
            self.gang.stop("user")
        starts = [
            (Node(h.name, h.node_rank), {"do": "attach", "run_id": self.run_id, "node": k})
            for k, h in enumerate(inv.hosts)
            if k not in self._unreachable_why
        ]
        await self._follow(starts)
        if self.stop_now:  # nothing of it may be left: ask each host to sweep by its tags
            await self._sweep_all()
        return self._finish()

    async def _sweep_all(self) -> None:
        from . import control

        async def one(t: Transport) -> list[str]:
            try:
                left = await control.sweep(
                    t, self.run_id, t.host.node_rank, self.inv.job.stop_grace
                )
            except HostError as exc:
                return [f"{t.host.name}: {exc.reason}"]
            return [f"{t.host.name}: {text}" for text in left]

        reached = [t for t in self.transports if t.host.node_rank not in self._unreachable_why]
        for left in await asyncio.gather(*(one(t) for t in reached)):
            self.leftovers += left

    async def _prepare(self) -> bool:
        """Connect and check (or count GPUs): True when the run may start."""
        if not await self._connect_all():
            return False
        if self.inv.job.sync is not None and not await self._sync():
            return False
        if self.checks:
            done = await self._check_hosts()
            if not done.ok:
                self._checks_failed(done)
                return False
        elif self.inv.job.nproc_per_node == "auto":
            await self._count_gpus()
        return True

    async def _sync(self) -> bool:
        """job.sync: the local code pushed to every host's workdir first (remote/sync.py)."""
        dests = [self._workdir(t.host) for t in self.transports]
        results = await sync.push(self.inv, self.transports, dests, self.emit)
        failed = [r for r in results if r.error]
        for r in failed:
            self._failures.append(Failure(r.host, None, None, r.text(), seen_at=0.0))
        if failed:
            names = ", ".join(r.host for r in failed)
            self.emit(Notice("error", f"not starting: the code could not be pushed to {names}"))
        return not failed

    async def _until_stopped(self, work: Coroutine[Any, Any, bool]) -> bool:
        """A phase that stop() cancels at once (a login may take its whole timeout): False."""
        self._phase = asyncio.ensure_future(work)
        try:
            return await self._phase
        except asyncio.CancelledError:
            if not self.stopping:  # cancelled from outside, not by our stop()
                raise
            return False
        finally:
            self._phase = None

    def nprocs(self) -> list[int]:
        """Processes per host. `auto` uses the GPUs found on the host, else `gpus:`, else 1."""
        return checker.nprocs(self.inv, self._gpu_counts)

    async def _connect(self, t: Transport) -> bool:
        h = t.host
        self.emit(HostState(h.name, h.node_rank, "connecting"))
        try:
            took = await fanout.connect(t)  # bounded, a dropped login tried again
        except HostError as exc:
            self.emit(HostState(h.name, h.node_rank, "unreachable", exc.reason))
            self._failures.append(Failure(h.name, None, None, exc.reason, seen_at=time.time()))
            self._unreachable_why[h.node_rank] = exc.reason
            return False
        self._connect_s[h.node_rank] = took
        if not self.checks:  # else the checks say it, with the host's findings
            for text in t.notices:  # e.g. an ssh config that turns host keys off
                self.emit(Notice("warning", text, h.name))
        self.emit(HostState(h.name, h.node_rank, "connected", f"{took:.2f} s"))
        return True

    async def _connect_all(self, why: str = "not starting: every host must be reachable") -> bool:
        ok = all(await asyncio.gather(*(self._connect(t) for t in self.transports)))
        self._unreachable = not ok
        if not ok:
            self.emit(Notice("error", why))
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
            if checked.gpus:  # those the job will see (CUDA_VISIBLE_DEVICES, MIG)
                self._gpu_counts[k] = checked.facts.get("visible_gpus", len(checked.gpus))
            self.emit(checked)
            return checked

        done = checker.done(await asyncio.gather(*(one(t) for t in self.transports)))
        self.emit(done)
        return done

    def _checks_failed(self, done: ChecksDone) -> None:
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

    async def _count_gpus(self) -> None:
        """`auto` without the checks: one `nvidia-smi -L` per host, nothing else."""
        counts = await asyncio.gather(*(probe.count_visible(t) for t in self.transports))
        for t, seen in zip(self.transports, counts, strict=True):
            if seen is not None:
                self._gpu_counts[t.host.node_rank] = seen.count

    async def _refresh_gpus(self) -> None:
        """Live GPU figures while the job runs: a monitor per host streams them over the open
        connection (remote/monitor.py); ends by cancel."""
        await monitor.watch(self.transports, self.emit)

    async def _guard_hangs(self) -> None:
        """A stall warns, and every rank's stack is saved in the run dir (remote/hang.py)."""
        flight = self.inv.job.nccl.flight_recorder
        capture = partial(
            stacks.capture, self.transports, self.run_id, self.run_dir, self.emit, flight=flight
        )
        await hang.guard(self._hang, self.emit, capture)

    # -- nodes ------------------------------------------------------------------------------

    async def _follow(self, starts: list[tuple[Node, dict[str, Any]]]) -> None:
        """Follow every node to its end, the leases kept and the GPU figures refreshed."""
        gang = self.gang
        helpers = [
            asyncio.ensure_future(gang.keep_leases()),
            asyncio.ensure_future(self._refresh_gpus()),
            asyncio.ensure_future(self._guard_hangs()),
            asyncio.ensure_future(self._checkpoints()),
        ]
        nodes = [asyncio.ensure_future(gang.follow(node, cmd)) for node, cmd in starts]
        if self.detach_when_running:
            helpers.append(asyncio.ensure_future(self._detach_once_running(nodes)))
        try:
            await asyncio.gather(*nodes)
            await gang.settle()
        finally:
            for task in helpers:
                task.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            self._checkpoint()

    async def _checkpoints(self) -> None:
        """Every second, note in the run dir how far each node's logs go (ends by cancel)."""
        while True:
            await asyncio.sleep(CHECKPOINT_S)
            self._checkpoint()

    def _checkpoint(self) -> None:
        if self.recorder is not None:
            self.recorder.checkpoint({k: link.offset for k, link in self.gang.links.items()})

    async def _detach_once_running(self, nodes: Sequence[asyncio.Future[None]]) -> None:
        running: asyncio.Future[Any] = asyncio.ensure_future(self.gang.running.wait())
        await asyncio.wait([running, *nodes], return_when=asyncio.FIRST_COMPLETED)
        if running.done() and not self.stopping:
            self.detach()

    def _spec(self, node: planner.NodePlan) -> dict[str, Any]:
        job = self.inv.job
        return {
            "run_id": self.run_id,
            "node": node.node_rank,
            "names": [h.name for h in self.inv.hosts],
            "argv": list(node.argv),
            "expand": list(node.expand),
            "scratch_arg": planner.SCRATCH,
            "env": node.env,
            "workdir": self._workdir(node.host),
            "route_to": node.route_to,
            "ifname_vars": list(planner.IFNAME_VARS),
            "grace": job.stop_grace,
            "unset": list(node.unset),
            "ranks": list(node.ranks),
            "learn_ranks": not node.ranks,  # c10d, spawn, env: only the run reveals them
            "link_timeout": job.link_timeout,
            "spool_max": int(job.spool_max_mb * (1 << 20)),
            "secret": self._secret,
        }

    def _workdir(self, host: Host) -> str | None:
        """A local node without workdir runs beside the inventory, where its script is."""
        if host.workdir or host.transport != "local":
            return host.workdir
        return str(self.inv.path.resolve().parent)

    def _finish(self) -> RunFinished:
        if self.record is not None and self.record.started_at:  # the run's, not this attach's
            ends = [n.at for n in self.gang.nodes.values() if n.end is not None]
            elapsed = (max(ends) if ends else time.time()) - self.record.started_at
        else:
            elapsed = time.monotonic() - self._t0
        gang = self.gang
        failures = self._failures + (gang.failures or gang.peer_failures)
        root = first(failures)
        status: RunStatus
        if gang.detached:
            status, code = "detached", EXIT_OK
        elif self._unreachable:
            status, code = "unreachable", EXIT_UNREACHABLE
        elif root is not None:
            status, code = "failed", EXIT_FAILED
        elif gang.cause == "user":
            status, code = "stopped", EXIT_INTERRUPTED
        elif gang.cause == "lease":  # no launcher was heard from: the hosts stopped the run
            status, code = "lost", EXIT_FAILED
        else:
            status, code = "succeeded", EXIT_OK
        ordered = tuple(sorted(failures, key=lambda f: f.seen_at))
        fin = RunFinished(status, code, elapsed, root, ordered)
        self.emit(fin)
        return fin

    def emit(self, event: Event) -> None:
        self._hang.feed(event)
        if self.recorder is not None:
            self.recorder(event)
        self._emit_to(event)


async def check(
    inv: Inventory, emit: Emit, transports: Sequence[Transport] | None = None
) -> ChecksDone:
    """`ddptui --headless check`: connect to every host, probe it, judge them all, disconnect."""
    return await Run(inv, emit, transports=transports).check()
