"""GPU leases on this host: which GPUs a node of a run may take, taken all at once, held by the
run's supervisor for the run's whole life, given back at its end (remote/host/leasedir.py keeps
the files; the agent's op that takes them for a launch is remote/host/leaseop.py).

A node asks for `count` GPUs among its candidates: the GPUs the inventory pins (`gpus: [0, 1]`),
else those CUDA_VISIBLE_DEVICES names (the inventory's env, else the host's), else all. A GPU is
free, held (its lease file's flock is taken: a run's), or busy: not held, yet running compute
apps (nvidia-smi's), someone's work outside ddptui. `busy_gpus` says what busy means to a
launch: refuse (never taken), wait (taken once its work is gone), share (taken anyway). Launches
waiting in the queue come first, in their order: each claims what it waits for before a later
one (or one that does not wait) may take anything.

The job's CUDA_VISIBLE_DEVICES names the GPUs taken: by index, or by UUID where the host mixes
models (CUDA numbers the fastest first, not as nvidia-smi does). Taken by a launch's agent, the
lease is handed to the node's supervisor at its start (its flocks travel over the supervisor's
socket, never let go: no other launch slips in); a spare's supervisor takes its own.
"""

from __future__ import annotations

import array
import json
import os
import shutil
import signal
import socket
import struct
import time

from . import gpuinfo, leasedir
from .leasedir import LeaseError

TYPE_CHECKING = False  # typing costs import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any

SMI_TIMEOUT = 15.0
POLICIES = ("refuse", "wait", "share")
FDS_MAX = 256  # GPUs one hand-off carries at most
HANDOFF_S = 60.0  # how long a supervisor waits for its lease from the agent


def read_gpus(smi=None):
    """(GPUs, compute apps) of this host as nvidia-smi lists them; None without nvidia-smi (no
    GPU to lease). nvidia-smi failing or silent: a LeaseError."""
    smi = smi or shutil.which("nvidia-smi")
    if smi is None:
        return None
    from .owncommands import OwnCommands  # here: a supervisor's own take needs it once

    run = OwnCommands().run  # before any reaper of the supervisor's: it waits for its own
    runs = [run([smi, *args], SMI_TIMEOUT) for args in (gpuinfo.LIST, gpuinfo.APPS)]
    for code, out, err in runs:
        if code is None:
            raise LeaseError("nvidia-smi did not answer in {:g} s".format(SMI_TIMEOUT))
        if code != 0:
            said = " ".join((out + " " + err).split())[:300]
            raise LeaseError("nvidia-smi failed (exit {}): {}".format(code, said or "no message"))
    return gpuinfo.parse_list(runs[0][1]), gpuinfo.parse_apps(runs[1][1])


def candidates(gpus, want, env=None):
    """[(GPU, device)]: what the node may take, in order. A pinned index this host lacks: a
    LeaseError."""
    env = os.environ if env is None else env
    pins = want.get("pins")
    if pins:
        by_index = {g.index: g for g in gpus}
        missing = [i for i in pins if i not in by_index]
        if missing:
            have = ", ".join(str(g.index) for g in gpus) or "none"
            raise LeaseError("gpus: {} names GPU {} but this host has GPU(s) {}".format(
                list(pins), missing[0], have))  # fmt: skip
        return [(by_index[i], by_index[i].uuid) for i in dict.fromkeys(pins)]
    value = want.get("cvd")
    chosen, _ = gpuinfo.select(gpus, value if value is not None else env.get(gpuinfo.VAR))
    found: list[Any] = []
    for device in chosen:
        gpu = gpuinfo.owner(gpus, device)
        if gpu is not None and gpu.uuid not in [g.uuid for g, _ in found]:
            found.append((gpu, device))
    return found


def visible_value(gpus, taken):
    """CUDA_VISIBLE_DEVICES for [(GPU, device)] taken: nvidia-smi's indices where every GPU here
    is one model, else the devices' UUIDs."""
    one_model = len({g.name for g in gpus}) == 1
    return ",".join(str(g.index) if one_model and d == g.uuid else d for g, d in taken)


# -- looking ----------------------------------------------------------------------------------


def look(dir_fd, gpus, apps):
    """Each GPU's state (under the host's lock): {uuid: (holder record or None if free, a dead
    run's record left in a free one, [(pid, process, user)] on it)}."""
    procs: dict[str, Any] = {}
    for uuid, pid, _, name in apps:
        procs.setdefault(uuid, []).append((pid, name[:200], leasedir.user_of(pid)))
    states: dict[str, Any] = {}
    for g in gpus:
        fd = leasedir.open_shared(dir_fd, leasedir.gpu_file(g.uuid), make=False)
        if fd is None:  # never leased here
            states[g.uuid] = (None, None, procs.get(g.uuid, []))
            continue
        try:
            if leasedir.try_lock(fd):
                holder, dead = None, leasedir.read_record(fd)
                leasedir.unlock(fd)
            else:
                holder, dead = leasedir.read_record(fd) or {"user": "?"}, None
        finally:
            os.close(fd)
        states[g.uuid] = (holder, dead, procs.get(g.uuid, []))
    return states


def sweep_dead(states, mine):
    """A dead run's leftovers on the GPUs this node may take (its supervisor SIGKILLed with its
    guardian, say, and a process that escaped the kernel's kill): this user's, found by the
    run's tags, KILLed now and no longer counted as their GPU's work. Another user's stay: their
    GPU is busy, named by pid and user. {run id: processes killed}."""
    nodes: dict[tuple[str, str], None] = {}
    for u in mine:
        holder, dead, _ = states[u]
        if holder is None and dead and dead.get("uid") == os.getuid():
            nodes[(str(dead.get("run_id")), str(dead.get("node")))] = None
    if not nodes:
        return {}
    from . import procs  # here: a dead run's leftovers are rare

    swept: dict[str, int] = {}
    killed = set()
    me = leasedir.user_name()
    for run_id, node in nodes:
        pids = [p for p in procs.tagged_pids({"DDPTUI_RUN_ID": run_id, "DDPTUI_NODE": node})
                if leasedir.user_of(p) == me]  # fmt: skip
        procs.signal_all(pids, signal.SIGKILL)
        swept[run_id] = swept.get(run_id, 0) + len(pids)
        killed.update(pids)
    for u in mine:
        holder, dead, on_it = states[u]
        states[u] = (holder, dead, [p for p in on_it if p[0] not in killed])
    return swept


def busy(state, policy):
    """Not held, yet running someone's work: what `busy_gpus` decides about."""
    holder, _, procs = state
    return holder is None and bool(procs) and policy != "share"


def claims(ahead, states):
    """The GPUs the launches waiting before this one claim, in their order: each its count
    among its candidates, free ones first, then held ones (and busy ones, if it waits for
    those too)."""
    claimed = set()
    for ticket in ahead:
        cands = [u for u in ticket.get("cands") or () if u in states and u not in claimed]
        policy = ticket.get("busy")
        free = [u for u in cands if states[u][0] is None and not busy(states[u], policy)]
        held = [u for u in cands if states[u][0] is not None]
        later = [u for u in cands if busy(states[u], policy)] if policy == "wait" else []
        n = ticket.get("count") if isinstance(ticket.get("count"), int) else 0
        claimed.update((free + held + later)[:n])
    return claimed


def choose(cands, count, states, claimed, policy):
    """(the UUIDs to take, or None; never: refused however long it waits, for busy GPUs)."""
    usable = [
        u for u in cands
        if states[u][0] is None and not busy(states[u], policy) and u not in claimed
    ]  # fmt: skip
    if len(usable) >= count:
        return usable[:count], False
    eventually = [u for u in cands if policy != "refuse" or not busy(states[u], policy)]
    return None, len(eventually) < count


# -- holding ----------------------------------------------------------------------------------


class Held:
    """The flocks of one node's GPUs on this host, and the record in each."""

    def __init__(self, fds, record, cvd, dead=()):
        self.fds, self.record, self.cvd, self.dead = fds, record, cvd, list(dead)

    def note(self, **changes):
        """The record changed in every GPU's file (the supervisor's pid, attached/detached)."""
        self.record.update(changes)
        for fd in self.fds:
            leasedir.write_record(fd, self.record)

    def give_back(self):
        """Cleared (a clean end, not a dead run's), then let go. Safe to call twice."""
        fds, self.fds = self.fds, []
        for fd in fds:
            leasedir.clear(fd)
            os.close(fd)

    def send(self, sock):
        """Handed over the socket (the agent to the node's supervisor): the flocks travel with
        their files, held all along; ours are closed once sent."""
        data = json.dumps({"record": self.record, "cvd": self.cvd}).encode()
        fds, self.fds = self.fds, []
        try:
            sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        finally:
            for fd in fds:
                os.close(fd)

    @classmethod
    def receive(cls, sock):
        data, anc, _, _ = sock.recvmsg(leasedir.RECORD_MAX * 2, socket.CMSG_SPACE(FDS_MAX * 4))
        fds = array.array("i")
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        found = json.loads(data.decode("utf-8"))
        return cls(list(fds), found["record"], found["cvd"])


def record(want, taken, mode="starting"):
    """What a held GPU's file says of its holder."""
    return {
        "user": leasedir.user_name(), "uid": os.getuid(), "pid": os.getpid(),
        "run_id": str(want["run_id"]), "node": int(want["node"]),
        "host": os.uname().nodename, "since": time.time(), "mode": mode,
        "launcher": str(want.get("launcher") or ""), "gpus": [g.index for g, _ in taken],
    }  # fmt: skip


def take(dir_fd, gpus, taken, want):
    """Take these [(GPU, device)] now (under the host's lock, just looked at): all, or none and
    a LeaseError."""
    rec = record(want, taken)
    fds, dead = [], []
    try:
        for g, _ in taken:
            fd = leasedir.open_shared(dir_fd, leasedir.gpu_file(g.uuid))
            fds.append(fd)
            if not leasedir.try_lock(fd):
                raise LeaseError("GPU {} was taken meanwhile".format(g.index))
            left = leasedir.read_record(fd)
            if left and left.get("run_id") != rec["run_id"]:
                dead.append(left)
            leasedir.write_record(fd, rec, "GPU {}'s lease file".format(g.index))
    except BaseException:
        Held(fds, rec, "").give_back()
        raise
    return Held(fds, rec, visible_value(gpus, taken), dead)


def take_now(want, smi=None):
    """A spare's supervisor takes its node's GPUs itself (no launch waits with it): a Held, None
    on a host without GPUs; a LeaseError saying why not (held, busy, or a queue before it)."""
    found = read_gpus(smi)
    if not found:
        return None
    gpus, apps = found
    cands = candidates(gpus, want)
    count = min(int(want.get("count") or len(cands)), len(cands))
    if not count:
        return None
    dir_fd = leasedir.open_dir()
    try:
        with leasedir.host_lock(dir_fd):
            states = look(dir_fd, gpus, apps)
            mine = [g.uuid for g, _ in cands]
            sweep_dead(states, mine)
            ahead = [
                r for _, r in leasedir.tickets(dir_fd) if set(r.get("cands") or ()) & set(states)
            ]
            uuids, _ = choose(mine, count, states, claims(ahead, states), want.get("busy"))
            if uuids is None:
                raise LeaseError(short_text(gpus, mine, states, ahead, want.get("busy")))
            return take(dir_fd, gpus, [c for c in cands if c[0].uuid in uuids], want)
    finally:
        os.close(dir_fd)


def short_text(gpus, mine, states, ahead, policy):
    """Why a node's GPUs cannot be taken, in a line (a spare passed over says it)."""
    index = {g.uuid: g.index for g in gpus}
    held: dict[str, Any] = {}
    for u in mine:
        holder = states[u][0]
        if holder is not None:
            who = "{}'s run {}".format(holder.get("user", "?"), holder.get("run_id", "?"))
            held.setdefault(who, []).append(str(index[u]))
    said = ["GPU {} held by {}".format(",".join(i), who) for who, i in held.items()]
    said += ["GPU {} busy (pid {} {})".format(index[u], *states[u][2][0][:2])
             for u in mine if busy(states[u], policy)]  # fmt: skip
    said += ["{}'s run {} waits first".format(t.get("user", "?"), t.get("run_id", "?"))
             for t in ahead]  # fmt: skip
    return "its GPUs are taken: " + "; ".join(said or ["none free"])


# -- the supervisor's side of a launch's lease -------------------------------------------------


def hand_over(held, connect, deadline):
    """The agent hands a launch's lease to the node's supervisor over its socket (`connect()`:
    a connection to it, None until it listens)."""
    while True:
        sock = connect()
        if sock is not None:
            break
        if time.monotonic() > deadline:
            raise LeaseError("the supervisor never listened for its GPUs' lease")
        time.sleep(0.01)
    try:
        held.send(sock)
    finally:
        sock.close()


def claim(spec, server):
    """The node's lease, before its job: handed over by the agent (a launch's), or taken here (a
    spare's); its CUDA_VISIBLE_DEVICES into the job's environment. None without GPUs to lease;
    a LeaseError says why not."""
    want = spec.get("lease")
    if not want:
        return None
    if want.get("handoff"):
        server.settimeout(HANDOFF_S)
        try:
            conn, _ = server.accept()
        except OSError:
            raise LeaseError("its GPUs' lease never came from the agent") from None
        finally:
            server.settimeout(None)
        try:
            uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                      struct.calcsize("3i")))[1]  # fmt: skip
            if uid != os.getuid():
                raise LeaseError("its GPUs' lease came from another user")
            held = Held.receive(conn)
        finally:
            conn.close()
    else:
        held = take_now(want)
    if held is not None:
        held.note(pid=os.getpid(), mode="detached" if spec.get("detached") else "attached")
        spec["env"] = dict(spec.get("env") or {}, **{gpuinfo.VAR: held.cvd})
    return held
