"""The typed events the engine emits: the one seam between the engine and its front-ends.

The dashboard and `--headless` render this stream; `events.jsonl` in a run directory is the same
stream on disk, minus the log batches (those go to the per-rank log files).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Literal

Stream = Literal["stdout", "stderr"]
HostStatus = Literal[
    "connecting",
    "connected",
    "unreachable",
    "starting",
    "running",
    "disconnected",
    "done",
    "failed",
    "stopped",
]
# detached: the launcher left; the run goes on by itself on its hosts.
# lost: no launcher was heard from for link_timeout, so the hosts stopped it.
# refused: its GPUs were held by other runs (or busy): nothing started.
RunStatus = Literal["succeeded", "failed", "stopped", "lost", "unreachable", "detached", "refused"]


@dataclass(frozen=True, slots=True)
class Failure:
    """The first failure of a run, or one of several merged across hosts."""

    host: str
    rank: int | None  # None when the node failed as a whole (lost, could not start)
    exit_code: int | None
    message: str  # one line a person reads first
    local_rank: int | None = None
    pid: int | None = None
    seen_at: float = 0.0  # launcher clock: when its traceback (or exit) reached us
    traceback: tuple[str, ...] = ()  # the last lines of the rank's stderr
    evidence: tuple[str, ...] = ()  # a host's health verdict: each read's exit, stderr, row


@dataclass(frozen=True, slots=True)
class Event:
    """Base class: every event knows how to serialise itself."""

    def to_json(self) -> str:
        return json.dumps({"event": type(self).__name__, **dataclasses.asdict(self)})


@dataclass(frozen=True, slots=True)
class RunStarted(Event):
    run_id: str
    run_dir: str
    hosts: tuple[str, ...]
    world_size: int | None  # None until known (e.g. nproc_per_node: auto)
    launcher: str


@dataclass(frozen=True, slots=True)
class HostState(Event):
    host: str
    node_rank: int
    state: HostStatus
    detail: str = ""


@dataclass(frozen=True, slots=True)
class NodeStarted(Event):
    host: str
    node_rank: int
    pid: int
    hostname: str
    ranks: tuple[int, ...]  # global ranks this node runs; () when only the run reveals them
    ifname: str | None = None


@dataclass(frozen=True, slots=True)
class NodeRanks(Event):
    """The global ranks found running on a node, for styles where only the run reveals them
    (c10d rendezvous, mp.spawn scripts, Lightning's launcher)."""

    host: str
    node_rank: int
    ranks: tuple[int, ...]
    world_size: int | None = None  # as the node's processes know it


@dataclass(frozen=True, slots=True)
class LogBatch(Event):
    """Whole lines from one node's stream, in order. rank is None for the node's own lines."""

    host: str
    node_rank: int
    stream: Stream
    lines: tuple[tuple[int | None, str], ...]
    replay: bool = False  # printed before this launcher (re)attached: the run's history
    stored: bool = False  # already in the run directory's logs (an attach's replay)


@dataclass(frozen=True, slots=True)
class NodeExited(Event):
    host: str
    node_rank: int
    exit_code: int | None
    failures: tuple[Failure, ...] = ()
    stopped: bool = False  # True when ddptui asked it to stop


@dataclass(frozen=True, slots=True)
class Notice(Event):
    level: Literal["info", "warning", "error"]
    text: str
    host: str | None = None


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """How one attempt of the job went (job.restarts): the run's is its last attempt's."""

    attempt: int  # as DDPTUI_ATTEMPT: 0 for the first
    started: float | None  # host clock: the first node's start, the last node's end
    finished: float | None
    status: RunStatus
    failure: Failure | None = None


@dataclass(frozen=True, slots=True)
class RunFinished(Event):
    status: RunStatus
    exit_code: int
    elapsed: float
    failure: Failure | None = None
    failures: tuple[Failure, ...] = field(default=())
    attempts: tuple[AttemptResult, ...] = field(default=())
    reason: str = ""  # why, where no failure says it: a lost run (the hosts' lease ended it)


def seconds(s: float) -> str:
    """A wait as people read it: `0.5`, `10`, `60` (the time left to a restart is measured to
    the millisecond: 0.499 s said as 0.5)."""
    return f"{round(s, 1):g}" if s < 10 else str(round(s))


@dataclass(frozen=True, slots=True)
class RunRestarting(Event):
    """The run's hub starts the job again on every node (job.restarts), after `delay` s and
    once a spare host has taken each lost node's place (`replace`: those nodes' names)."""

    attempt: int  # the coming one, as DDPTUI_ATTEMPT
    of: int  # attempts in all, at most
    after: str  # why: `rank 3 failed on node1`, `node1 was lost`
    delay: float
    replace: tuple[str, ...] = ()

    def text(self) -> str:
        """`restarting in 10 s: attempt 2 of 3 (after rank 3 failed on node1)`."""
        when = f"in {seconds(self.delay)} s"
        if self.replace:
            names = ", ".join(self.replace)
            when = f"once a spare host takes {names}'s place ({when} at the earliest)"
        return f"restarting {when}: attempt {self.attempt + 1} of {self.of} (after {self.after})"


@dataclass(frozen=True, slots=True)
class CheckpointSaved(Event):
    """The job saved a new newest checkpoint in job.checkpoint's directory (node 0 saw it)."""

    path: str
    step: int | None  # from its name, where it carries one
    at: float  # node 0's clock: when it was written


@dataclass(frozen=True, slots=True)
class Stopping(Event):
    """A stop that ends the run (a user's, from any launcher, or the hosts' lease): every rank
    got TERM and has `grace` seconds (job.stop_grace) to end, a checkpoint's save among what it
    may finish, before KILL."""

    grace: float
    checkpoint: str | None  # job.checkpoint: where the ranks save
    left: float | None = None  # heard late (an attach's replay): the seconds of it still left

    def text(self) -> str:
        """`stopping every node: TERM sent; the ranks have 30 s (job.stop_grace) to finish
        saving to ckpt, then KILL`."""
        if self.checkpoint is None:
            return f"stopping every node (TERM, then KILL after {self.grace:g} s)"
        return (
            f"stopping every node: TERM sent; the ranks have {self.grace:g} s (job.stop_grace) "
            f"to finish saving to {self.checkpoint}, then KILL"
        )

    def waiting(self, left: float) -> str:
        """While it waits, `left` seconds before KILL: `27 s left to save, then KILL`."""
        if left <= 0:
            return "KILL sent"
        if self.checkpoint is None:
            return f"KILL in {left:.0f} s"
        return f"{left:.0f} s left to save, then KILL"


@dataclass(frozen=True, slots=True)
class StepsLost(Event):
    """A failed attempt against its newest checkpoint: the steps a restart does again."""

    attempt: int
    path: str  # "": none saved yet
    step: int | None  # the checkpoint's
    reached: int | None  # the attempt's, from the progress its lines said
    lost: int | None  # None: unknown (no step said, or a checkpoint without one in its name)

    def text(self) -> str:
        """`attempt 1 lost 2 steps: it reached step 12, the newest checkpoint is step 10`."""
        head = f"attempt {self.attempt + 1}"
        saved = (f"step {self.step}" if self.step is not None else self.path) if self.path else ""
        if self.lost is None:
            return f"{head} ended; the newest checkpoint is {saved or 'none yet'}"
        since = f"the newest checkpoint is {saved}" if saved else "no checkpoint yet"
        return f"{head} lost {self.lost} steps: it reached step {self.reached}, {since}"


@dataclass(frozen=True, slots=True)
class BadHost(Event):
    """The run's hub will not use this host again (its GPUs or NICs failed): a spare takes
    its node rank."""

    host: str
    node_rank: int
    why: str


@dataclass(frozen=True, slots=True)
class Alert(Event):
    """Something happened that job.notify tells of (its command runs on node 0's host):
    failed, succeeded, lost, stopped, restarted, hang or straggler. wanted: one of the events
    asked for (an attached dashboard rings the bell); error: why the notify command failed."""

    event: str
    status: str
    message: str
    wanted: bool = True
    error: str = ""


@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    memory_mib: int
    name: str = ""
    user: str = ""  # whose it is, when the host can tell (live figures); "?" when it cannot


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU as nvidia-smi reports it."""

    index: int
    name: str
    memory_total_mib: int
    memory_used_mib: int
    utilization_pct: int | None = None
    temperature_c: int | None = None
    processes: tuple[GpuProcess, ...] = ()


Level = Literal["ok", "warning", "failure"]  # a finding's


@dataclass(frozen=True, slots=True)
class LeaseHolder:
    """A run's node that holds GPUs of a host (or waits for them, or held them and died)."""

    user: str  # its login on the host
    run_id: str
    node: int | None = None
    age: float | None = None  # seconds since it took them (or queued), by its host's own clock
    mode: str = ""  # starting, attached, detached
    launcher: str = ""  # who launched it, user@machine
    gpus: tuple[int, ...] = ()  # their indices on that host
    count: int = 0  # a launch waiting: how many GPUs it waits for
    key: int | None = None  # a launch waiting: its place, the queue's order on every host
    swept: int = 0  # a run that died holding GPUs: its leftover processes the launch killed


@dataclass(frozen=True, slots=True)
class GpuLease:
    """One GPU of a host and its lease (remote/host/lease.py): free, held by a run, or busy
    (not held, running someone's work)."""

    index: int
    name: str
    state: Literal["free", "held", "busy"]
    holder: LeaseHolder | None = None
    dead: LeaseHolder | None = None  # the run that held it last and died holding it
    processes: tuple[GpuProcess, ...] = ()  # its compute apps: what makes it busy


@dataclass(frozen=True, slots=True)
class HostLeases(Event):
    """A host's GPUs, each with its lease, and the launches waiting for them in order
    (`ddptui who`, the dashboard's hosts pane)."""

    host: str
    node_rank: int
    gpus: tuple[GpuLease, ...] | None  # None: no nvidia-smi, no GPU to lease
    queue: tuple[LeaseHolder, ...] = ()
    error: str = ""  # why its leases could not be read


@dataclass(frozen=True, slots=True)
class Finding:
    """One result of the checks: a failure blocks a launch, a warning does not."""

    level: Level
    check: str  # short id, e.g. "gpu", "torch", "script", "route", "port", "same-torch"
    message: str
    host: str | None = None  # None for findings across hosts


@dataclass(frozen=True, slots=True)
class HostChecked(Event):
    """Everything one probe round trip learned about a host (issue: checks before launch)."""

    host: str
    node_rank: int
    facts: dict[str, Any]  # hostname, os, python, torch, cuda, driver, ifname, disk, ...
    gpus: tuple[Gpu, ...] = ()
    findings: tuple[Finding, ...] = ()


@dataclass(frozen=True, slots=True)
class ChecksDone(Event):
    ok: bool  # False when any finding is a failure
    findings: tuple[Finding, ...] = ()  # every host's findings and those across hosts


@dataclass(frozen=True, slots=True)
class DeepChecked(Event):
    """The deep check's verdict (remote/run/deepcheck.py): the fabric measured on every rank the job
    would have. figures: per size and per host, as remote/checks/fabric.py's figures() gives
    them."""

    ok: bool  # False when any finding is a failure
    findings: tuple[Finding, ...] = ()
    figures: dict[str, Any] | None = None
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class DeepProgress(Event):
    """What the deep check is at: its start, then what rank 0 of its fabric test says."""

    text: str


@dataclass(frozen=True, slots=True)
class GpuStats(Event):
    """A live refresh of one host's GPUs while a job runs."""

    host: str
    node_rank: int
    gpus: tuple[Gpu, ...]


@dataclass(frozen=True, slots=True)
class HangDetected(Event):
    """No rank printed a line (or the job's GPUs sat at 0 %) for `job.hang_after` seconds."""

    ranks: tuple[int, ...]  # the silent ranks: every rank still running
    hosts: tuple[str, ...]
    since: float  # seconds of silence (or idle GPUs)
    reason: Literal["silent", "gpus-idle"] = "silent"


@dataclass(frozen=True, slots=True)
class StacksCaptured(Event):
    """Every rank's stack, grouped, saved in the run directory (after a hang, or asked for)."""

    path: str  # stacks-<time>.txt
    summary: str  # the first group's line: the odd one out


@dataclass(frozen=True, slots=True)
class CodeSynced(Event):
    """`job.sync` on one host: what was pushed to its workdir before launch, or why not."""

    host: str
    node_rank: int
    dest: str  # the host's workdir, as the inventory names it
    files: int = 0  # files pushed (new or changed)
    bytes: int = 0
    unchanged: int = 0  # files already there with the same content
    seconds: float = 0.0
    skipped: str = ""  # why nothing was done (a local host running in the source itself)
    error: str = ""  # why the push failed: the launch refuses

    def text(self) -> str:
        """`code synced to /srv/p: 3 files (41.2 kB) pushed, 197 unchanged, 0.21 s`."""
        if self.error:
            return f"code sync to {self.dest} failed: {self.error}"
        if self.skipped:
            return f"code sync skipped: {self.skipped}"
        size = f"{self.bytes / 1e3:.1f} kB" if self.bytes < 1e6 else f"{self.bytes / 1e6:.1f} MB"
        pushed = f"{self.files} file{'s' * (self.files != 1)} ({size}) pushed"
        took = f"{self.unchanged} unchanged, {self.seconds:.2f} s"
        return f"code synced to {self.dest}: {pushed}, {took}"


@dataclass(frozen=True, slots=True)
class RankProgress:
    """One rank's last word on its training: its step, steps per second, metrics."""

    rank: int
    step: int | None
    rate: float | None
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Progress(Event):
    """The training as its lines tell it (remote/run/progress.py), at most once a second: the run's
    step (its lowest rank's), speed, seconds left where a total is known, the metrics' last
    values, every rank's word, and each metric's points (step, value, attempt) for a plot."""

    step: int | None
    total: int | None
    rate: float | None
    left: float | None
    metrics: dict[str, float]
    attempt: int | None = None
    ranks: tuple[RankProgress, ...] = ()
    series: dict[str, tuple[tuple[float, float, int], ...]] = field(default_factory=dict)
    starts: tuple[tuple[int, float], ...] = ()  # (attempt, its first step) after the first

    def text(self) -> str:
        """`step 1200/5000 · 7.2 it/s · loss 0.41 · 9 min left`."""
        return progress_text(self.step, self.total, self.rate, self.metrics, self.left)


def progress_text(
    step: int | None,
    total: int | None,
    rate: float | None,
    metrics: dict[str, float],
    left: float | None = None,
) -> str:
    """The training in a line; `loss` first among the metrics, at most three of them."""
    parts = []
    if step is not None:
        parts.append(f"step {step}/{total}" if total else f"step {step}")
    if rate:
        parts.append(f"{rate:.3g} it/s" if rate >= 1 else f"{1 / rate:.3g} s/it")
    keys = sorted(metrics, key=lambda k: (not k.endswith("loss"), k != "loss", k))[:3]
    parts += [f"{k} {metrics[k]:.4g}" for k in keys]
    if left is not None:
        parts.append(f"{_duration(left)} left")
    return " · ".join(parts)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass(frozen=True, slots=True)
class TrackerLink(Event):
    """A tracker's link a rank printed (W&B, TensorBoard, MLflow, Comet, Aim), once each."""

    tracker: str
    url: str
    name: str | None = None
    rank: int | None = None

    def text(self) -> str:
        name = f" ({self.name})" if self.name else ""
        return f"{self.tracker}{name}: {self.url}"


@dataclass(frozen=True, slots=True)
class JobState(Event):
    """What Slurm says of a run's job (remote/slurm/): submitted, PENDING with its reason and
    expected start, RUNNING on its nodes, or how it ended; `text` in a person's words."""

    job_id: str
    state: str  # SUBMITTED (ours), then Slurm's: PENDING, RUNNING, COMPLETED, NODE_FAIL ...
    text: str
    reason: str = ""
    start: float | None = None  # when it started, or is expected to
    nodes: tuple[str, ...] = ()


EVENT_TYPES: dict[str, type[Event]] = {
    cls.__name__: cls
    for cls in (
        RunStarted,
        BadHost,
        HostState,
        NodeStarted,
        NodeRanks,
        LogBatch,
        NodeExited,
        Notice,
        RunFinished,
        HostChecked,
        ChecksDone,
        DeepChecked,
        DeepProgress,
        GpuStats,
        HangDetected,
        StacksCaptured,
        CodeSynced,
        RunRestarting,
        Alert,
        Progress,
        TrackerLink,
        HostLeases,
        JobState,
        CheckpointSaved,
        Stopping,
        StepsLost,
    )
}


def from_json(line: str) -> Event:
    """Rebuild an event written by `Event.to_json` (replay, tests)."""
    data: dict[str, Any] = json.loads(line)
    cls = EVENT_TYPES[data.pop("event")]
    for key in ("failure",):
        if isinstance(data.get(key), dict):
            data[key] = failure_from(data[key])
    if "failures" in data:
        data["failures"] = tuple(failure_from(f) for f in data["failures"])
    if "attempts" in data:
        data["attempts"] = tuple(attempt_from(a) for a in data["attempts"])
    for key in ("hosts", "ranks", "replace", "nodes"):
        if key in data:
            data[key] = tuple(data[key])
    if "lines" in data:
        data["lines"] = tuple(tuple(x) for x in data["lines"])
    if cls is HostLeases:
        return _host_leases(data)
    if "gpus" in data:
        data["gpus"] = tuple(_gpu(g) for g in data["gpus"])
    if "findings" in data:
        data["findings"] = tuple(Finding(**f) for f in data["findings"])
    return cls(**data)


def _gpu(data: dict[str, Any]) -> Gpu:
    return Gpu(**{**data, "processes": tuple(GpuProcess(**p) for p in data.get("processes", ()))})


def _holder(data: dict[str, Any] | None) -> LeaseHolder | None:
    return LeaseHolder(**{**data, "gpus": tuple(data.get("gpus", ()))}) if data else None


def _host_leases(data: dict[str, Any]) -> HostLeases:
    gpus = data.get("gpus")
    each = None
    if gpus is not None:
        each = tuple(
            GpuLease(
                **{**g, "holder": _holder(g.get("holder")), "dead": _holder(g.get("dead")),
                   "processes": tuple(GpuProcess(**p) for p in g.get("processes", ()))}
            )
            for g in gpus
        )  # fmt: skip
    queue = tuple(h for h in map(_holder, data.get("queue", ())) if h is not None)
    return HostLeases(**{**data, "gpus": each, "queue": queue})


def attempt_from(data: dict[str, Any]) -> AttemptResult:
    """An AttemptResult as `dataclasses.asdict` wrote it (events.jsonl, summary.json)."""
    failure = data.get("failure")
    return AttemptResult(**{**data, "failure": failure_from(failure) if failure else None})


def failure_from(data: dict[str, Any]) -> Failure:
    """A Failure as `dataclasses.asdict` wrote it (events.jsonl, summary.json)."""
    return Failure(**{**data, "traceback": tuple(data.get("traceback", ())),
                      "evidence": tuple(data.get("evidence", ()))})  # fmt: skip
