"""The agent's lease ops (remote/host/agent.py): `gpu-lease` takes a launch's node's GPUs, or waits
for them in the queue, and holds them until the node's supervisor takes them over at its start
(remote/host/nodes.py: spawn); `gpu-leases` says every GPU's state and the queue (`ddptui who`).

`gpu-lease`, on a channel that stays open:
  launcher: {"op": "gpu-lease", "want": {run_id, node, count, pins, cvd, busy, launcher}}
  agent:    none (no GPU here, or nvidia-smi failing: `error`) | held {gpus, cvd, dead} |
            short {held, busy, ahead, never}
  launcher: {"t": "queue", "key": K}  the launch waits, its place ordered by K on every host
  agent:    wait {...} as what it waits for changes | ready (it could take them now)
  launcher: {"t": "take"}      all hosts were ready: take them now (held, or wait again)
            {"t": "release"}   another host could not: give them back, wait on
  agent:    handed             its supervisor holds them now: the channel ends
Every answer carries the host's `counter` (the queue's highest key here) and `now` (its clock:
a holder's `since` is read against it, whatever the skew between hosts). The channel's end, or
the agent's, gives back whatever it holds and leaves the queue: nothing stays of a launch that
is gone (Ctrl-C, a launcher killed, a host cut off: the agent leaves after its lease).
"""

from __future__ import annotations

import os
import threading
import time

from . import gpuinfo, lease, leasedir
from .leasedir import LeaseError

TYPE_CHECKING = False  # typing costs import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any

POLL_S = 0.2  # how often a waiting launch looks again (a run's end to the next one's start)
APPS_S = 5.0  # how often it asks nvidia-smi again what runs on the GPUs (its cost)

_held: dict[tuple[str, int], lease.Held] = {}  # (run id, node) → taken, not yet handed over
_held_lock = threading.Lock()
# The checks' nvidia-smi answers, parsed (when, GPUs, apps): the launch's lease, on the same
# agent moments later, takes them as they are (asking again was most of the lease's cost)
_probed: tuple[float, list[gpuinfo.Gpu], Any] | None = None


def take_over(run_id, node):
    """The lease held for this node, now its supervisor's to hold (None: none is held)."""
    with _held_lock:
        return _held.pop((run_id, node), None)


def serve(ch, req):
    want = req.get("want") or {}
    try:
        asked_at, found = _read_gpus()
    except LeaseError as exc:  # its GPUs cannot be listed: none can be leased (the checks fail it)
        return ch.answer({"t": "none", "error": str(exc)})
    if not found:
        return ch.answer({"t": "none"})
    gpus, apps = found
    waiter = Waiter(ch, want, gpus, apps, asked_at)
    try:
        waiter.run()
    except LeaseError as exc:
        ch.answer({"t": "error", "error": str(exc)})
    finally:
        waiter.leave()


def _read_gpus():
    """(when nvidia-smi was asked, lease.read_gpus()): the checks' answers where they are as
    fresh as a waiting launch's (APPS_S), else asked now."""
    now, probed = time.monotonic(), _probed
    if probed is not None and now - probed[0] <= APPS_S:
        return probed[0], probed[1:]
    return now, lease.read_gpus()


class Waiter:
    """One node's lease on this host, from the ask to its hand-over (or its end)."""

    def __init__(self, ch, want, gpus, apps, asked_at):
        self.ch, self.want, self.gpus, self.apps = ch, want, gpus, apps
        self.key = (str(want.get("run_id")), int(want.get("node") or 0))
        self.cands = lease.candidates(gpus, want)
        self.count = min(int(want.get("count") or len(self.cands)), len(self.cands))
        self.dir_fd = None
        self.held: lease.Held | None = None
        self.ticket = None  # (its name, its fd, its key) while it waits in the queue
        self.said = None  # the last wait/ready said
        self.asked_at = asked_at  # when nvidia-smi was last asked (monotonic)
        self.swept: dict[str, int] = {}  # a dead run's id → its leftovers killed here

    def run(self):
        if not self.count:
            return self.ch.answer({"t": "none"})
        self.dir_fd = leasedir.open_dir()
        self.ch.answer(self.attempt(take=True))
        while True:
            got = self.ch.recv(timeout=POLL_S)
            if self.held is not None and _handed(self.key, self.held):
                self.held = None
                return self.ch.answer({"t": "handed"})
            if got is None:
                if self.ticket is not None and self.held is None:
                    self.look_again()
                continue
            kind, msg = got
            if kind == b"e":
                return
            if kind == b"j" and isinstance(msg, dict):
                self.told(msg.get("t"), msg)

    def told(self, what, msg):
        if what == "queue" and isinstance(msg.get("key"), int) and self.ticket is None:
            self.give_back()
            self.queue(msg["key"])
            self.look_again(force=True)
        elif what == "take":
            self.said = None
            answer = self.attempt(take=True)
            self.said = answer if answer["t"] != "held" else None
            self.ch.answer(answer)
        elif what == "release":
            self.give_back()
            self.look_again(force=True)

    def look_again(self, force=False):
        """Waiting: say what it waits for when that changes (or that it could take them)."""
        if time.monotonic() - self.asked_at > APPS_S:  # foreign work comes and goes
            found = lease.read_gpus()
            self.apps = found[1] if found else []
            self.asked_at = time.monotonic()
        answer = self.attempt(take=False)
        words = {k: v for k, v in answer.items() if k not in ("now", "counter")}
        if force or words != self.said:
            self.said = words
            self.ch.answer(answer)

    def attempt(self, take):
        """Under the host's lock: took them (held), could (ready), or what stands in the way."""
        with leasedir.host_lock(self.dir_fd):
            states = lease.look(self.dir_fd, self.gpus, self.apps)
            mine = [g.uuid for g, _ in self.cands]
            for run_id, n in lease.sweep_dead(states, mine).items():
                self.swept[run_id] = self.swept.get(run_id, 0) + n
            ahead = self._ahead(states)
            policy = self.want.get("busy")
            uuids, never = lease.choose(mine, self.count, states, lease.claims(ahead, states),
                                        policy)  # fmt: skip
            counter = leasedir.counter(self.dir_fd)
            said = {"counter": counter, "now": time.time(), "count": self.count}
            if uuids is not None and take:
                taken = [c for c in self.cands if c[0].uuid in uuids]
                self.held = lease.take(self.dir_fd, self.gpus, taken, self.want)
                with _held_lock:
                    _held[self.key] = self.held
                dead = [dict(_holder(r, self.gpus), swept=self.swept.get(r.get("run_id"), 0))
                        for r in self.held.dead]  # fmt: skip
                return dict(said, t="held", gpus=self.held.record["gpus"], cvd=self.held.cvd,
                            dead=dead)  # fmt: skip
            if uuids is not None:
                return dict(said, t="ready")
            what = "wait" if self.ticket is not None else "short"
            return dict(said, t=what, never=never, **self._why(mine, states, ahead, policy))

    def _ahead(self, states):
        """The live tickets before this launch's (all, if it has none) wanting GPUs here."""
        mine = self.ticket and (self.ticket[2], self.key[0], self.key[1])
        found = []
        for key, rec in leasedir.tickets(self.dir_fd):
            if not set(rec.get("cands") or ()) & set(states):
                continue  # another host's GPUs (hosts sharing this directory)
            order = (key, str(rec.get("run_id")), rec.get("node"))
            if mine is None or order < mine:
                found.append(rec)
        return found

    def _why(self, mine, states, ahead, policy):
        holders: dict[Any, Any] = {}
        for u in mine:
            holder = states[u][0]
            if holder is not None:
                one = _holder(holder, self.gpus)
                holders.setdefault((one["user"], one["run_id"], one["node"]), one)
        busy = [
            {"gpu": g.index, "pid": pid, "process": name, "user": user}
            for g, _ in self.cands if lease.busy(states[g.uuid], policy)
            for pid, name, user in states[g.uuid][2]
        ]  # fmt: skip
        ahead = [_ticket(t) for t in ahead]
        return {"held": list(holders.values()), "busy": busy, "ahead": ahead}

    def queue(self, key):
        with leasedir.host_lock(self.dir_fd):
            leasedir.counter(self.dir_fd, at_least=key)
            cands = [g.uuid for g, _ in self.cands]
            rec = dict(lease.record(self.want, []), key=key, count=self.count, cands=cands,
                       busy=self.want.get("busy"))  # fmt: skip
            name, fd = leasedir.new_ticket(self.dir_fd, key, *self.key, rec)
        self.ticket = (name, fd, key)

    def give_back(self):
        if self.held is not None and take_over(*self.key) is self.held:
            self.held.give_back()
        self.held = None

    def leave(self):
        """The launch is gone or done: nothing of it stays here but what was handed over."""
        self.give_back()
        if self.ticket is not None:
            leasedir.drop_ticket(self.dir_fd, self.ticket[0], self.ticket[1])
            self.ticket = None
        if self.dir_fd is not None:
            os.close(self.dir_fd)
            self.dir_fd = None


def _handed(key, held):
    with _held_lock:
        return _held.get(key) is not held


def _holder(rec, gpus):
    """A record, as the launcher is told it: its fields checked here, the rest left."""
    index = {g.index for g in gpus}
    return {
        "user": str(rec.get("user", "?"))[:64], "run_id": str(rec.get("run_id", "?"))[:64],
        "node": rec.get("node") if isinstance(rec.get("node"), int) else None,
        "since": rec.get("since") if isinstance(rec.get("since"), (int, float)) else None,
        "mode": str(rec.get("mode", ""))[:16], "launcher": str(rec.get("launcher", ""))[:128],
        "gpus": [i for i in rec.get("gpus") or () if isinstance(i, int) and i in index],
    }  # fmt: skip


def _ticket(rec):
    return {
        "user": str(rec.get("user", "?"))[:64], "run_id": str(rec.get("run_id", "?"))[:64],
        "node": rec.get("node") if isinstance(rec.get("node"), int) else None,
        "since": rec.get("since") if isinstance(rec.get("since"), (int, float)) else None,
        "key": rec.get("key") if isinstance(rec.get("key"), int) else None,
        "count": rec.get("count") if isinstance(rec.get("count"), int) else None,
        "launcher": str(rec.get("launcher", ""))[:128],
    }  # fmt: skip


# -- gpu-leases: every GPU's state, and the queue ------------------------------------------------


def view(req=None):
    """`ddptui who`: each GPU free, held (by whom) or busy (with what), and the launches
    waiting for GPUs here, in order. {"gpus": None} without nvidia-smi."""
    try:
        found = lease.read_gpus()
    except LeaseError as exc:
        return {"t": "leases", "now": time.time(), "error": str(exc)}
    if not found:
        return {"t": "leases", "now": time.time(), "gpus": None, "queue": []}
    return view_of(*found)


def for_probe(listed, apps, want):
    """The checks' view, from the nvidia-smi answers the probe has: view_of's, and the GPUs
    this node may take (`candidates`: its pins, or what CUDA_VISIBLE_DEVICES names)."""
    global _probed
    gpus, running = gpuinfo.parse_list(listed), gpuinfo.parse_apps(apps)
    _probed = (time.monotonic(), gpus, running)
    said = dict(view_of(gpus, running), busy=want.get("busy"))
    try:
        said["candidates"] = [g.index for g, _ in lease.candidates(gpus, want)]
    except LeaseError as exc:
        said["error"] = str(exc)
    return said


def view_of(gpus, apps):
    """Each GPU's state and the launches waiting here, from nvidia-smi's list and apps."""
    said = {"t": "leases", "now": time.time()}
    try:
        dir_fd = leasedir.open_dir()
        try:
            with leasedir.host_lock(dir_fd):
                states = lease.look(dir_fd, gpus, apps)
                queue = [_ticket(r) for _, r in leasedir.tickets(dir_fd)
                         if set(r.get("cands") or ()) & set(states)]  # fmt: skip
        finally:
            os.close(dir_fd)
    except LeaseError as exc:
        return dict(said, error=str(exc))
    each = []
    for g in gpus:
        holder, dead, procs = states[g.uuid]
        each.append({
            "index": g.index, "uuid": g.uuid, "name": g.name[:100],
            "holder": holder and _holder(holder, gpus), "dead": dead and _holder(dead, gpus),
            "procs": [[pid, name, user] for pid, name, user in procs[:16]],
        })  # fmt: skip
    return dict(said, gpus=each, queue=queue)
