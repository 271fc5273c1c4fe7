"""Live GPU figures, host side: the agent's `monitor` op samples nvidia-smi every few seconds
and answers each sample on its channel, until the launcher ends the channel (or the agent goes).

nvidia-smi's output goes back raw: the launcher parses it with the checks' parser
(remote/smi.py). What nvidia-smi cannot say, whose each GPU process is, comes from /proc (the
user owning the pid; "?" for a process of another container). python3 >= 3.8, stdlib only.
"""

from __future__ import annotations  # py3.8: annotations stay unevaluated

import shutil

from .leasedir import user_of
from .probe import _finish, _start

TYPE_CHECKING = False  # typing costs milliseconds of import on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any


def serve(ch: Any, req: dict[str, Any]) -> None:
    """req: {interval, smi: {name: argv}}."""
    smi = shutil.which("nvidia-smi")
    if smi is None:  # a CPU host: say so once, and stay no longer
        ch.answer({"smi": None})
        return
    while True:
        ch.answer(sample(smi, req["smi"]))
        got = ch.recv(timeout=req["interval"])
        if got is not None and got[0] == b"e":
            return


def sample(smi: str, queries: dict[str, list[str]]) -> dict[str, Any]:
    running = {name: _start([smi, *argv]) for name, argv in queries.items()}
    runs = {name: _finish(proc) for name, proc in running.items()}
    return {"smi": runs, "owners": owners(runs.get("apps", {}).get("out", "")),
            "leases": leases(runs)}  # fmt: skip


def leases(runs: dict[str, Any]) -> dict[str, Any] | None:
    """Each GPU's lease and the queue (remote/host/leaseop.py), read with the figures."""
    gpus, apps = runs.get("gpus"), runs.get("apps")
    if not gpus or not apps or gpus["code"] or apps["code"]:
        return None
    from . import gpuinfo, leaseop

    found: dict[str, Any] = leaseop.view_of(gpuinfo.parse_query(gpus["out"]),
                                            gpuinfo.parse_apps(apps["out"]))  # fmt: skip
    return found


def owners(apps_csv: str) -> dict[str, str]:
    """{pid: user name} of the GPU processes (the second CSV field) that this host can see."""
    found = {}
    for line in apps_csv.splitlines():
        fields = line.split(", ")
        if len(fields) > 1 and fields[1].strip().isdigit():
            pid = fields[1].strip()
            found[pid] = user_of(pid)
    return found
