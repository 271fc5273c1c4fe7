"""GPU and network health during a run, read by each node's supervisor all along its attempt.

`check` judges a host before a launch (remote/host/health.py); here the same reads are compared
with how the host was when the attempt began, so what a host carried in (an old Xid in the
boot's log, a port left down on purpose) does not end every attempt, while what happens during
it does at once:

- failures act: a counter that rose (uncorrectable ECC errors, an Xid of health.XID_FAILURES
  logged again), a state entered (remapped rows pending or failed, retired pages pending), an
  InfiniBand port that left ACTIVE or whose link_downed rose; and, fail closed, a GPU that
  cannot be read (nvidia-smi failing, hanging or answering `ERR!`) at any read;
- warnings (slowdowns, correctable errors, other Xids) are told once each time they grow.

A read that fails once is read again at once (health.py): a healthy host's GPUs are never
blamed for a read killed from outside or cut short. The supervisor runs the reads as its own
commands (remote/host/owncommands.py), never swept as its job's. Where the attempt began with
the journal, a journal that fails to answer later is not replaced by the ring buffer: its Xids
since the boot were never the reference, and an old one would read as new.

python3 >= 3.8, standard library only. A host with no nvidia-smi and no InfiniBand port watches
nothing (`worth_watching`).
"""

from __future__ import annotations  # py3.8: annotations stay unevaluated

import time

from . import health

TYPE_CHECKING = False  # typing costs milliseconds of import on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any

INTERVAL_S = 4.0  # between reads: a failure acts within this plus one read
# A read past this is a hung nvidia-smi (fail closed): with INTERVAL_S, a GPU that hangs it ends
# the attempt within 12 s and a stop, under the 15 s asked of any failure (`check`, which
# nothing waits on, allows health.SMI_TIMEOUT).
SMI_TIMEOUT_S = 8.0


def worth_watching(smi: str | None, ib_root: str = health.SYS_IB) -> bool:
    return bool(smi) or bool(health.ib_ports(ib_root))


class HealthWatch:
    """One attempt's watch of this host: `begin` reads how it is, each `poll` says what
    changed since: (failures, warnings), issues as health.py words them."""

    def __init__(self, smi: str | None, kmsg: str | None = health.KMSG,
                 journalctl: str | None = "journalctl", ib_root: str = health.SYS_IB,
                 timeout: float = SMI_TIMEOUT_S,
                 run: health.Run | None = None) -> None:  # fmt: skip
        self.args = (smi, kmsg, journalctl, ib_root, timeout)
        self.run = run  # how a read's command runs (a supervisor's own commands)
        self.since: float | None = None  # when the attempt began: the journal from then on
        self.seen: dict[tuple[Any, ...], int] = {}  # an issue's key -> its count when told
        self.ports: dict[tuple[str, str], dict[str, Any]] = {}

    def read(self) -> dict[str, Any]:
        smi, kmsg, journalctl, ib_root, timeout = self.args
        return health.read(smi, kmsg, journalctl, ib_root, timeout, self.since, self.run)

    def begin(self) -> None:
        """How the host is as the attempt begins: the reference for what follows. A GPU that
        cannot be read already is not taken as the norm: the first poll fails it."""
        began = time.time() - 1  # the journal's seconds are whole
        found = self.read()  # the whole boot's log, as check reads it: where it can be read
        journal = found["kernel_log"] == "journalctl -k"
        smi, kmsg, journalctl, ib_root, timeout = self.args
        if journal:  # from now on only the attempt's lines: every Xid read then is new
            self.since = began
            self.args = (smi, None, journalctl, ib_root, timeout)
        else:  # /dev/kmsg or nothing: the same source every read, or counts would jump
            self.args = (smi, kmsg, None, ib_root, timeout)
        self.seen = {
            _key(i): i["count"]
            for i in found["issues"]
            if i["kind"] != health.UNREADABLE and not (journal and i["source"] == "kernel")
        }
        self.ports = {(p["device"], p["port"]): p for p in found["ib"]}

    def poll(self) -> tuple[list[Any], list[Any]]:
        return self.changes(self.read())

    def changes(self, found: dict[str, Any]) -> tuple[list[Any], list[Any]]:
        failures, warnings = [], []
        for issue in found["issues"]:
            key = _key(issue)
            new = key not in self.seen or issue["count"] > self.seen[key]
            if issue["kind"] == health.UNREADABLE or (new and issue["level"] == "failure"):
                failures.append(issue)
            elif new:
                warnings.append(issue)
            self.seen[key] = issue["count"]
        failures += port_failures(self.ports, found["ib"])
        return failures, warnings


def _key(issue: dict[str, Any]) -> tuple[Any, ...]:
    return issue["level"], issue["source"], issue["kind"], issue["gpu"], issue["bus_id"]


def port_failures(before: dict[tuple[str, str], Any], ports: list[Any]) -> list[Any]:
    """InfiniBand ports that were ACTIVE as the attempt began and are not now, or whose
    link_downed rose (a link that flapped: NCCL's transfers over it failed or stalled)."""
    out = []
    for p in ports:
        was = before.get((p["device"], p["port"]))
        if was is None:
            continue
        name = "{} port {}".format(p["device"], p["port"])
        if "ACTIVE" in (was["state"] or "") and "ACTIVE" not in (p["state"] or ""):
            what = "{} left ACTIVE: {}".format(name, p["state"] or "unreadable")
            out.append(health._issue("failure", "infiniband", what, kind="left active"))
        if (p["link_downed"] or 0) > (was["link_downed"] or 0):
            what = "{}: link_downed rose from {} to {}".format(
                name, was["link_downed"] or 0, p["link_downed"])  # fmt: skip
            out.append(health._issue("failure", "infiniband", what, kind="link downed"))
    return out


def describe(host: str, issue: dict[str, Any]) -> str:
    """`GPU 3 (00000000:5D:00.0) on node1: Xid 79: GPU has fallen off the bus.`"""
    where = host
    if issue["gpu"] is not None or issue["bus_id"]:
        gpu = "GPU {}".format(issue["gpu"]) if issue["gpu"] is not None else "GPU"
        bus = " ({})".format(issue["bus_id"]) if issue["bus_id"] else ""
        where = "{}{} on {}".format(gpu, bus, host)
    return "{}: {}".format(where, issue["what"])
