"""One run handed to Slurm: submitted through the login node, its queue said, then its nodes
followed as an SSH run's hosts are, and its job's end Slurm's too.

The batch script (remote/slurm/script.py) starts a supervisor on every node; once Slurm runs
the job, each node is reached through the login node (`srun --overlap`,
remote/slurm/transport.py) and its stream followed by remote/run/runner.py's rejoin: every
rank's lines, the failure named, the hangs, health and stragglers the supervisors watch.
While Slurm holds the job PENDING, its reason and expected start are said (JobState). A stop
(Ctrl-C, `s`, `ddptui stop RUN`) goes through the supervisors (TERM, job.stop_grace for the
ranks to finish a save, KILL; their last words read), then scancels the job; a detach leaves
it to Slurm at once, pending or not. A stop the login node does not answer within STOP_REACH_S
(its link gone silent, the node down) ends then, naming the job to scancel by hand: every node
and the scancel go through that node, and waiting for the lease would hold a Ctrl-C a minute.
A job that ends under the run (a node Slurm reports failed, a scancel from elsewhere) ends its
streams with Slurm's word; with job.restarts left, a run whose node failed asks Slurm again,
the failed nodes excluded, the attempts counted on.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddptui.remote.agents import ops
from ddptui.remote.agents.fleet import Fleet
from ddptui.remote.agents.transport import HostError
from ddptui.remote.events import Event, Failure, JobState, Notice, RunFinished
from ddptui.remote.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNREACHABLE
from ddptui.remote.inventory import Inventory
from ddptui.remote.slurm import queue
from ddptui.remote.slurm.login import Login, SlurmError
from ddptui.remote.slurm.transport import SrunTransport
from ddptui.remote.store import runs
from ddptui.remote.store.record import Recorder
from ddptui.remote.store.runs import new_run_id

if TYPE_CHECKING:  # the engine loads once the job is submitted (_render, _nodes)
    from ddptui.remote.run.runner import OnCancel, Run

Emit = Callable[[Event], None]
PENDING_POLL_S = 3.0  # squeue while the job waits (a site's scheduler minds more)
FIRST_POLL_S = 0.25  # for FAST_POLL_FOR_S after the submission, then doubling to
FAST_POLL_FOR_S = 5.0  # PENDING_POLL_S: a job Slurm starts at once is followed at once
# (a 3 s poll cost 1.5 s of submit-to-first-line; doubling from the start, up to 2 s)
RUNNING_POLL_S = 10.0  # while it runs: a node failure Slurm reports ends the attempt
UP_POLL_S = 0.5  # how often a node is asked whether its supervisor is up yet
FAILED_STATES = {"NODE_FAIL", "BOOT_FAIL"}  # a node's fault: a restart leaves it out
STOP_REACH_S = 5.0  # a stop's first answer from the login node: past it, the node is unreachable


class SlurmRun:
    """Drive one run through Slurm; `execute()` returns the final event, `stop()` ends it."""

    def __init__(
        self,
        inv: Inventory,
        emit: Emit,
        *,
        run_dir: Path | None = None,
        run_id: str | None = None,
        extra_args: Sequence[str] = (),
        detach: bool = False,
        record: runs.RunRecord | None = None,
        stop: bool = False,
        exclude: Sequence[str] = (),
    ) -> None:
        assert inv.login is not None and inv.slurm is not None
        self.inv, self._emit_to, self.record = inv, emit, record
        self.run_id = record.run_id if record else run_id or new_run_id()
        self.run_dir = record.dir if record else run_dir or runs.default_dir(self.run_id)
        self.extra_args = tuple(extra_args)
        self.exclude = tuple(exclude)  # nodes Slurm must not give it (--exclude)
        job = inv.job
        self.login = Login(
            inv.login, self.emit, lease=job.link_timeout, start_timeout=job.start_timeout
        )
        self.info: dict[str, Any] = dict((record.info.get("slurm") or {}) if record else {})
        self.detach_now = detach
        self.stopping = stop
        self.on_cancel: OnCancel = "stop"  # its end without a word (the dashboard's crash)
        self.viewer = False  # only watching: no stop, no scancel, whatever happens
        self.run: Run | None = None  # the nodes followed, once Slurm runs the job
        self.fleet: Fleet | None = None
        self.recorder: Recorder | None = None
        self.job: queue.Job | None = None  # Slurm's last word on it
        self._wake = asyncio.Event()  # a stop or detach while the job waits
        self._unreached = asyncio.Event()  # a stop found the login node unreachable
        self._reach: asyncio.Future[None] | None = None  # that stop's first word to it
        self._t0 = time.monotonic()

    @property
    def leftovers(self) -> list[str]:
        """What a stop could not kill (its nodes'). A node its sweep could not reach once Slurm
        has ended the job is none: the sweep is a second look after each supervisor's own, and
        the job's end (its supervisors over, so its batch script) ends its steps, the `srun
        --overlap` that sweep went through first, with what ran in them."""
        if self.run is None:
            return []
        if self.job is not None and self.job.ended:
            return [text for text in self.run.leftovers if text not in self.run.unswept]
        return self.run.leftovers

    @property
    def job_id(self) -> str:
        return str(self.info.get("job") or "")

    def stop(self) -> None:
        self.stopping = True
        if self._reach is None and self.job_id and not self.viewer:
            self._reach = asyncio.ensure_future(self._reach_login())
        if self.run is not None:
            self.run.stop()
        self._wake.set()

    async def _reach_login(self) -> None:
        """The login node asked once, bounded, as a stop begins: unanswered, the stop ends
        then (execute), not after the lease over a dead link."""

        async def answered() -> None:
            await ops.status(await self.login.agent(), [])  # its agent's own answer, no Slurm

        try:
            await asyncio.wait_for(answered(), STOP_REACH_S)
        except (TimeoutError, HostError):
            self._unreached.set()

    def detach(self) -> None:
        self.detach_now = True
        if self.run is not None:
            self.run.detach()
        self._wake.set()

    def as_viewer(self) -> None:
        """Only watch (a read-only dashboard, before execute): its end leaves the job and its
        nodes exactly as they were."""
        self.viewer = True
        self.on_cancel = "leave"

    def emit(self, event: Event) -> None:
        if self.recorder is not None:
            self.recorder(event)
        self._emit_to(event)

    # -- the run ----------------------------------------------------------------------------

    async def execute(self) -> RunFinished:
        started = self.record.started_at if self.record else None
        self.recorder = Recorder(self.run_dir, resume=self.record is not None, started_at=started)
        try:
            return await self._unless_unreached(asyncio.ensure_future(self._execute()))
        except asyncio.CancelledError:
            if self.run is None and self.on_cancel == "stop":  # still queued: not left to Slurm
                with contextlib.suppress(HostError):
                    await self._cancel()
            raise
        finally:
            if self.recorder is not None:
                self.recorder.close()
                self.recorder = None
            if self._reach is not None:
                self._reach.cancel()
            if self.fleet is not None:
                await self.fleet.close()
            await self.login.close()

    async def _unless_unreached(self, work: asyncio.Future[RunFinished]) -> RunFinished:
        """The run's end; or, once a stop found the login node unreachable, the stop's: the
        nodes left as they are (their supervisors end their part once no launcher is heard
        from) and the job to be scancelled by hand."""
        given_up: asyncio.Future[Any] = asyncio.ensure_future(self._unreached.wait())
        try:
            await asyncio.wait([work, given_up], return_when=asyncio.FIRST_COMPLETED)
        finally:
            given_up.cancel()
            if self._unreached.is_set() and self.run is not None:
                self.run.on_cancel = "leave"  # nothing to stop over a dead link
            work.cancel()
            await asyncio.gather(work, given_up, return_exceptions=True)
            if self._unreached.is_set():  # once the nodes were left: their streams' ends
                self.login.drop()  # are not news; no goodbye over a dead link
        if not work.cancelled():
            return work.result()
        job = self.job_id
        self.emit(
            Notice(
                "error",
                f"could not reach the login node {self.login.name} to cancel job {job} "
                f"(no answer in {STOP_REACH_S:g} s): run `scancel {job}` there once it "
                "answers",
            )
        )
        if self.recorder is None:  # the nodes' run had it: the stop's end is recorded too
            started = runs.read(self.run_dir).started_at
            self.recorder = Recorder(self.run_dir, resume=True, started_at=started)
        fin = self._finish("stopped", EXIT_INTERRUPTED)
        runs.add_to_summary(self.run_dir, run_id=self.run_id, hosts=self.info.get("nodes", []))
        return fin

    async def _execute(self) -> RunFinished:
        if self.record is None:
            runs.register(
                self.run_dir,
                self.run_id,
                self.inv,
                launcher=self.inv.job.launcher,
                slurm={"login": self.login.name},
            )
            try:
                await self._submit(0, self.exclude)
            except HostError as exc:
                return self._refused(exc)
        while True:
            fin = await self._follow()
            if fin is not None:
                return fin
            # a node failed and restarts are left: the job again, without it

    async def _submit(self, attempt: int, exclude: Sequence[str] = ()) -> None:
        """The batch script, rendered while the login is made, then tested by Slurm and
        submitted in one round trip (a request it can never satisfy is refused in its words
        before anything is queued). Raises HostError."""
        login = asyncio.ensure_future(self.login.agent())
        try:
            text, world = await asyncio.to_thread(
                _render, self.inv, self.run_id, attempt, exclude, self.extra_args
            )
        except BaseException:
            login.cancel()
            await asyncio.gather(login, return_exceptions=True)
            raise
        await login
        job_id, estimate = await self.login.submit(text, self.run_id)
        jobs = [*self.info.get("jobs", ()), job_id]
        self.info.update(job=job_id, jobs=jobs, since=attempt, nodes=[], exclude=list(exclude))
        runs.write_info(self.run_dir, slurm=self.info, world_size=world)
        self.emit(
            JobState(
                job_id,
                "SUBMITTED",
                f"submitted to Slurm as job {job_id} through {self.login.name} ({estimate})",
            )
        )
        import ddptui.remote.run.runner  # noqa: F401 (the engine that follows the nodes loads
        # now, while Slurm schedules the job, not once it runs beside the job's own start)

    def _refused(self, exc: HostError) -> RunFinished:
        unreachable = not isinstance(exc, SlurmError) and self.login.fleet.ready(0) is None
        self.emit(Notice("error", f"{exc.host}: {exc.reason}"))
        status = "unreachable" if unreachable else "failed"
        failure = Failure(exc.host, None, None, exc.reason, seen_at=time.time())
        return self._finish(status, EXIT_UNREACHABLE if unreachable else EXIT_FAILED, failure)

    async def _follow(self) -> RunFinished | None:
        """The job from where it is to its end: None when it is to be submitted again."""
        try:
            job = await self._until_running()
        except HostError as exc:
            return self._refused(exc)
        if self.detach_now and job is not None and not job.ended and self.run is None:
            self.emit(Notice("info", f"detached: Slurm holds job {self.job_id}"))
            return self._finish("detached", EXIT_OK)
        try:
            if job is not None and job.running:
                fin = await self._nodes(job, live=True)
            elif await self._ran():  # over already: what its supervisors kept
                fin = await self._nodes(job, live=False)
            else:
                return await self._ended_unrun(job)
            return await self._after(fin) if self.run is not None else fin
        except HostError as exc:  # the login node lost, or asking Slurm again failed
            return self._refused(exc)

    async def _ran(self) -> bool:
        """Whether its supervisors started: node 0's directory, as the login node sees it (a
        cluster's shared home; elsewhere a job over is Slurm's word alone)."""
        since = int(self.info.get("since") or 0)
        with contextlib.suppress(HostError):
            found = await ops.status(await self.login.agent(), [(self.run_id, 0, since)])
            return bool((found.get(self.run_id) or {}).get(0))
        return False

    async def _until_running(self) -> queue.Job | None:
        """Slurm's word once the job runs or has ended (None: Slurm no longer knows it, or it
        is another's job now); its queue said meanwhile. A stop cancels it here."""
        said, wait, fast_until = "", FIRST_POLL_S, time.monotonic() + FAST_POLL_FOR_S
        while True:
            job = await self._ask()
            if job is None or job.running or job.ended:
                return job
            if self.stopping:
                await self._cancel()
                return await self._ask()
            if self.detach_now:
                return job
            text = (
                queue.pending_text(job) if job.state == "PENDING" else f"job {job.id} {job.state}"
            )
            if text != said:
                said = text
                self.emit(JobState(job.id, job.state, text, job.reason, job.start))
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)
            if time.monotonic() > fast_until:
                wait = min(wait * 2, PENDING_POLL_S)

    async def _ask(self) -> queue.Job | None:
        job = await self.login.job(self.job_id)
        if job is not None and not job.mine(queue.job_name(self.run_id)):
            self.emit(
                Notice(
                    "warning",
                    f"Slurm's job {job.id} is {job.name!r} now, not this "
                    "run's (its controller lost its state and counted ids again)",
                )
            )
            job = None
        self.job = job or self.job
        return job

    async def _cancel(self) -> None:
        """scancel, never of another's job that got the run's id (nor by a viewer), nor of a
        job over already (its supervisors ended it, stopped): nothing there to warn of."""
        job = None if self.viewer else await self._ask()
        if job is None or job.ended:
            return
        why = await self.login.cancel(self.job_id, queue.job_name(self.run_id))
        if why and not _over(await self._ask()):  # it ended meanwhile: Slurm's word, not ours
            self.emit(Notice("warning", f"scancel {self.job_id}: {why}"))

    async def _ended_unrun(self, job: queue.Job | None) -> RunFinished:
        """The job ended before any node ran (cancelled while pending), or its supervisors
        never came up: Slurm's word, and its output file's last lines."""
        if self.stopping:
            self.emit(JobState(self.job_id, "CANCELLED", f"job {self.job_id} cancelled (scancel)"))
            return self._finish("stopped", EXIT_INTERRUPTED)
        text = queue.ended_text(job) if job else f"job {self.job_id}: Slurm no longer knows it"
        self.emit(
            JobState(self.job_id, job.state if job else "UNKNOWN", text, job.reason if job else "")
        )
        said = await self._output()
        failure = Failure(
            self.login.name,
            None,
            None,
            text + (f": {said[-1]}" if said else ""),
            seen_at=time.time(),
            traceback=tuple(said),
        )
        return self._finish("failed", EXIT_FAILED, failure)

    async def _output(self) -> list[str]:
        with contextlib.suppress(HostError):
            text = await self.login.output(self.run_id, self.job_id)
            return [line for line in text.splitlines() if line.strip()][-10:]
        return []

    # -- the nodes --------------------------------------------------------------------------

    async def _nodes(self, job: queue.Job | None, live: bool) -> RunFinished:
        """Follow every node's supervisor (runner.py's rejoin), Slurm's state watched; not
        live (the job is over): their spools, read on the login node."""
        nodes = list(job.nodes if job and job.nodes else self.info.get("nodes") or ())
        if nodes:
            self.info["nodes"] = nodes
            runs.write_info(self.run_dir, hosts=nodes, slurm=self.info)
        if live and job is not None:
            text = f"job {job.id} running on {','.join(nodes)}"
            self.emit(JobState(job.id, job.state, text, start=job.start, nodes=tuple(nodes)))
        record = runs.read(self.run_dir)
        inv = record.inventory()
        via = self.job_id if live else None
        self.fleet = Fleet(
            inv.hosts,
            lease=inv.job.link_timeout,
            start_timeout=inv.job.start_timeout,
            transports=[SrunTransport(h, self.login, via) for h in inv.hosts],
        )
        if live and not await self._supervisors_up(inv):
            await self.fleet.close()
            if await self._ran():
                return await self._nodes(await self._ask(), live=False)
            return await self._ended_unrun(await self._ask())
        from ddptui.remote.run.runner import Run

        assert self.recorder is not None
        self.recorder.close()  # the run's own recorder takes the directory on
        self.recorder = None
        self.run = Run.rejoin(record, self._emit_to, stop=self.stopping, fleet=self.fleet)
        self.run.on_cancel = self.on_cancel
        if self.viewer:
            self.run.as_viewer()
        if self.detach_now:
            self.run.detach_when_running = True
        watch = asyncio.ensure_future(self._watch_job() if live else asyncio.sleep(0))
        try:
            return await self.run.execute()
        finally:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)

    async def _supervisors_up(self, inv: Inventory) -> bool:
        """Until every node's supervisor answers (Slurm says RUNNING before its step has
        started them); False if the job ended first, or they took longer than start_timeout.
        A stop asks once: supervisors up are followed and stopped by their own stop (TERM,
        job.stop_grace for the ranks' save, KILL) before any scancel, whose KILL would come
        after Slurm's KillWait instead; a stop while they come up is Slurm's to end."""
        assert self.fleet is not None
        since = int(self.info.get("since") or 0)
        deadline = time.monotonic() + inv.job.start_timeout
        waiting = set(range(len(inv.hosts)))
        while waiting and time.monotonic() < deadline:
            asked = sorted(waiting)  # every node at once: each is an `srun --overlap` away
            up = await asyncio.gather(*(self._up(k, since) for k in asked))
            waiting -= {k for k, yes in zip(asked, up, strict=True) if yes}
            if self.stopping:
                break
            job = await self._ask() if waiting else self.job
            if job is None or job.ended:
                return False
            if waiting:
                await asyncio.sleep(UP_POLL_S)
        return not waiting

    async def _up(self, k: int, since: int) -> bool:
        """Whether node k's supervisor answers (its agent started for it if need be)."""
        assert self.fleet is not None
        with contextlib.suppress(HostError):
            agent = await self.fleet.agent(k, _quiet)  # said once the run starts
            found = await ops.status(agent, [(self.run_id, k, since)])
            return bool((found.get(self.run_id) or {}).get(k))
        return False

    async def _watch_job(self) -> None:
        """Slurm's state while the nodes are followed: a job that ended under them (a node
        failed, a scancel from elsewhere) ends every stream still open, with Slurm's word and
        the nodes it failed."""
        while True:
            await asyncio.sleep(RUNNING_POLL_S)
            with contextlib.suppress(HostError):
                job = await self._ask()
                if job is not None and not job.ended:
                    continue
                text = queue.ended_text(job) if job else f"job {self.job_id} is gone from Slurm"
                down = (
                    await self.login.down(job.nodes) if job and job.state in FAILED_STATES else []
                )
                if down:
                    text = f"{','.join(down)} failed: Slurm says {text}"
                if self.run is not None:
                    self.run.gang.allocation_ended(f"{text} (Slurm ended the job)")
                return

    async def _after(self, fin: RunFinished) -> RunFinished | None:
        """Slurm's side of the end: a stopped run's job cancelled; the job's last state kept;
        a node Slurm failed, with restarts left: None (submit again without it)."""
        if fin.status == "detached":
            return fin
        if fin.status == "stopped" or self.stopping:
            await self._cancel()
        job = await self._settled()
        if job is not None:
            self.emit(
                JobState(
                    job.id,
                    job.state,
                    queue.ended_text(job) if job.ended else f"job {job.id} {job.state}",
                    job.reason,
                    nodes=job.nodes,
                )
            )
        self._keep(job)
        used = int(self.info.get("since") or 0) + len(fin.attempts or (1,))
        if job is None or job.state not in FAILED_STATES or fin.status == "stopped":
            return fin
        failed = await self.login.down(job.nodes)
        if used <= self.inv.job.restarts:
            exclude = [*self.info.get("exclude", ()), *failed]
            left_out = f" without {','.join(failed)}" if failed else ""
            text = f"{queue.ended_text(job)}: asking Slurm again{left_out} (attempt {used + 1})"
            self.emit(Notice("warning", text))
            self.run = None
            await self._submit(used, exclude)
            self.record = runs.read(self.run_dir)
            self.recorder = Recorder(self.run_dir, resume=True, started_at=self.record.started_at)
            return None
        return fin

    async def _settled(self) -> queue.Job | None:
        """The job's state once Slurm has it ended (a few seconds after the nodes' end)."""
        job = None
        with contextlib.suppress(HostError):
            for _ in range(20):
                job = await self._ask()
                if job is None or job.ended or self.detach_now:
                    break
                await asyncio.sleep(0.5)
        return job

    def _keep(self, job: queue.Job | None) -> None:
        """summary.json and run.json carry the job: its id, state and nodes."""
        if job is not None:
            self.info.update(state=job.state, reason=job.reason)
        runs.write_info(self.run_dir, slurm=self.info)
        runs.add_to_summary(self.run_dir, slurm=self.info)

    def _finish(self, status: Any, code: int, failure: Failure | None = None) -> RunFinished:
        fin = RunFinished(
            status, code, time.monotonic() - self._t0, failure, (failure,) if failure else ()
        )
        self.emit(fin)
        if status != "detached":
            self._keep(self.job)
        return fin


def _quiet(event: Event) -> None:
    return None


def _render(
    inv: Inventory, run_id: str, attempt: int, exclude: Sequence[str], extra: Sequence[str]
) -> tuple[str, int | None]:
    """The batch script and the job's world size. Its modules (the run's planning, which
    loads most of the engine) are imported here, in the thread that renders it, while the
    login to the login node is made: not before the command can log in."""
    from ddptui.remote.slurm import script

    return script.render(inv, run_id, attempt, exclude, extra), script.world_size(inv)


def _over(job: queue.Job | None) -> bool:
    """Gone from Slurm, ended, or ending (COMPLETING: its processes being reaped)."""
    return job is None or job.ended or job.state == "COMPLETING"


def job_of(record: runs.RunRecord) -> dict[str, Any]:
    """A run's Slurm job, as its run.json keeps it ({} for a run on SSH hosts)."""
    found = record.info.get("slurm")
    return found if isinstance(found, dict) else {}
