"""What torchrun says, read one way on both sides: its failure report, and the echo rule.

A failed torchrun ends with a ChildFailedError report: a `Root Cause` block and a `Failures`
block, each entry a few `field : value` lines (time, host, rank, exitcode, error_file). The
node's supervisor reads it to name the failing rank in its word to the hub
(remote/host/daemon.py); the launcher reads it, with each rank's stderr, for the run's root cause
(remote/run/failures.py). A rank that died because a peer did (its connection closed, its
communicator aborted) or of a stop's signal is an echo, never the cause: `is_echo_text` says so
of its last words, on both sides. Standard library only, python3 >= 3.8.
"""

from __future__ import annotations

import os
import re

# A rank that died of its peer's death, or of its launcher's TERM, is an echo, not a cause.
ECHO = re.compile(
    r"closed by peer|reset by peer|Connection refused|remote process exited|"
    r"NCCL communicator was aborted|Broken pipe|SIGTERM|SIGINT|SIGHUP"
)
REPORT = "ChildFailedError"  # the report's first line names it
ERR_KEPT = 1 << 14  # bytes of a job's (a rank's) stderr read: torchrun's report is at its end
_FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file)\s*:\s*(.*)$")
_RANK = re.compile(r"(-?\d+)(?: \(local_rank: (\d+)\))?")
_EXIT = re.compile(r"(-?\d+)(?: \(pid: (\d+)\))?")


def is_echo_text(text: str) -> bool:
    """Whether a rank's last words say it died of another's failure (or of a stop's signal)."""
    return bool(ECHO.search(text))


class ReportedFailure:
    """One entry of torchrun's `Root Cause` / `Failures` blocks."""

    __slots__ = ("at", "exit_code", "host", "local_rank", "pid", "rank", "root")

    def __init__(
        self,
        rank: int,
        local_rank: int | None = None,
        exit_code: int | None = None,
        pid: int | None = None,
        host: str | None = None,
        root: bool = False,
        at: float | None = None,
    ) -> None:
        self.rank, self.local_rank, self.exit_code, self.pid = rank, local_rank, exit_code, pid
        self.host = host
        self.root = root  # torchrun named it its node's root cause
        self.at = at  # when it ended, where its supervisor saw it (host clock)

    def __repr__(self) -> str:
        return "ReportedFailure(rank={}, local_rank={}, exit_code={}, root={})".format(
            self.rank, self.local_rank, self.exit_code, self.root
        )


def parse_child_failed(lines: list[str]) -> list[ReportedFailure]:
    """The rank entries of torchrun's ChildFailedError report, its root cause first, then the
    others in the order printed."""
    found: dict[int, ReportedFailure] = {}
    current: ReportedFailure | None = None
    host: str | None = None  # printed before the rank it belongs to
    in_root = False
    for line in lines:
        if "Root Cause" in line:
            in_root = True
        m = _FIELD.match(line)
        if not m:
            continue
        key, value = m.groups()
        if key == "time":
            current, host = None, None
        elif key == "host":
            host = value.strip()
        elif key == "rank" and (r := _RANK.match(value)):
            rank = int(r.group(1))
            local = int(r.group(2)) if r.group(2) else None
            current = found.setdefault(rank, ReportedFailure(rank, local, host=host))
            current.root = current.root or in_root
        elif current and key == "exitcode" and (e := _EXIT.match(value)):
            current.exit_code = int(e.group(1))
            current.pid = int(e.group(2)) if e.group(2) else None
    return sorted(found.values(), key=lambda r: not r.root)


def failed_ranks(err: bytes) -> list[tuple[int, int | None, int | None]]:
    """[(global rank, local rank, exit code)] torchrun's last report in a job's stderr names
    (None where it does not say): its root cause first, then the other failures."""
    _, found, report = err.rpartition(REPORT.encode())
    if not found:
        return []
    lines = report.decode("utf-8", "replace").splitlines()
    return [(r.rank, r.local_rank, r.exit_code) for r in parse_child_failed(lines)]


def own_failure(name: str, err: bytes, scratch: str | None, ranks: list[int]) -> str | None:
    """`rank N failed on NAME` for the first rank that failed of its own on this node: not
    killed by a signal, and not one that lost its peer (torchrun's root cause may be such a
    rank, on the host where the failing one's peers noticed first). From torchrun's report in
    the job's stderr (`err`), its root cause first; a job stopped before torchrun could report:
    a traceback in a rank's own stderr (torchrun's log dir, `scratch`). ranks: the node's global
    ranks by local rank. None where no rank failed of its own."""
    reported = failed_ranks(err)
    found = [(r, local) for r, local, code in reported if code is None or code >= 0]
    if not reported:
        found = [(rank, local) for local, rank in enumerate(ranks)]
    for rank, local in found:
        said = rank_stderr(scratch, local).decode("utf-8", "replace") if local is not None else ""
        if (reported or "Traceback" in said) and not is_echo_text(said):
            return "rank {} failed on {}".format(rank, name)
    return None


def rank_stderr(scratch: str | None, local: int) -> bytes:
    """The end of a local rank's stderr in torchrun's log dir (its last attempt's)."""
    import glob  # here: the launcher, which imports this module, never needs it

    found = sorted(glob.glob(os.path.join(scratch or "", "*", "attempt_*", str(local),
                                          "stderr.log")))  # fmt: skip
    if not found:
        return b""
    with open(found[-1], "rb") as f:
        f.seek(max(0, os.fstat(f.fileno()).st_size - ERR_KEPT))
        return f.read()
