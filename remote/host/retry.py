"""Whether a failed attempt is worth another: job.restart_on, and an attempt that got no further.

The run's hub (node 0's supervisor) asks both once an attempt has failed and restarts remain.
Pure rules over the attempts' outcomes, each a dict with
    cause  "failed" (a rank's exit), "gpu" (a host's GPU or NIC failed), "lost" (a host), "hang",
           "straggler" (job.on_straggler: replace swaps its host: always restarts)
    code   the failing rank's exit code (cause "failed"), else None
    node, rank   where it failed (rank None when no rank is named)
    lines  the lines that node's ranks printed in the attempt
    saved  with job.checkpoint: the newest checkpoint at the attempt's end ({path, at, step}, or
           None before the first); without, no such key
python3 >= 3.8, standard library only.
"""

from __future__ import annotations  # py3.8: annotations stay unevaluated

TYPE_CHECKING = False  # typing costs milliseconds of import on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any, Sequence

CAUSES = ("hang", "lost", "gpu", "failed")


def restarts_on(restart_on: Sequence[Any] | None, outcome: dict[str, Any]) -> bool:
    """job.restart_on (None: everything restarts): a cause it names, or for a rank's exit, its
    code (SkyPilot's recover_on_exit_codes)."""
    if restart_on is None:
        return True
    cause, code = outcome.get("cause") or "failed", outcome.get("code")
    return cause in restart_on or (cause == "failed" and code is not None and code in restart_on)


def no_progress(last: dict[str, Any] | None, now: dict[str, Any]) -> bool:
    """The attempt failed as the last one did (same cause, exit code, node and rank) and its
    node printed no line beyond where the last one's stopped: another would fail there too."""
    if last is None:
        return False
    same = all(last.get(k) == now.get(k) for k in ("cause", "code", "node", "rank"))
    return same and (now.get("lines") or 0) <= (last.get("lines") or 0)


HOST_FAULTS = ("lost", "gpu", "straggler")  # a host's, not the job's: no checkpoint was owed


def saved_nothing(last: dict[str, Any] | None, now: dict[str, Any]) -> bool:
    """job.checkpoint: neither of the last two failed attempts' jobs advanced the newest
    checkpoint (a host's fault excused): another would start from it once more."""
    if last is None or "saved" not in now or now.get("saved") != last.get("saved"):
        return False
    return not any(x.get("cause") in HOST_FAULTS for x in (last, now))


def why_not(restart_on: Sequence[Any] | None, last: dict[str, Any] | None,
            now: dict[str, Any]) -> str | None:  # fmt: skip
    """Why the failed attempt `now` is not restarted (None: it is); last: the attempt before."""
    if now.get("cause") == "straggler":  # job.on_straggler: replace chose it, a spare is there
        return None
    if not restarts_on(restart_on, now):
        what = "exit {}".format(now["code"]) if now.get("code") is not None else now.get("cause")
        return "job.restart_on does not name {}".format(what or "failed")
    if "saved" in now:  # a resumed attempt prints fewer lines, and may still go further
        if saved_nothing(last, now):
            return (
                "no progress: the newest checkpoint ({}) did not advance over two attempts".format(
                    _checkpoint(now["saved"])
                )
            )
    elif no_progress(last, now):
        return "no progress: it failed as the last attempt did, no further"
    return None


def _checkpoint(saved: dict[str, Any] | None) -> str:
    if not saved:
        return "none yet"
    step = saved.get("step")
    return "step {}".format(step) if step is not None else str(saved.get("path"))
