"""The supervisor: runs on each host for the length of a run and owns that host's part of the job.

It travels over the SSH channel (or a local pipe) and runs on the host's own python3 (>= 3.8),
standard library only; nothing is installed on the host. Protocol:

  stdin  (launcher → host): one JSON line with the spec, then control lines: "stop".
         EOF means the launcher is gone: stop the job.
  stdout (host → launcher): one JSON object per line:
         {"t": "started", "pid", "hostname", "ifname"}   the job is running
         {"t": "out", "s": 1|2, "d": "whole lines"}      the job's stdout (1) / stderr (2)
         {"t": "ranks", "ranks": [...], "world": N}       the global ranks found running here
         {"t": "exit", "code": N, "stopped": bool}       the job ended and nothing of it is left
         {"t": "error", "msg": "..."}                     the job could not start

Control never depends on SSH signals or on the channel closing (both unreliable, design §2): the
job runs in its own session with DDPTUI_RUN_ID and DDPTUI_NODE in its environment, inherited by
every process it starts (torchrun's workers too, which run in sessions of their own). To stop,
every process carrying both tags gets TERM, then KILL after a grace period. The supervisor is a
child subreaper, so the job's orphans stay its descendants.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

PR_SET_CHILD_SUBREAPER = 36
SIOCGIFADDR = 0x8915
CHUNK = 1 << 16
GATHER_S = 0.002  # what a lone line waits, at most, for the lines behind it


class Channel:
    """Writes protocol messages to the launcher; stays quiet once the launcher is gone."""

    def __init__(self):
        self.lock = threading.Lock()
        self.gone = threading.Event()

    def send(self, **msg):
        data = (json.dumps(msg, ensure_ascii=False) + "\n").encode("utf-8", "surrogateescape")
        with self.lock:
            if self.gone.is_set():
                return
            try:
                sys.stdout.buffer.write(data)
                sys.stdout.buffer.flush()
            except (BrokenPipeError, OSError):
                self.gone.set()


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    # The launcher going away must not kill us before we have cleaned up.
    for sig in (signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    spec = json.loads(sys.stdin.buffer.readline())
    chan = Channel()
    _become_subreaper()
    tags = {"DDPTUI_RUN_ID": spec["run_id"], "DDPTUI_NODE": str(spec["node"])}
    env = dict(os.environ)
    env.update(spec["env"])
    for name in spec.get("unset", ()):  # e.g. a LOCAL_RANK the host exports stops Lightning
        env.pop(name, None)
    ifname = None
    if spec.get("route_to"):
        ifname = route_ifname(spec["route_to"])
        for name in spec.get("ifname_vars", ()):
            if ifname and name not in spec["env"]:
                env[name] = ifname
    env.update(tags)
    cwd = os.path.expanduser(spec["workdir"]) if spec.get("workdir") else None
    try:
        proc = subprocess.Popen(
            spec["argv"],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        what = cwd if exc.filename == cwd else spec["argv"][0]
        chan.send(t="error", msg="cannot start {}: {}".format(what, exc.strerror))
        return 127
    chan.send(t="started", pid=proc.pid, hostname=socket.gethostname(), ifname=ifname)
    stop = threading.Event()
    pumps = [_thread(pump, proc.stdout, 1, chan), _thread(pump, proc.stderr, 2, chan)]
    _thread(watch_launcher, stop, chan)
    _thread(stop_on_request, stop, tags, spec.get("grace", 5.0))
    ended = threading.Event()
    watchers = []
    if spec.get("learn_ranks"):
        args = (proc.pid, tags, spec["node"], spec.get("nnodes", 1), chan, ended)
        watchers.append(_thread(watch_ranks, *args))
    code = proc.wait()
    ended.set()
    for t in watchers:  # its last word comes before "exit"
        t.join(timeout=5)
    # The job is over; whatever it left behind (daemons, orphaned workers) goes too.
    sweep(tags, spec.get("grace", 5.0))
    for t in pumps:
        t.join(timeout=5)
    if spec.get("scratch"):
        shutil.rmtree(spec["scratch"], ignore_errors=True)
    chan.send(t="exit", code=code, stopped=stop.is_set())
    return 0


def _thread(fn, *args):
    t = threading.Thread(target=fn, args=args, daemon=True)
    t.start()
    return t


def pump(pipe, stream, chan):
    """Relay whole lines; a partial line waits for its end (or EOF)."""
    fd = pipe.fileno()
    rest = b""
    while True:
        data = os.read(fd, CHUNK)
        if not data:
            break
        if len(data) < CHUNK // 4:
            # Lines trickle in one write each (torchrun tees line by line): let a burst
            # gather for a moment so it leaves as one message, not thousands.
            time.sleep(GATHER_S)
            if select.select([fd], [], [], 0)[0]:
                data += os.read(fd, CHUNK)
        data = rest + data
        cut = data.rfind(b"\n") + 1
        rest = data[cut:]
        if cut:
            chan.send(t="out", s=stream, d=data[:cut].decode("utf-8", "replace"))
        if len(rest) > CHUNK * 16:  # a runaway line without newline: pass it on anyway
            chan.send(t="out", s=stream, d=rest.decode("utf-8", "replace") + "\n")
            rest = b""
    if rest:
        chan.send(t="out", s=stream, d=rest.decode("utf-8", "replace") + "\n")


def watch_launcher(stop, chan):
    """A line "stop" asks for a clean stop; EOF means the launcher is gone."""
    for line in sys.stdin.buffer:
        if line.strip() == b"stop":
            stop.set()
    chan.gone.set()
    stop.set()


def stop_on_request(stop, tags, grace):
    stop.wait()
    sweep(tags, grace)


def sweep(tags, grace):
    """TERM every process carrying the tags, KILL what is left after `grace` seconds."""
    pids = tagged_pids(tags)
    _signal_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while pids and time.monotonic() < deadline:
        time.sleep(0.05)
        _reap()
        pids = tagged_pids(tags)
    while pids:
        _signal_all(pids, signal.SIGKILL)
        time.sleep(0.05)
        _reap()
        pids = tagged_pids(tags)
    _reap()


def watch_ranks(root, tags, node, nnodes, chan, ended):
    """Report the global ranks running here once they hold still over two scans.

    For styles where only the run reveals them (c10d, spawn, Lightning). A few cheap scans of
    /proc, further apart each time; none after the answer is sent or the job has ended.
    """
    last, delay = ([], None), 0.5  # type: tuple[list[int], int | None], float
    while not ended.wait(delay):
        found = ranks_here(root, tags, node, nnodes)
        if found[0] and found == last:
            break
        last, delay = found, min(delay * 1.5, 5.0)
    else:  # the job ended first (a short job on a busy host): report what was last seen
        found = last
    if found[0]:
        chan.send(t="ranks", ranks=found[0], world=found[1])


def ranks_here(root, tags, node, nnodes):
    """(global ranks, world size) of the job's processes on this host, ([], None) if unknown."""
    by_pid, world = ranks_by_pid(tags, node, nnodes, root)
    return sorted(by_pid.values()), world


def ranks_by_pid(tags, node, nnodes, root=None):
    """({pid: global rank}, world size) of the job's rank processes here, ({}, None) if unknown.

    root: the job's own process (the script itself in the spawn and env styles); found among
    the tagged processes when not given.
    """
    procs = [(pid, _environ(pid)) for pid in tagged_pids(tags)]
    # torchrun's workers (c10d, launch) carry their global rank.
    workers = [(pid, env) for pid, env in procs if "TORCHELASTIC_RUN_ID" in env and "RANK" in env]
    if workers:
        ranks = {pid: int(env["RANK"]) for pid, env in workers if _int(env["RANK"]) is not None}
        return ranks, _int(workers[0][1].get("WORLD_SIZE"))
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


def _environ(pid):
    try:
        with open("/proc/{}/environ".format(pid), "rb") as f:
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in data.split("\0") if "=" in item)


def _ppid(pid):
    try:
        with open("/proc/{}/stat".format(pid), "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _spawned(pid):
    """A multiprocessing 'spawn' child (torch.multiprocessing.spawn starts these)."""
    try:
        with open("/proc/{}/cmdline".format(pid), "rb") as f:
            return b"--multiprocessing-fork" in f.read().split(b"\0")
    except OSError:
        return False


def _int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def tagged_pids(tags):
    """Live processes whose environment carries every tag (zombies have an empty environ)."""
    want = {"{}={}".format(k, v).encode() for k, v in tags.items()}
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open("/proc/{}/environ".format(entry), "rb") as f:
                environ = set(f.read().split(b"\0"))
        except OSError:
            continue
        if want <= environ:
            found.append(int(entry))
    return found


def _signal_all(pids, sig):
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def _reap():
    """Collect exited children (ours and adopted orphans) so they stop showing as alive."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _become_subreaper():
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the environment sweep still finds everything


def route_ifname(addr):
    """The name of the interface this host uses to reach addr (what gloo and NCCL need)."""
    try:
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((addr, 9))  # UDP connect sends nothing; it only picks a route
            local = s.getsockname()[0]
    except OSError:
        return None
    return ifname_of(local)


def ifname_of(local_addr):
    import fcntl
    import struct

    if local_addr.startswith("127."):
        return "lo"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            req = struct.pack("256s", name.encode()[:15])
            try:
                got = fcntl.ioctl(s.fileno(), SIOCGIFADDR, req)
            except OSError:
                continue
            if socket.inet_ntoa(got[20:24]) == local_addr:
                return name
    return None


if __name__ == "__main__":
    code = main()
    # Leave without the interpreter's shutdown: watch_launcher's read holds stdin's lock, so a
    # normal exit waits 1 s for it, then aborts ("could not acquire lock ... at shutdown").
    os._exit(code)
