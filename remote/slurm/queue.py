"""A job as Slurm says it: its state, why it waits and when it may start, its nodes. Pure.

`squeue --states=all` knows a job from its submission until MinJobAge after its end; past that,
`sacct` (a site with accounting). A job is the run's only if its name is the run's
(`ddptui-<run id>`): job ids start again at 1 when a controller loses its state, and then an
id a run kept names somebody else's job.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from ddptui.remote import fold
from ddptui.remote.store.runs import age

JOB_PREFIX = "ddptui-"  # a run's job name: the prefix and its run id
SQUEUE_FORMAT = "%i|%j|%T|%r|%S|%N|%B|%u"
SACCT_FIELDS = "JobID,JobName,State,Reason,Start,NodeList,ExitCode"
# Slurm's states of a job that will not run again (a requeue makes a new pending one)
ENDED = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "NODE_FAIL",
    "TIMEOUT",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "SPECIAL_EXIT",
    "REVOKED",
}
NO_REASON = {"", "None", "(null)"}


@dataclass(frozen=True)
class Job:
    id: str
    name: str
    state: str  # PENDING, RUNNING, COMPLETED, NODE_FAIL, ...
    reason: str = ""  # why it is pending (Resources, Priority ...) or why it ended
    start: float | None = None  # when it started, or is expected to (None: Slurm does not say)
    nodes: tuple[str, ...] = ()  # node 0 first: the batch host
    exit_code: str = ""  # sacct's ExitCode, `1:0`

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def running(self) -> bool:
        return self.state in ("RUNNING", "COMPLETING")

    def mine(self, name: str) -> bool:
        return self.name == name


def job_name(run_id: str) -> str:
    return JOB_PREFIX + run_id


def parse_squeue(out: str) -> Job | None:
    """squeue -h -o SQUEUE_FORMAT, one job's line."""
    for line in out.splitlines():
        fields = line.strip().split("|")
        if len(fields) >= 7 and fields[0]:
            nodes = _nodes(fields[5], fields[6])
            return Job(fields[0], fields[1], fields[2], _reason(fields[3]), _time(fields[4]), nodes)
    return None


def parse_sacct(out: str) -> Job | None:
    """sacct -X -n -P -o SACCT_FIELDS: the job's allocation line."""
    for line in out.splitlines():
        fields = line.strip().split("|")
        if len(fields) >= 7 and fields[0] and "." not in fields[0]:
            state = fields[2].split()[0] if fields[2] else ""  # `CANCELLED by 0`
            return Job(
                fields[0],
                fields[1],
                state,
                _reason(fields[3]),
                _time(fields[4]),
                _nodes(fields[5], ""),
                fields[6],
            )
    return None


def _reason(text: str) -> str:
    return "" if text.strip() in NO_REASON else text.strip()


def _time(text: str) -> float | None:
    text = text.strip()
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()
    except ValueError:
        return None  # N/A, Unknown, None


def _nodes(listed: str, batch_host: str) -> tuple[str, ...]:
    listed = listed.strip()
    if not listed or listed in ("(null)", "None assigned"):
        return ()
    try:
        names = fold.names(listed)
    except ValueError:
        return ()
    head = batch_host.strip()
    return tuple([head] + [n for n in names if n != head] if head in names else names)


def pending_text(job: Job, now: float | None = None) -> str:
    """`job 12 pending (Resources): expected to start at 14:05 (in 3 m 10 s)`."""
    text = f"job {job.id} pending"
    if job.reason:
        text += f" ({job.reason})"
    if job.start is not None:
        left = job.start - (time.time() if now is None else now)
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(job.start))
        text += f": expected to start at {when}" + (f" (in {age(left)})" if left > 0 else "")
    return text


def ended_text(job: Job) -> str:
    """Slurm's word on a job that ended: `job 12 NODE_FAIL (node sl-n1 ...)`."""
    text = f"job {job.id} {job.state}"
    if job.reason:
        text += f" ({job.reason})"
    if job.exit_code and job.exit_code not in ("0:0", ""):
        text += f", exit code {job.exit_code}"
    return text
