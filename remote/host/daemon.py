"""The supervisor proper: a daemon on the host that owns one node's part of a run to its end.

It outlives any one SSH connection (launchers come and go, design §7): it starts the job in a
session of its own with the run's tags in its environment, is a child subreaper, spools every
byte the job prints (remote/host/spool.py), and serves viewers on a Unix socket in its private
directory, which `main.relay` reaches over SSH. It stops the job (TERM, grace, KILL) when
- a launcher says `stop`;
- the run is attached and no launcher has been heard from for link_timeout (the lease);
- the run's hub says so (another node failed or was lost; remote/host/hub.py).
When the job ends, whatever it left behind goes too, and the daemon leaves once its viewers
have the last byte (or after a while: the spool stays for a later `attach`).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

from . import hub as hubs
from . import linebuf, netif, procs, wire
from .spool import Spool, Trimmed

CHUNK = 1 << 16
GATHER_S = 0.002  # what a lone line waits, at most, for the lines behind it
SEND_MAX = 1 << 18  # spool bytes per wire frame
DRAIN_S = 10.0  # at the end, how long viewers get to take the last bytes
SOCKET = "ctl.sock"
STATE = "state.json"


def now_ms():
    return int(time.time() * 1000)


def _thread(fn, *args):
    t = threading.Thread(target=fn, args=args, daemon=True)
    t.start()
    return t


class Daemon:
    def __init__(self, spec, ndir):
        self.spec, self.dir = spec, ndir
        self.node, self.nnodes = spec["node"], len(spec["names"])
        self.tags = {"DDPTUI_RUN_ID": spec["run_id"], "DDPTUI_NODE": str(self.node)}
        self.grace = spec.get("grace", 5.0)
        self.link_timeout = spec.get("link_timeout", 60.0)
        self.beat = beat_interval(self.link_timeout)
        self.mode = "detached" if spec.get("detached") else "attached"
        self.spool = Spool(ndir, spec.get("spool_max", 1 << 30))
        self.heard = time.monotonic()  # the last word from any launcher
        self.lock = threading.Lock()
        self.clients = {}  # socket -> [last heard, done event]
        self.server = None  # the viewers' listening socket (serve)
        self.stop_once = threading.Lock()
        self.stop_evt = threading.Event()
        self.stop_by = self.stop_reason = self.stop_node = None
        self.survivors = []
        self.job = None
        self.job_code = None
        self.job_done = threading.Event()
        self.spare = {os.getpid()}  # never ours to stop (the guardian is added here)
        self.hub = self.link = None
        self.state = {"run_id": spec["run_id"], "node": self.node, "pid": os.getpid()}

    # -- records ------------------------------------------------------------------------------

    def note(self, **msg):
        self._append(wire.meta(now_ms(), **msg))

    def _append(self, data):
        trimmed = self.spool.append(data)
        if trimmed:  # said in the spool itself, so every viewer learns it in order
            self.spool.append(
                wire.meta(now_ms(), t="trimmed", bytes=trimmed, max=self.spool.max_bytes)
            )

    def save_state(self, **changes):
        self.state.update(changes, mode=self.mode, spool_end=self.spool.end)
        tmp = os.path.join(self.dir, STATE + ".tmp")
        with open(tmp, "w") as f:
            json.dump(self.state, f)
        os.replace(tmp, os.path.join(self.dir, STATE))

    # -- life ---------------------------------------------------------------------------------

    def serve(self, server, ready):
        """Run the node to its end; `ready(text)` tells the starter we are up (or why not)."""
        procs.become_subreaper()
        pid, self.guardian_pipe = guardian(self.tags, self.grace)
        self.spare.add(pid)
        if self.node == 0:
            self.hub = hubs.Hub(
                self.spec["secret"], self.spec["names"], self.link_timeout, self.beat,
                lambda why, node: self.stop("peer", why, node),
                self.spec["env"].get("MASTER_ADDR"),
            )  # fmt: skip
            self.hub.start()
        else:
            self.link = hubs.HubLink(
                self.spec["secret"], self.node, self.link_timeout, self.beat,
                lambda why, node: self.stop("peer", why, node),
            )  # fmt: skip
        self.server = server
        _thread(self._accept, server)
        self.save_state(status="starting", started=time.time())
        ready("ok")
        started = self._start_job()
        if not started:
            self._tell_hub("failed", f"node {self.node} could not start its job")
        else:
            _thread(self._watch_lease)
            _thread(self._stopper)
            self.job_done.wait()
            # The job is over; whatever it left behind (daemons, orphaned workers) goes too.
            self.survivors += procs.sweep(self._find, self.grace, reap=lambda: None)
            for t in started:
                t.join(timeout=5)
            self._finish()
        self._end()

    def _start_job(self):
        spec = self.spec
        env = dict(os.environ)
        env.update(spec["env"])
        for name in spec.get("unset", ()):  # e.g. a LOCAL_RANK the host exports stops Lightning
            env.pop(name, None)
        ifname = None
        if spec.get("route_to"):
            ifname = netif.route_ifname(spec["route_to"])
            for name in spec.get("ifname_vars", ()):
                if ifname and name not in spec["env"]:
                    env[name] = ifname
        # Every style: spawn and Lightning processes share one stdout, and torchrun's tee
        # writes every rank's lines from threads of one process (remote/host/linebuf.py).
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (self._sitecustomize(), env.get("PYTHONPATH")) if p
        )
        env.update(self.tags)
        argv = [expand(a) if i in spec.get("expand", ()) else a for i, a in enumerate(spec["argv"])]
        argv = [self.scratch() if a == spec.get("scratch_arg") else a for a in argv]
        mark = spec.get("scratch_arg")
        for name, value in list(env.items()):  # paths in it (the flight recorder's files)
            if mark and mark in value:
                env[name] = value.replace(mark, self.scratch())
        cwd = expand(spec["workdir"]) if spec.get("workdir") else None
        try:
            self.job = subprocess.Popen(
                argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            what = cwd if cwd and exc.filename == cwd else argv[0]
            self.note(t="error", msg=f"cannot start {what}: {exc.strerror}")
            self.save_state(status="failed", exit_code=127, ended=time.time())
            return None
        self.note(
            t="started", pid=self.job.pid, hostname=socket.gethostname(), ifname=ifname,
            hub_port=self.hub.port if self.hub else None, mode=self.mode,
            ranks=spec.get("ranks"),
        )  # fmt: skip
        self.save_state(status="running", job_pid=self.job.pid)
        threads = [
            _thread(self._pump, self.job.stdout, b"1"),
            _thread(self._pump, self.job.stderr, b"2"),
        ]
        _thread(self._reap)
        if spec.get("learn_ranks"):
            threads.append(_thread(self._watch_ranks))
        return threads

    def _finish(self):
        code = self.job_code
        stopped = self.stop_evt.is_set()
        if stopped:
            status = "lost" if self.stop_by == "lease" else "stopped"
        else:
            status = "succeeded" if code == 0 else "failed"
        reason = self.stop_reason or (
            None if code == 0 else "node {} ({}) failed: exit {}".format(
                self.node, self.spec["names"][self.node], code
            )
        )  # fmt: skip
        self.note(
            t="exit", code=code, stopped=stopped, by=self.stop_by, reason=reason,
            node=self.stop_node, survivors=self.survivors,
        )  # fmt: skip
        self.save_state(status=status, exit_code=code, by=self.stop_by, reason=reason,
                        survivors=self.survivors, ended=time.time())  # fmt: skip
        if self.scratch_dir:
            _rmtree(self.scratch_dir)
        self._tell_hub(status, reason)

    def _tell_hub(self, status, reason):
        if self.link is not None:
            self.link.end(status, reason)
        elif self.hub is not None:
            self.hub.own_end(status, reason)

    def _end(self):
        """Stay for the hub's peers and the viewers' last bytes, then leave."""
        if self.hub is not None:
            self.hub.all_ended.wait()
        elif self.link is not None:  # the hub must hear that we ended, or it waits for us
            self.link.delivered.wait(self.link_timeout)
        self.spool.close()
        _unlink(SOCKET)  # a later attach finds no daemon and is served the spool instead
        self._drain(time.monotonic() + DRAIN_S)
        os.write(self.guardian_pipe, b"k")  # a normal end: the guardian has nothing to do

    def _drain(self, deadline):
        """Until every viewer has its last bytes: those connected before the socket's name
        went too (an attach that came as the run ended), not only those seen so far."""
        while time.monotonic() < deadline:
            live = [done for _, done in list(self.clients.values()) if not done.is_set()]
            if live:
                live[0].wait(max(0.0, deadline - time.monotonic()))
            elif not select.select([self.server], [], [], 0.05)[0]:
                return  # no viewer left, none waiting to be let in

    # -- stopping -----------------------------------------------------------------------------

    def stop(self, by, reason, node=None):
        """Stop the job once; the first reason given is the one recorded. node: the node
        whose failure (or loss) this stop answers, when another node's."""
        with self.stop_once:
            if self.stop_evt.is_set() or self.job_done.is_set():
                return
            self.stop_by, self.stop_reason, self.stop_node = by, reason, node
            self.stop_evt.set()
        self.note(t="stopping", by=by, reason=reason, node=node)

    def _stopper(self):
        self.stop_evt.wait()
        self.survivors += procs.sweep(self._find, self.grace, reap=lambda: None)

    def _find(self):
        return procs.job_pids(os.getpid(), self.tags, spare=self.spare)

    def _watch_lease(self):
        while not self.job_done.wait(self.beat):
            silent = time.monotonic() - self.heard
            if self.mode == "attached" and silent > self.link_timeout:
                self.stop("lease", f"no launcher heard from for {silent:g} s (launcher gone or its "
                          "link down; detach to leave a run on its own)")  # fmt: skip
            for sock, (heard, _) in list(self.clients.items()):
                if time.monotonic() - heard > self.link_timeout:
                    _close(sock)  # a viewer behind a dead link: its relay must not linger

    # -- the job's processes ------------------------------------------------------------------

    scratch_dir = None

    def scratch(self):
        """A fresh private directory for torchrun's --log-dir, gone when the run ends."""
        if self.scratch_dir:  # one per run, however many places name it
            return self.scratch_dir
        import tempfile

        runtime = os.environ.get("XDG_RUNTIME_DIR")
        where = runtime if runtime and os.access(runtime, os.W_OK) else self.dir
        prefix = "ddptui-{}-n{}-".format(self.spec["run_id"], self.node)
        self.scratch_dir = tempfile.mkdtemp(prefix=prefix, dir=where)
        return self.scratch_dir

    def _sitecustomize(self):
        path = os.path.join(self.dir, "py")
        os.mkdir(path, 0o700)
        with open(os.path.join(path, "sitecustomize.py"), "w") as f:
            f.write(linebuf.SITECUSTOMIZE)
        return path

    def _reap(self):
        """The one place children are waited for: Popen.wait could lose the job's status to
        another waitpid (then it reports 0 for a node that was stopped)."""
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                if self.job_done.is_set():
                    return
                time.sleep(0.1)
                continue
            if pid == self.job.pid:
                self.job.returncode = self.job_code = procs.exit_code(status)
                self.job_done.set()

    def _pump(self, pipe, stream):
        """Spool whole lines; a partial line waits for its end (or EOF)."""
        fd = pipe.fileno()
        rest = b""
        while True:
            data = os.read(fd, CHUNK)
            if not data:
                break
            if len(data) < CHUNK // 4:
                # Lines trickle in one write each (torchrun tees line by line): let a burst
                # gather for a moment so it leaves as one record, not thousands.
                time.sleep(GATHER_S)
                if select.select([fd], [], [], 0)[0]:
                    data += os.read(fd, CHUNK)
            data = rest + data
            cut = data.rfind(b"\n") + 1
            rest = data[cut:]
            if cut:
                self._append(wire.record(stream, now_ms(), data[:cut]))
            if len(rest) >= wire.RECORD_MAX:  # a runaway line: pass it on in pieces
                pieces = split_line(rest)
                rest = pieces.pop()
                self._append(wire.record(stream, now_ms(), b"".join(pieces)))
        if rest:
            self._append(wire.record(stream, now_ms(), rest + b"\n"))

    def _watch_ranks(self):
        def report(ranks, world):
            self.note(t="ranks", ranks=ranks, world=world)

        procs.watch_ranks(self.job.pid, self.tags, self.node, self.nnodes, self.job_done, report)

    # -- viewers ------------------------------------------------------------------------------

    def _accept(self, server):
        while True:
            try:
                sock, _ = server.accept()
            except OSError:
                return
            done = threading.Event()
            self.clients[sock] = [time.monotonic(), done]  # before _drain can miss it
            _thread(self._client, sock, done)

    def _client(self, sock, done):
        rfile = sock.makefile("rb")
        try:
            words = rfile.readline(256).split()
            offset = int(words[1]) if words[:1] == [b"hello"] else 0
        except (OSError, ValueError, IndexError):
            offset = 0
        self.heard = time.monotonic()
        hello = {
            "node": self.node,
            "run_id": self.spec["run_id"],
            "mode": self.mode,
            "live": True,
            "spool_start": self.spool.start,
            "spool_end": self.spool.end,
        }
        _thread(self._send_spool, sock, offset, hello, done)
        try:
            for line in rfile:
                self.clients[sock][0] = self.heard = time.monotonic()
                self._command(line.split())
        except OSError:
            pass
        finally:
            done.set()
            self.clients.pop(sock, None)
            _close(sock)

    def _command(self, words):
        if not words:
            return
        verb = words[0]
        if verb == b"stop":
            self.stop("launcher", "stopped from the launcher")
        elif verb == b"detach":
            if self.mode != "detached":
                self.mode = "detached"
                self.note(t="mode", mode="detached")
                self.save_state()
        elif verb == b"attach":  # a launcher takes the run back on its lease
            if self.mode != "attached" and not self.job_done.is_set():
                self.mode = "attached"
                self.note(t="mode", mode="attached")
                self.save_state()
        elif verb == b"hub" and self.link is not None and len(words) == 3:
            self.link.connect(words[1].decode(), int(words[2]))

    def _send_spool(self, sock, offset, hello, done):
        def send(data):
            sock.sendall(data)

        try:
            send_spool(send, self.spool, offset, hello, self.beat, done)
        except OSError:
            pass
        finally:
            done.set()


def send_spool(send, spool, offset, hello, beat, done):
    """Everything from `offset` on, then live, until the spool closes (or `done`)."""
    send(wire.control(t="hello", **hello))
    while not done.is_set():
        try:
            chunk = spool.read(offset, SEND_MAX)
        except Trimmed as gone:
            send(wire.control(t="trimmed", missed=gone.start - offset, at=gone.start))
            offset = gone.start
            continue
        if chunk:
            send(wire.data_frame(offset, chunk))
            offset += len(chunk)
        elif spool.closed:
            send(wire.control(t="eof", end=offset))
            return
        elif not spool.wait(offset, beat) and not spool.closed:
            send(wire.control(t="hb"))


def beat_interval(link_timeout: float) -> float:
    """Heartbeats often enough that a few lost ones never end a lease."""
    return min(5.0, max(0.2, link_timeout / 6.0))


def split_line(data):
    """A line too long for one record, cut into pieces that each end a line; a torchrun rank
    prefix is repeated on each piece so they stay that rank's. The last element is the rest."""
    prefix = b""
    if data.startswith(b"[") and b"]:" in data[:12]:
        prefix = data[: data.index(b"]:") + 2]
    size = wire.RECORD_MAX - len(prefix)
    pieces = [data[:size] + b"\n"]
    data = data[size:]
    while len(data) >= size:
        pieces.append(prefix + data[:size] + b"\n")
        data = data[size:]
    pieces.append(prefix + data if data else b"")
    return pieces


def expand(path):
    """`~` and `~user` as the host's shell would (design: paths in the inventory)."""
    return os.path.expanduser(path)


def guardian(tags, grace):
    """A tiny watcher that sweeps the job by its tags if this daemon dies (OOM, SIGKILL).

    Returns its pid and the pipe to write b"k" into on a normal end."""
    r, w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(r)
        return pid, w
    try:
        os.closerange(3, r)  # the spool, the control socket: those must die with the daemon
        os.closerange(r + 1, 1 << 16)
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        got = os.read(r, 1)  # b"" (EOF): the daemon died without saying goodbye
        if not got:
            procs.sweep(lambda: procs.tagged_pids(tags), grace)
    finally:
        os._exit(0)


def _close(sock):
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def _unlink(path):
    with contextlib.suppress(OSError):
        os.unlink(path)


def _rmtree(path):
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def log(text):
    sys.stderr.write("{} {}\n".format(time.strftime("%Y-%m-%d %H:%M:%S"), text))
    sys.stderr.flush()
