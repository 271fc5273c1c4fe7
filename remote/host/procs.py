"""A job's processes on its host: find them, learn their ranks, stop them, reap them.

Two ways to find what belongs to a job, used together (design §2):
- descent: the supervisor is a child subreaper, so every process the job starts stays its
  descendant, re-parented to it if its parent dies, whatever the process does to its environment
  (`env -i`, setproctitle, sudo keeps the tree too);
- tags: DDPTUI_RUN_ID and DDPTUI_NODE in the environment, inherited by everything the job starts,
  for what leaves the tree (a supervisor that died, a process that escaped before we adopted it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

PR_SET_CHILD_SUBREAPER = 36
KILL_WAIT_S = 5.0  # after KILL: what is still there then cannot be killed (D state)


def become_subreaper():
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the checks refuse such hosts


def all_pids():
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def stat(pid):
    """(state letter, ppid, command name) from /proc/PID/stat, or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    head, _, tail = data.rpartition(b")")
    fields = tail.split()
    try:
        return (
            fields[0].decode(),
            int(fields[1]),
            head.partition(b"(")[2].decode("utf-8", "replace"),
        )
    except (IndexError, ValueError):
        return None


def environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in data.split("\0") if "=" in item)


def tagged_pids(tags):
    """Live processes whose environment carries every tag (zombies have an empty environ)."""
    want = {f"{k}={v}".encode() for k, v in tags.items()}
    me = os.getpid()
    found = []
    for pid in all_pids():
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = set(f.read().split(b"\0"))
        except OSError:
            continue
        if want <= env:
            found.append(pid)
    return found


def descendants(root):
    """Live (not zombie) descendants of root, from one pass over /proc."""
    children = {}
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


def job_pids(root, tags, spare=()):
    """Everything of the job: root's descendants and every tagged process, less `spare`."""
    pids = set(tagged_pids(tags))
    if root is not None:
        pids.update(descendants(root))
    pids.difference_update(spare)
    pids.discard(os.getpid())
    return sorted(pids)


def sweep(find, grace, reap=None):
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


def describe(pid):
    st = stat(pid)
    if st is None:
        return f"pid {pid}"
    return f"pid {pid} ({st[2]}) in {st[0]} state"


def signal_all(pids, sig):
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


def exit_code(status):
    """As subprocess reports it: the exit status, or -N for death by signal N."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


# -- ranks ---------------------------------------------------------------------------------------


def own_descendants(root):
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


def ranks_by_pid(tags, node, nnodes, root=None, among=None):
    """({pid: global rank}, world size) of the job's rank processes here, ({}, None) if unknown.

    root: the job's own process (the script itself in the spawn and env styles); found among
    the tagged processes when not given. among: the pids to look at (else every tagged one).
    """
    procs = [(pid, environ(pid)) for pid in (tagged_pids(tags) if among is None else among)]
    # torchrun's workers (c10d, launch) carry their global rank.
    workers = [(pid, env) for pid, env in procs if "TORCHELASTIC_RUN_ID" in env and "RANK" in env]
    if workers:
        ranks = {pid: _int(env["RANK"]) for pid, env in workers}
        return {p: r for p, r in ranks.items() if r is not None}, _int(
            workers[0][1].get("WORLD_SIZE")
        )
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
            return ranks, world
    # mp.spawn children of the script: their ranks are the scripts' usual convention, node
    # rank x processes + index, the index in the order they were started (nothing in their
    # environment says so).
    spawned = sorted(pid for pid, _ in procs if _ppid(pid) == root and _spawned(pid))
    if spawned:
        n = len(spawned)
        return {pid: node * n + i for i, pid in enumerate(spawned)}, n * nnodes
    return {}, None


def ranks_here(root, tags, node, nnodes):
    """(sorted global ranks, world size) of the job's processes on this host."""
    by_pid, world = ranks_by_pid(tags, node, nnodes, root)
    return sorted(by_pid.values()), world


def watch_ranks(root, tags, node, nnodes, ended, report):
    """report(ranks, world) once the ranks running here hold still over two scans.

    For styles where only the run reveals them (c10d, spawn, Lightning). A few cheap scans
    of /proc, further apart each time; none after the answer or once the job has ended.
    """
    last, delay = ([], None), 0.5
    while not ended.wait(delay):
        found = ranks_here(root, tags, node, nnodes)
        if found[0] and found == last:
            break
        last, delay = found, min(delay * 1.5, 5.0)
    else:  # the job ended first (a short job on a busy host): report what was last seen
        found = last
    if found[0]:
        report(found[0], found[1])


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
