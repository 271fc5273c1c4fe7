"""One run: every host's agent up and checked (remote/checks/preflight.py), the supervisors started,
every node followed to the end (remote/run/gang.py).

All or nothing: if any host cannot be reached, nothing starts. When one node fails, or the user
stops the run, every other node is told to stop (TERM, grace, KILL on its host). The run lives
on its hosts (remote/host/daemon.py): if ddptui dies or its link drops, each supervisor stops its
node after `job.link_timeout` without a word from a launcher, unless one comes back; a detached
run needs no launcher at all. With `job.restarts`, node 0's supervisor starts every node again
after a failure, attempt after attempt; a lost node's place goes to a spare host, which a
launcher must start (remote/run/recover.py). A Run borrows the dashboard's fleet when given one (no
login shell more), else opens its own and closes it at the end.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Literal

from ddptui.remote.agents import ops
from ddptui.remote.agents.fleet import Fleet, fleet_for
from ddptui.remote.agents.silence import Silence
from ddptui.remote.agents.transport import HostError, Transport
from ddptui.remote.checks.preflight import Preflight
from ddptui.remote.events import (
    Alert,
    BadHost,
    DeepChecked,
    Event,
    HangDetected,
    Notice,
    RunFinished,
    RunStarted,
    Stopping,
)
from ddptui.remote.host import protocol
from ddptui.remote.inventory import Inventory
from ddptui.remote.leases.take import Ask
from ddptui.remote.run import late, nodemsg, recover
from ddptui.remote.run.gang import Gang, Node
from ddptui.remote.run.launch import Launch
from ddptui.remote.run.progress import ProgressReader
from ddptui.remote.stalls import hang, kept, stacks
from ddptui.remote.store import runs
from ddptui.remote.store.record import Recorder
from ddptui.remote.store.runs import new_run_id

SERIES_S = 10.0  # how often series.json is written while the run goes (`ddptui plot`)
CHECKPOINT_S = 1.0  # how often the run dir notes how far its logs go (attach resumes there)

Emit = Callable[[Event], None]
# What a run does to its job when its launcher is cancelled (Ctrl-C, its dashboard gone) without
# a choice of its own: stop it (a terminal's launcher), detach it (a browser tab that launched
# it: the tab was its only launcher), or leave it exactly as it is (a viewer, a served attach).
OnCancel = Literal["stop", "detach", "leave"]
# The deep check before the start (`launch --deep`: remote/run/checkup.py's deep_first), handed
# the run's inventory, fleet, emit and runs directory: a run of its own, which refuses this one.
DeepFirst = Callable[[Inventory, Fleet, Emit, Path], Awaitable[DeepChecked]]


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
        fleet: Fleet | None = None,
        checks: bool = True,
        detach: bool = False,
        deep: DeepFirst | None = None,
        wait: float | None = None,
        ask: Ask | None = None,
    ) -> None:
        self.run_id = run_id or new_run_id()
        self.run_dir = run_dir or runs.default_dir(self.run_id)
        self.own_fleet = fleet is None
        self.fleet = fleet or fleet_for(inv, transports)
        self._emit_to = emit
        self.checks = checks  # probe every host first; any failed check stops the launch
        self.detach_when_running = detach  # leave the run to itself once every node runs
        self.preflight = Preflight(
            inv, self.fleet, self.emit, checks=checks, run_id=self.run_id, prepare=deep is None
        )
        deep_first = None
        if deep is not None:
            deep_first = partial(deep, inv, self.fleet, self.emit, self.run_dir.parent)
        self.launch = Launch(
            self.preflight, self.emit, run_id=self.run_id, run_dir=self.run_dir,
            extra_args=extra_args, secret=secrets.token_hex(16), deep=deep_first, wait=wait,
            ask=ask,
        )  # fmt: skip
        self._phase: asyncio.Future[bool] | None = None  # connecting, checking: stop cancels it
        self._t0 = time.monotonic()
        self.recorder: Recorder | None = None
        self.record: runs.RunRecord | None = None  # a run started earlier (attach, stop)
        self._fetches: set[asyncio.Future[None]] = set()  # kept hangs being copied (kept.py)
        self.stop_now = False
        self.on_cancel: OnCancel = "stop"
        self.leftovers: list[str] = []  # what a stop could not kill
        self.unswept: list[str] = []  # ... of which the nodes its sweep could not reach
        self.bad: dict[str, str] = {}  # host -> why the run's hub will not use it again
        job = inv.job
        self.progress = ProgressReader(
            job.progress if isinstance(job.progress, str) else None, self.emit
        )
        self.gang = Gang(
            self.run_id, self.fleet, self.emit, Silence(job.link_timeout), job.stop_grace,
            names=tuple(h.name for h in inv.hosts),
            progress=self.progress if job.progress is not False else None,  # false: not read
            on_replace=self._replace,
        )  # fmt: skip
        self._series_at = 0.0  # when series.json was last written
        self._hang = hang.HangWatch(job.hang_after)  # fed every event (emit)
        self.recovery = recover.Recovery(
            self.launch, self.gang, self.emit, self._new_stream, self.bad
        )

    @property
    def inv(self) -> Inventory:
        """The run's inventory (its preflight's): a spare in a lost node's place changes it."""
        return self.preflight.inv

    @classmethod
    def rejoin(
        cls, record: runs.RunRecord, emit: Emit, *, stop: bool = False, fleet: Fleet | None = None
    ) -> Run:
        """A run started earlier (attach, stop): every host's stream, followed from byte 0."""
        run = cls(record.inventory(), emit, run_dir=record.dir, run_id=record.run_id, fleet=fleet)
        run.record, run.stop_now = record, stop
        return run

    def as_viewer(self) -> None:
        """Only watch (a read-only dashboard, before execute): nothing it says or does changes
        the run, which its end, whatever it is, leaves exactly as it was: no stop, no detach,
        no lease held, no spare started, no leftover swept (remote/host/viewers.py)."""
        self.gang.viewer = True
        self.on_cancel = "leave"

    # -- public -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every node (TERM, grace, KILL on each host). Safe to call more than once."""
        self._stop_all()
        if self._phase is not None:  # still connecting or checking: stop that at once
            self._phase.cancel()

    def _stop_all(self) -> None:
        """A user's stop, said with the time the ranks have (to finish a save) before KILL."""
        if self.gang.stop("user"):
            self.gang.say_stopping(Stopping(self.inv.job.stop_grace, self.inv.job.checkpoint))

    def detach(self) -> None:
        """Leave the run to its hosts: it goes on, and ends (and cleans up) by itself. A
        viewer's leaves it as it was (attached to its owner's lease, or detached)."""
        if self.gang.viewer:
            self.gang.leave()
            return
        if self.inv.job.restarts and self.inv.usable_spares and not self.recovery.hot:
            self.emit(Notice("info", recover.DETACHED))
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
                fin = await self._rejoin(record)
            else:
                runs.register(self.run_dir, self.run_id, self.inv, launcher=self.inv.job.launcher)
                fin = await self._execute()
        finally:
            self.launch.leases.close()  # what no supervisor took over is given back
            if not self.gang.detached:  # after a cancel: as on_cancel says
                await self._cancelled()
            self._checkpoint()  # the logs as they end: a later reader appends to them
            if self.own_fleet:
                await self.fleet.close()
            self.recorder.close()
        if self.gang.retired and fin.status != "detached" and not self.gang.viewer:
            await late.at_end(self.run_dir)  # the replaced hosts' last lines: nobody may look again
        return fin

    async def _cancelled(self) -> None:
        """Ended without a word from the user (a cancel, an error): stop what runs and read to
        the end, or detach, or leave the run as it is (on_cancel)."""
        if self.on_cancel == "stop":
            await self.gang.hang_up()
        elif self.on_cancel == "detach":
            self.detach()
        else:
            self.gang.leave()

    # -- the run ----------------------------------------------------------------------------

    async def _execute(self) -> RunFinished:
        """The launch's steps in turn (remote/run/launch.py), each able to refuse it; then
        every node followed to its end."""
        inv, launch = self.inv, self.launch
        names = tuple(h.name for h in inv.hosts)
        auto = inv.job.nproc_per_node == "auto"
        # auto: known once the GPUs are counted; spawn: the script decides
        world = None if auto or inv.job.launcher == "spawn" else sum(launch.nprocs())
        self.emit(RunStarted(self.run_id, str(self.run_dir), names, world, inv.job.launcher))
        for text in runs.bad_before(inv, self.run_id):
            self.emit(Notice("warning", text))
        if not await self._until_stopped(launch.checks()) or self.stopping:
            return self._finish()
        if not await self._until_stopped(launch.deep_check()):
            return self._finish()
        nprocs = launch.ranks()
        if not await launch.port():
            return self._finish()
        if not await self._until_stopped(launch.lease(nprocs)) or self.stopping:
            return self._finish()
        planned, starts = launch.start(nprocs)
        self.recovery.standing = asyncio.ensure_future(self.recovery.stand_by())
        self.recovery.tasks.append(self.recovery.standing)
        await self._follow(partial(self.gang.start, starts, planned.master_addr))
        return self._finish()

    async def _rejoin(self, record: runs.RunRecord) -> RunFinished:
        info = record.info
        # node 0 first: its state names the hot spares that took nodes with nobody attached,
        # and the run's hosts are said with them (never the lost hosts they replaced)
        if await self._until_stopped(self.preflight.reach(0)):
            await self.recovery.learn_swaps()
        inv = self.inv
        names = tuple(h.name for h in inv.hosts)
        world = info.get("world_size")
        self.emit(RunStarted(self.run_id, str(self.run_dir), names, world, inv.job.launcher))
        why = "cannot reach every host: the run's part on those is not known"
        await self._until_stopped(self.preflight.connect(why))
        seeded = await self._seed_progress()
        if 0 not in self.preflight.unreachable:  # the hangs kept while nobody was attached
            await kept.fetch(self.fleet, self.emit, self.run_id, self.run_dir)
        self.launch.resume(info)
        stored = {}
        if (rec := self.recorder) is not None:  # lines the run dir has: shown, not stored again
            here = {k: h.since for k, h in enumerate(inv.hosts)}  # a spare's spool is another
            stored = {k: o for k, o in rec.stored.items() if rec.since.get(k, 0) == here.get(k)}
        if self.stop_now:
            self._stop_all()
        starts = [
            (
                Node(h.name, h.node_rank, since=h.since, stored=stored.get(k, 0)),
                protocol.ATTACH,
                {"run_id": self.run_id, "node": k, "since": h.since},
            )
            for k, h in enumerate(inv.hosts)
            if k not in self.preflight.unreachable
        ]
        master_addr = str(info.get("master_addr") or "")
        await self._follow(partial(self.gang.start, starts, master_addr, seeded=seeded))
        if self.stop_now:  # nothing of it may be left: ask each host to sweep by its tags
            await self._sweep_all()
        return self._finish()

    async def _seed_progress(self) -> bool:
        """An attach replays the run from its first line, faster than lines are read for
        progress (remote/host/progress.py): node 0's host's curve stands in for the replay.
        True if it does."""
        if 0 in self.preflight.unreachable or self.gang.progress is None:
            return False
        try:
            agent = await self.fleet.agent(0, self.emit)
            runs_there = await ops.status(agent, [(self.run_id, 0, 0)], series=True)
        except HostError:
            return False
        state = runs_there.get(self.run_id, {}).get(0) or {}
        series = state.get("series")
        return isinstance(series, dict) and self.progress.seed(series)

    async def _sweep_all(self) -> None:
        async def one(k: int) -> list[str]:
            name = self.inv.hosts[k].name
            try:
                return [f"{name}: {text}" for text in await self.gang.sweep(k)]
            except HostError as exc:
                self.unswept.append(f"{name}: {exc.reason}")
                return self.unswept[-1:]

        reached = [k for k in range(len(self.inv.hosts)) if k not in self.preflight.unreachable]
        for left in await asyncio.gather(*(one(k) for k in reached)):
            self.leftovers += left

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

    # -- nodes ------------------------------------------------------------------------------

    async def _follow(self, start: Callable[[], None]) -> None:
        """`start` every node (the gang's start()), then follow each to its end, the leases
        kept and the GPU figures coming."""
        gang = self.gang
        self.fleet.listen(self.emit)
        helpers = [
            asyncio.ensure_future(gang.keep_leases()),
            asyncio.ensure_future(self._guard_hangs()),
            asyncio.ensure_future(self._checkpoints()),
            asyncio.ensure_future(self.progress.run()),
        ]
        start()
        if self.detach_when_running:
            nodes = gang.tasks
            helpers.append(asyncio.ensure_future(self._detach_once_running(nodes)))
        try:
            await gang.wait()
            await gang.settle()
        finally:
            await asyncio.gather(*self._fetches, return_exceptions=True)
            self.fleet.unlisten(self.emit)
            for task in [*helpers, *self.recovery.tasks]:
                task.cancel()
            await asyncio.gather(*helpers, *self.recovery.tasks, return_exceptions=True)
            self._checkpoint()

    async def _guard_hangs(self) -> None:
        """A stall warns, and every rank's stack is saved in the run dir (remote/stalls/hang.py)."""
        await hang.guard(self._hang, self.emit, self._capture_stacks)

    async def _capture_stacks(self) -> object:
        return await stacks.capture(
            self.fleet, self.run_id, self.run_dir, self.emit,
            flight_recorder=self.inv.job.nccl.flight_recorder,
        )  # fmt: skip

    async def _checkpoints(self) -> None:
        """Every second, note in the run dir how far each node's logs go (ends by cancel)."""
        while True:
            await asyncio.sleep(CHECKPOINT_S)
            self._checkpoint()

    def _checkpoint(self) -> None:
        if self.recorder is not None:
            offsets = {k: link.offset for k, link in self.gang.links.items()}
            since = {k: node.since for k, node in self.gang.nodes.items()}
            self.recorder.checkpoint(offsets, since)
            if time.monotonic() - self._series_at > SERIES_S and self.progress.tracker.attempts:
                self._series_at = time.monotonic()
                self.recorder.write_series(self.progress.dump())

    async def _detach_once_running(self, nodes: Sequence[asyncio.Future[None]]) -> None:
        running: asyncio.Future[Any] = asyncio.ensure_future(self.gang.running.wait())
        await asyncio.wait([running, *nodes], return_when=asyncio.FIRST_COMPLETED)
        if running.done() and self.recovery.standing is not None:  # the standbys up first
            await asyncio.wait(
                [self.recovery.standing, *nodes], return_when=asyncio.FIRST_COMPLETED
            )
        if running.done() and not self.stopping:
            self.detach()

    def _replace(self, restart: nodemsg.Restart) -> None:
        """Node 0's hub waits for spares in lost nodes' places (remote/run/recover.py)."""
        self.recovery.start(restart)

    def _new_stream(self, k: int, attempt: int) -> None:
        """Node k's logs go on from a spare's stream (its spool starts anew)."""
        if self.recorder is not None:
            self.recorder.new_stream(k, attempt)

    def _finish(self) -> RunFinished:
        if self.record is not None and self.record.started_at:  # the run's, not this attach's
            ends = [n.at for n in self.gang.nodes.values() if n.end is not None]
            elapsed = (max(ends) if ends else time.time()) - self.record.started_at
        else:
            elapsed = time.monotonic() - self._t0
        (status, code, root, ordered), attempts = self.gang.attempts.outcome(
            self.preflight.failures,
            unreachable=bool(self.preflight.unreachable),
            detached=self.gang.detached,
            refused=self.launch.leases.refused,
        )
        said = self.gang.hub.run_end  # why node 0's hub restarts no more
        reason = self.gang.reason if status == "lost" else said.why if said else ""
        self.progress.tell()  # the last word before the end
        if self.recorder is not None:
            self.recorder.unread = self.gang.unread()
            if self.progress.tracker.attempts or self.progress.tracker.links:
                self.recorder.series = self.progress.dump()
        fin = RunFinished(status, code, elapsed, root, ordered, attempts, reason)
        self.emit(fin)
        return fin

    def emit(self, event: Event) -> None:
        if isinstance(event, Alert) and event.event == "hang":  # the run's watch kept it
            task = asyncio.ensure_future(
                kept.fetch(self.fleet, self.emit, self.run_id, self.run_dir)
            )
            self._fetches.add(task)
            task.add_done_callback(self._fetches.discard)
        if isinstance(event, HangDetected):  # job.notify's command runs on node 0's host
            self.gang.say(0, protocol.say(protocol.SAY_NOTIFY, "hang", hang.describe(event)))
        self._hang.feed(event)
        if isinstance(event, BadHost) and event.host not in self.bad:
            self.bad[event.host] = event.why
            if self.recorder is not None and not self.recorder.passive:  # a later launch warns
                runs.write_info(self.run_dir, bad_hosts=self.bad)
        if self.recorder is not None:
            self.recorder(event)
        self._emit_to(event)
