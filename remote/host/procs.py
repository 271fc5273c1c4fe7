"""A job's processes on its host: find them, learn their ranks, stop them, reap them.

Two ways to find what belongs to a job, used together:
- descent: the supervisor is a child subreaper, so every process the job starts stays its
  descendant, re-parented to it if its parent dies, whatever the process does to its environment
  (`env -i`, setproctitle, sudo keeps the tree too);
- tags: DDPTUI_RUN_ID and DDPTUI_NODE in the environment, inherited by everything the job starts,
  for what leaves the tree (a supervisor that died, a process that escaped before we adopted it).
"""

from __future__ import annotations

import collections
import contextlib
import os
import select
import signal
import threading
import time

TYPE_CHECKING = False  # typing's names cost import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Callable, Iterable, Mapping

PR_SET_CHILD_SUBREAPER = 36
KILL_WAIT_S = 5.0  # after KILL: what is still there then cannot be killed (D state)
RANK_POLL_S = 0.05  # how often the rank processes are looked at for the first to end
SYS_PIDFD_OPEN = 434  # the same number on every architecture (Linux >= 5.3)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


_LIBC: list[object] = []  # the loaded library, once


def libc():
    """The C library through ctypes, loaded once (a warm supervisor loads it ahead of its node:
    the import and the load are a few ms of every host's start)."""
    if not _LIBC:
        import ctypes

        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def become_subreaper() -> bool:
    """Whether this process now adopts its orphaned descendants (then its tree holds them all)."""
    try:
        return bool(libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False  # not Linux: the checks refuse such hosts


def all_pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def _stat(pid):
    """(command name, the fields after it) from /proc/PID/stat, or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    head, _, tail = data.rpartition(b")")
    return head.partition(b"(")[2], tail.split()


def stat(pid: int) -> tuple[str, int, str] | None:
    """(state letter, ppid, command name) from /proc/PID/stat, or None if gone."""
    got = _stat(pid)
    try:
        return got[1][0].decode(), int(got[1][1]), got[0].decode("utf-8", "replace")
    except (TypeError, IndexError, ValueError):
        return None


def zombie_code(pid: int) -> int | None:
    """How a process that ended, but was not waited for yet, ended (its parent, torchrun, reaps
    it a moment later): its exit code as subprocess says it (-N: signal N). None if it runs
    or is gone. /proc/PID/stat's 52nd field (Linux >= 3.5) is the status waitpid would give."""
    got = _stat(pid)
    try:
        return exit_code(int(got[1][49])) if got[1][0] == b"Z" else None
    except (TypeError, IndexError, ValueError):
        return None


def environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in data.split("\0") if "=" in item)


def tagged_pids(tags: Mapping[str, str], among: Iterable[int] | None = None) -> list[int]:
    """Live processes whose environment carries every tag (zombies have an empty environ).
    Every process on the host is read (byte searches, no parsing: a big host has thousands),
    or those `among`."""
    want = [f"\0{k}={v}\0".encode() for k, v in tags.items()]
    me = os.getpid()
    found = []
    for pid in all_pids() if among is None else among:
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = b"\0" + f.read() + b"\0"
        except OSError:
            continue
        if all(tag in env for tag in want):
            found.append(pid)
    return found


def descendants(root: int) -> list[int]:
    """Live (not zombie) descendants of root: each process's children as the kernel lists them
    (Linux >= 3.5), so the cost is the job's size, not the host's; else one pass over /proc."""
    found, todo = [], [root]
    while todo:
        kids = children(todo.pop())
        if kids is None:
            return _descendants_by_scan(root)
        kids = [pid for pid in kids if (stat(pid) or "Z")[0] != "Z"]
        found += kids
        todo += kids
    return found


def children(pid: int) -> list[int] | None:
    """pid's children, from each of its threads' `children` file; [] if it is gone, None where
    the kernel has no such file (CONFIG_PROC_CHILDREN)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    kids = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                kids += [int(k) for k in f.read().split()]
        except FileNotFoundError:
            if os.path.isdir(f"/proc/{pid}/task/{tid}"):
                return None  # the thread is there, its file is not: no such kernel support
        except OSError:
            continue
    return kids


def _descendants_by_scan(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid in all_pids():
        st = stat(pid)
        if st is not None and st[0] != "Z":
            children.setdefault(st[1], []).append(pid)
    found, todo = [], [root]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def job_pids(
    root: int | None, tags: Mapping[str, str] | None, exempt: Iterable[int] = ()
) -> list[int]:
    """Everything of the job: root's descendants and every tagged process, less `exempt`.
    No tags: the descendants alone (root is a subreaper: no orphan of the job escapes its tree,
    and a scan of every process on a big host is its cost)."""
    pids = set(tagged_pids(tags) if tags else ())
    if root is not None:
        pids.update(descendants(root))
    pids.difference_update(exempt)
    pids.discard(os.getpid())
    return sorted(pids)


def sweep(
    find: Callable[[], list[int]], grace: float, reap: Callable[[], object] | None = None
) -> list[str]:
    """TERM every process find() returns, KILL what is left after `grace` seconds.

    Returns what could not be killed, as "pid 1234 (python) in D state" texts: a process stuck
    in the kernel (a hung driver, NFS) ignores KILL, and a stop must still end.
    """
    reap = reap or reap_children
    pids = find()
    signal_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while pids and time.monotonic() < deadline:
        time.sleep(0.05)
        reap()
        pids = find()
    deadline = time.monotonic() + KILL_WAIT_S
    while pids and time.monotonic() < deadline:
        signal_all(pids, signal.SIGKILL)
        time.sleep(0.05)
        reap()
        pids = find()
    return [describe(pid) for pid in pids]


def describe(pid: int) -> str:
    st = stat(pid)
    if st is None:
        return f"pid {pid}"
    return f"pid {pid} ({st[2]}) in {st[0]} state"


def signal_all(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def reap_children(on_exit=None):
    """Collect exited children (ours and adopted orphans); on_exit(pid, code) for each."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if on_exit is not None:
            on_exit(pid, exit_code(status))


def exit_code(status: int) -> int:
    """As subprocess reports it: the exit status, or -N for death by signal N."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


class Reaper:
    """The one place a supervisor's children are waited for, for its whole life: Popen.wait
    could lose a status to another waitpid (then it reports 0 for a node that was stopped).
    Each exit code is kept a while for whoever waits on that child; on_exit(pid, code) hears
    of each first, under `cond` (held by whoever starts a child it must see reaped)."""

    KEPT = 1024  # exit codes of children kept for whoever waits on them

    def __init__(self, on_exit: Callable[[int, int | None], None]) -> None:
        self.on_exit = on_exit
        self.cond = threading.Condition()
        self.codes: collections.OrderedDict[int, int | None] = collections.OrderedDict()

    def run(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                time.sleep(0.1)
                continue
            code = exit_code(status)
            with self.cond:
                self.codes[pid] = code
                while len(self.codes) > self.KEPT:
                    self.codes.popitem(last=False)
                self.on_exit(pid, code)
                self.cond.notify_all()

    def wait(self, pid: int, timeout: float) -> int | None:
        """A child's exit code once reaped, taken; None if it still runs after `timeout`."""
        with self.cond:
            if not self.cond.wait_for(lambda: pid in self.codes, timeout):
                return None
            return self.codes.pop(pid)

    def code(self, pid: int, timeout: float) -> int | None:
        """A child's exit code, left for others too, once reaped (the reaper may be a moment
        behind its end); None past `timeout`."""
        with self.cond:
            self.cond.wait_for(lambda: pid in self.codes, timeout)
            return self.codes.get(pid)


# -- ranks ---------------------------------------------------------------------------------------


def own_descendants(root: int) -> list[int]:
    """root's live descendants that run as this user: what a supervisor started, and nothing a
    neighbour made look like it (a process of theirs may carry the run's tags)."""
    me = os.getuid()
    found = []
    for pid in descendants(root):
        try:
            if os.stat("/proc/{}".format(pid)).st_uid == me:
                found.append(pid)
        except OSError:
            continue
    return found


def ranks_by_pid(
    tags: Mapping[str, str], node: int, nnodes: int, root: int | None = None,
    among: Iterable[int] | None = None,
) -> tuple[dict[int, int], int | None]:  # fmt: skip
    """({pid: global rank}, world size) of the job's rank processes here, ({}, None) if unknown.

    root: the job's own process (the script itself in the spawn and env styles); found among
    the tagged processes when not given. among: the pids to look at (else every tagged one).
    """
    procs = [(pid, environ(pid)) for pid in (tagged_pids(tags) if among is None else among)]
    # torchrun's workers (c10d, launch) carry their global rank.
    workers = [(pid, env) for pid, env in procs if "TORCHELASTIC_RUN_ID" in env and "RANK" in env]
    if workers:
        ranks = {pid: _int(env["RANK"]) for pid, env in workers}
        ranks = {p: r for p, r in ranks.items() if r is not None}
        return _one_per_rank(ranks), _int(workers[0][1].get("WORLD_SIZE"))
    if root is None:
        pids = {pid for pid, _ in procs}
        root = next((pid for pid in sorted(pids) if _ppid(pid) not in pids), None)
    # Lightning's children carry LOCAL_RANK, NODE_RANK and the world size it computed; the
    # script itself is local rank 0. Its global rank = node rank x processes per node + local.
    for _, env in procs:
        world, node_rank = _int(env.get("WORLD_SIZE")), _int(env.get("NODE_RANK"))
        if "LOCAL_RANK" in env and world and node_rank is not None and nnodes:
            first = node_rank * (world // nnodes)
            ranks = {
                pid: first + (_int(e.get("LOCAL_RANK")) or 0)
                for pid, e in procs
                if "LOCAL_RANK" in e and _int(e.get("NODE_RANK")) == node_rank
            }
            if root is not None:
                ranks[root] = first
            return _one_per_rank(ranks), world
    # mp.spawn children of the script: their ranks are the scripts' usual convention, node
    # rank x processes + index, the index in the order they were started (nothing in their
    # environment says so).
    spawned = sorted(pid for pid, _ in procs if _ppid(pid) == root and _spawned(pid))
    if spawned:
        n = len(spawned)
        return {pid: node * n + i for i, pid in enumerate(spawned)}, n * nnodes
    return {}, None


def _one_per_rank(by_pid):
    """The rank processes, less their own children (a DataLoader's workers carry its rank)."""
    return {pid: r for pid, r in by_pid.items() if by_pid.get(_ppid(pid)) != r}


def ranks_here(root, tags, node, nnodes):
    """(sorted global ranks, world size) of the job's processes on this host."""
    by_pid, world = ranks_by_pid(tags, node, nnodes, root)
    return sorted(by_pid.values()), world


def watch_ranks(
    root: int, tags: Mapping[str, str], node: int, nnodes: int, ended: threading.Event,
    report: Callable[[list[int], int | None], None] | None = None, tree: int | None = None,
) -> dict[int, int]:  # fmt: skip
    """The rank processes here, {pid: global rank}, once they hold still over two scans
    ({} if the job ended first); report(ranks, world) is told them, for styles where only
    the run reveals them (c10d, spawn, Lightning). A few cheap scans of /proc, further apart
    each time; none after the answer or once the job has ended. tree: a subreaper above the
    job, whose descendants are all of it: only those are read, not every process.
    """
    last: tuple[dict[int, int], int | None] = ({}, None)
    delay = 0.5
    while not ended.wait(delay):
        among = None if tree is None else tagged_pids(tags, descendants(tree))
        found = ranks_by_pid(tags, node, nnodes, root, among)
        if found[0] and found == last:
            break
        last, delay = found, min(delay * 1.5, 1.0)  # a short job: its ranks seen before its end
    else:  # the job ended first (a short job on a busy host): report what was last seen
        found = last
    if found[0] and report is not None:
        report(sorted(found[0].values()), found[1])
    return found[0]


def first_end(
    by_pid: dict[int, int], over: Callable[[], bool], reaped: Callable[[int], int | None],
    poll: float = RANK_POLL_S,
) -> tuple[int, int | None, float] | None:  # fmt: skip
    """Which rank process ends first, and how: (global rank, exit code or None, time.time()),
    or None once over() (the job ended, or was told to stop: what follows is our doing).
    by_pid: {pid: rank}; reaped(pid): its exit code where the supervisor itself reaped it
    (the job's own process, or an orphan). Else its zombie's is read as it ends: a pidfd
    (Linux >= 5.3, any process) wakes us then, before its parent (torchrun, Lightning) reaps
    it; without one, a poll may come too late (None: torchrun's report may say)."""
    fds = {}
    waker = select.poll()
    for pid in by_pid:
        fd = pidfd(pid)
        if fd is not None:
            fds[fd] = pid
            waker.register(fd, select.POLLIN)
    try:
        while True:
            ended = over()  # looked at before the ranks: a rank ending with the job is seen
            gone = []
            for pid in by_pid:
                code, at = zombie_code(pid), time.time()
                if code is not None or not os.path.exists(f"/proc/{pid}"):
                    gone.append((by_pid[pid], code if code is not None else reaped(pid), at))
            if gone:
                return _first_of(gone)
            if ended:
                return None
            waker.poll(poll * 1000) if fds else time.sleep(poll)
    finally:
        for fd in fds:
            os.close(fd)


def _first_of(gone: list[tuple[int, int | None, float]]) -> tuple[int, int | None, float] | None:
    """The rank that ended first, of those found ended at one look (we were late: a busy
    host): one that died of its own (a peer's end only follows it), else none can be told."""
    if len(gone) == 1:
        return gone[0]
    own = [g for g in gone if own_death(g[1])]
    return own[0] if len(own) == 1 else None


def pidfd(pid):
    """A descriptor that becomes readable when process pid ends, or None (no pidfd_open)."""
    try:
        if hasattr(os, "pidfd_open"):  # python >= 3.9
            return os.pidfd_open(pid)
        fd = libc().syscall(SYS_PIDFD_OPEN, pid, 0)
        return fd if fd >= 0 else None
    except (OSError, AttributeError):
        return None


def describe_code(code: int | None) -> str:
    """`killed by SIGKILL`, `exit code 1` (as the launcher's remote/run/failures.py says it)."""
    if code is None or code >= 0:
        return "exit code {}".format(code)
    try:
        return "killed by {}".format(signal.Signals(-code).name)
    except ValueError:
        return "killed by signal {}".format(-code)


def own_death(code: int | None) -> bool:
    """A rank killed by a signal that no stop sends (TERM, INT, HUP: ours, or torchrun's
    passing ours on): SIGKILL (the OOM killer), SIGSEGV, SIGABRT... its own failure."""
    return code is not None and code < 0 and -code not in STOP_SIGNALS


def _ppid(pid):
    st = stat(pid)
    return st[1] if st else None


def _spawned(pid):
    """A multiprocessing 'spawn' child (torch.multiprocessing.spawn starts these)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"--multiprocessing-fork" in f.read().split(b"\0")
    except OSError:
        return False


def _int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None
