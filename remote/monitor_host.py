"""Live GPU figures, host side: one long-lived process per host samples nvidia-smi every few
seconds and prints each sample as one line, MARK + JSON, until the launcher is gone.

It runs on the host's python3 (>= 3.8, standard library only) and travels in the command line
itself after probe_host.py's source, whose way of running nvidia-smi it reuses (remote/monitor.py):
nothing is installed. nvidia-smi's output goes back raw: the launcher parses it with the probe's
parser. What nvidia-smi cannot say, whose each GPU process
is, comes from /proc (the user owning the pid; "?" for a process of another container).

It ends when the launcher is gone, whichever way: stdin EOF (ddptui quit or crashed, the
connection closed) or silence. A host whose network was cut never sees EOF: its sshd keeps the
session for hours (design §7), so the launcher writes a line every few seconds and a lease of
`lease` seconds without one ends this process as well. Stdin lines "pause" and "resume" stop
and restart the sampling (a run streams its own figures meanwhile).
"""

from __future__ import annotations  # py3.8: annotations stay unevaluated

import json
import os
import pwd
import shutil
import sys
import threading
import time

TYPE_CHECKING = False  # typing costs milliseconds of import on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any

MARK = "DDPTUI-GPU "


class Lease:
    """What the launcher last said, and when: any line renews the lease."""

    def __init__(self) -> None:
        self.heard = time.monotonic()
        self.paused = False
        self.gone = threading.Event()

    def listen(self) -> None:
        for line in sys.stdin.buffer:
            self.heard = time.monotonic()
            word = line.strip()
            if word in (b"pause", b"resume"):
                self.paused = word == b"pause"
        self.gone.set()  # EOF: the launcher, or its connection, is gone


def main(probe: dict[str, Any], spec_text: str) -> int:
    """probe: probe_host.py's namespace; spec: {interval, lease, paused, smi: {name: argv}}."""
    spec = json.loads(spec_text)
    smi = shutil.which("nvidia-smi")
    if smi is None:  # a CPU host: say so once, and stay no longer
        send({"smi": None})
        return 0
    lease = Lease()
    lease.paused = spec.get("paused", False)
    threading.Thread(target=lease.listen, daemon=True).start()
    while not lease.gone.is_set() and time.monotonic() - lease.heard < spec["lease"]:
        if not lease.paused and not send(sample(probe, smi, spec["smi"])):
            break
        lease.gone.wait(spec["interval"])
    return 0


def sample(probe: dict[str, Any], smi: str, queries: dict[str, list[str]]) -> dict[str, Any]:
    running = {name: probe["_start"]([smi, *argv]) for name, argv in queries.items()}
    runs = {name: probe["_finish"](proc) for name, proc in running.items()}
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


def send(msg: dict[str, Any]) -> bool:
    try:
        sys.stdout.write(MARK + json.dumps(msg) + "\n")
        sys.stdout.flush()
    except OSError:  # the launcher's end is closed
        return False
    return True
