"""Live GPU figures, host side: the agent's `monitor` op samples nvidia-smi every few seconds
and answers each sample on its channel, until the launcher ends the channel (or the agent goes).

nvidia-smi's output goes back raw: the launcher parses it with the checks' parser
(remote/smi.py). What nvidia-smi cannot say, whose each GPU process is, comes from /proc (the
user owning the pid; "?" for a process of another container). python3 >= 3.8, stdlib only.
"""

from __future__ import annotations  # py3.8: annotations stay unevaluated

import os
import pwd
import shutil

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
    return {"smi": runs, "owners": owners(runs.get("apps", {}).get("out", ""))}


def owners(apps_csv: str) -> dict[str, str]:
    """{pid: user name} of the GPU processes (the second CSV field) that this host can see."""
    found = {}
    for line in apps_csv.splitlines():
        fields = line.split(", ")
        if len(fields) > 1 and fields[1].strip().isdigit():
            pid = fields[1].strip()
            found[pid] = user_of(pid)
    return found


def user_of(pid: str) -> str:
    try:
        uid = os.stat("/proc/" + pid).st_uid
    except OSError:
        return "?"  # another container's process, or gone
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
