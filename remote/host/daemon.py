"""The supervisor proper: a daemon on the host that owns one node's part of a run to its end.

The agent's `start` op runs it as a fresh interpreter (`boot`), which detaches at once. It
outlives any one SSH connection (launchers come and go, design §7): it starts the job in a
session of its own with the run's tags in its environment, is a child subreaper, spools every
byte the job prints (remote/host/spool.py; in the torchrun styles each rank's files, read by
remote/host/tail.py), and serves viewers on a Unix socket in its private directory, which an
agent's relay reaches (remote/host/nodes.py). It stops the job (TERM, grace, KILL) when
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

from . import container, linebuf, netif, procs, protocol, wire
from . import hub as hubs
from .protocol import beat_interval
from .spool import Spool, Trimmed
from .state import STATE
from .tail import RankTail

CHUNK = 1 << 16
GATHER_S = 0.002  # what a lone line waits, at most, for the lines behind it
SEND_MAX = 1 << 18  # spool bytes per wire frame
DRAIN_S = 10.0  # at the end, how long viewers get to take the last bytes
SOCKET = "ctl.sock"
# This host's ddptui code (the directory holding ddph/): ddptui's own workers run from it.
CODE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ACCEPT_BACKOFF_S = (0.05, 2.0)  # out of file descriptors: wait, then take viewers again


def boot(ndir):
    """The supervisor's own process (remote/host/nodes.py starts it): the spec on stdin; "ok"
    (or why not) on stdout once it serves, then detached from everything of the agent's."""
    try:
        spec = protocol.spec(json.loads(sys.stdin.buffer.read()))
        os.chdir(ndir)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(SOCKET)  # relative: a deep home must not exceed sun_path's 108 bytes
        server.listen(64)
    except (OSError, ValueError) as exc:
        os.write(1, "cannot start the supervisor: {}".format(exc).encode())
        os._exit(1)
    if os.fork():  # the agent waits for this parent; the daemon goes on, adopted by init
        os._exit(0)
    os.umask(0o077)
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    # "ok" goes on a descriptor of its own, closed once said: the agent reads to EOF, and the
    # guardian and the job (forked before and after) must hold no copy of it.
    said_fd = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.set_inheritable(said_fd, False)
    said = []

    def ready(text):
        said.append(text)
        os.write(said_fd, text.encode())
        os.close(said_fd)

    code = 0
    try:
        Daemon(spec, ndir).serve(server, ready)
    except BaseException as exc:  # its log says why
        log("supervisor failed: {!r}".format(exc))
        if not said:
            ready("supervisor failed: {!r}".format(exc))
        code = 1
    os._exit(code)


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
        self.grace = spec["grace"]
        self.link_timeout = spec["link_timeout"]
        self.beat = beat_interval(self.link_timeout)
        self.mode = "detached" if spec["detached"] else "attached"
        self.spool = Spool(ndir, spec["spool_max"])
        self.heard = time.monotonic()  # the last word from any launcher
        self.lock = threading.Lock()
        self.clients = {}  # socket -> [last heard, done event]
        self.server = None  # the viewers' listening socket (serve)
        self.closing = False  # the daemon is leaving: its accept loop ends
        self.stop_once = threading.Lock()
        self.stop_evt = threading.Event()
        self.stop_by = self.stop_reason = self.stop_node = None
        self.survivors = []
        self.job = None
        self.job_code = None
        self.stderr_tail = b""  # the job's last words (a container that did not start says why)
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
                wire.meta(now_ms(), t=protocol.TRIMMED, bytes=trimmed, max=self.spool.max_bytes)
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
        box = self.spec["container"]
        pid, self.guardian_pipe = guardian(self.tags, self.grace, box and box["runtime"])
        self.spare.add(pid)
        if self.node == 0:
            self.hub = hubs.Hub(
                self.spec["secret"], self.spec["names"], self.link_timeout, self.beat,
                lambda why, node: self.stop(protocol.BY_PEER, why, node),
                self.spec["master_addr"],
            )  # fmt: skip
            self.hub.start()
        else:
            self.link = hubs.HubLink(
                self.spec["secret"], self.node, self.link_timeout, self.beat,
                lambda why, node: self.stop(protocol.BY_PEER, why, node),
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
            self._sweep_containers()
            for t in started:
                t.join(timeout=5)
            self._finish()
        self._end()

    def _start_job(self):
        spec = self.spec
        box = spec["container"]
        env = {} if box else dict(os.environ)  # a container starts from its image's own
        env.update(spec["env"])
        for name in spec["unset"]:  # e.g. a LOCAL_RANK the host exports stops Lightning
            env.pop(name, None)
        ifname = None
        if spec["route_to"]:
            ifname = netif.route_ifname(spec["route_to"])
            for name in spec["ifname_vars"]:
                if ifname and name not in spec["env"]:
                    env[name] = ifname
        if spec["line_buffer"]:  # spawn and Lightning: a node's processes share one stdout
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (self._sitecustomize(), env.get("PYTHONPATH")) if p
            )
        env.update(self.tags)
        argv = [expand(a) if i in spec["expand"] else a for i, a in enumerate(spec["argv"])]
        mark = spec["scratch_arg"]
        argv = [self.scratch() if a == mark else a.replace(protocol.CODE, CODE_DIR) for a in argv]
        for name, value in list(env.items()):  # paths in it (the flight recorder's files)
            if mark and mark in value:
                env[name] = value.replace(mark, self.scratch())
        cwd = expand(spec["workdir"]) if spec["workdir"] else None
        stdin = subprocess.DEVNULL
        if box:  # the runtime's client; the job's environment reaches it by -e
            argv, env = self._in_container(box, argv, env, cwd)
            stdin, cwd = subprocess.PIPE, None  # the job's own cwd is inside
        try:
            self.job = subprocess.Popen(
                argv, cwd=cwd, env=env, stdin=stdin,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            what = cwd if cwd and exc.filename == cwd else argv[0]
            self.note(t=protocol.ERROR, msg=f"cannot start {what}: {exc.strerror}")
            self.save_state(status="failed", exit_code=127, ended=time.time())
            return None
        self.note(
            t=protocol.STARTED, pid=self.job.pid, hostname=socket.gethostname(), ifname=ifname,
            hub_port=self.hub.port if self.hub else None, mode=self.mode, ranks=spec["ranks"],
        )  # fmt: skip
        runtime = box and box["runtime"]
        self.save_state(status="running", job_pid=self.job.pid, scratch=self.scratch_dir,
                        container=self._container_name(), runtime=runtime)  # fmt: skip
        threads = [
            _thread(self._pump, self.job.stdout, b"1"),
            _thread(self._pump, self.job.stderr, b"2"),
        ]
        _thread(self._reap)
        if spec["tail_ranks"]:  # torchrun's --redirects: each rank's own files
            tail = RankTail(self.scratch(), spec["ranks"], self.tags, self._spool_lines)
            threads.append(_thread(tail.run, self.job_done))
        if spec["learn_ranks"]:
            threads.append(_thread(self._watch_ranks))
        return threads

    def _spool_lines(self, stream, data):
        self._append(wire.record(stream, now_ms(), data))

    def _in_container(self, box, argv, env, cwd):
        """The runtime's argv and environment for the node's command: one attached container,
        its shim ending the job when the container's stdin closes (remote/host/container.py,
        shim.py)."""
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "shim.py"), encoding="utf-8") as f:
            source = f.read()
        path = os.path.join(self.dir, container.SHIM)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(source)
        shared = [self.scratch()] + ([CODE_DIR] if any(CODE_DIR in a for a in argv) else [])
        return container.command(
            box, argv, env, self.spec["run_id"], self.node, cwd, self.dir, grace=self.grace,
            shared=shared,
        )  # fmt: skip

    def _container_name(self):
        box = self.spec["container"]
        if not box or box["runtime"] not in container.DAEMONS:
            return None
        return container.name(self.spec["run_id"], self.node)

    def _job_ended(self, code):
        """The job's exit code as subprocess gives it (-N: signal N), or why its container did
        not start at all (then no rank failed: the runtime's own words)."""
        box = self.spec["container"]
        if not box:
            return code, None
        started = os.path.exists(os.path.join(self.dir, container.READY))
        said = self.stderr_tail.decode("utf-8", "replace")
        why = container.start_failure(box, code, said, started)
        if box["runtime"] in container.DAEMONS and 128 < code < 160:
            code = -(code - 128)  # docker and podman say 128+N for a signal
        return code, why

    def _finish(self):
        code, not_started = self._job_ended(self.job_code)
        if not_started:
            self.note(t=protocol.ERROR, msg=not_started)
            self.save_state(status="failed", exit_code=code, reason=not_started, ended=time.time())
            self._tell_hub("failed", not_started)
            return
        stopped = self.stop_evt.is_set()
        if stopped:
            status = "lost" if self.stop_by == protocol.BY_LEASE else "stopped"
        else:
            status = "succeeded" if code == 0 else "failed"
        reason = self.stop_reason or (
            None if code == 0 else "node {} ({}) failed: exit {}".format(
                self.node, self.spec["names"][self.node], code
            )
        )  # fmt: skip
        self.note(
            t=protocol.EXIT, code=code, stopped=stopped, by=self.stop_by, reason=reason,
            node=self.stop_node, survivors=self.survivors,
        )  # fmt: skip
        self.save_state(status=status, exit_code=code, by=self.stop_by, reason=reason,
                        survivors=self.survivors, ended=time.time())  # fmt: skip
        if self.scratch_dir:
            _rmtree(self.scratch_dir)
        self._tell_hub(status, reason)

    def _sweep_containers(self):
        box = self.spec["container"]
        if box:
            _, why = container.sweep(box["runtime"], self.spec["run_id"])
            if why:
                self.survivors.append("containers of the run: {}".format(why))

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
        self.closing = True
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
        self.note(t=protocol.STOPPING, by=by, reason=reason, node=node)

    def _stopper(self):
        self.stop_evt.wait()
        if self.spec["container"] and self.job.stdin:
            with contextlib.suppress(OSError):
                self.job.stdin.close()  # the shim in the container ends the job
        self.survivors += procs.sweep(self._find, self.grace, reap=lambda: None)

    def _find(self):
        return procs.job_pids(os.getpid(), self.tags, spare=self.spare)

    def _watch_lease(self):
        while not self.job_done.wait(self.beat):
            silent = time.monotonic() - self.heard
            if self.mode == "attached" and silent > self.link_timeout:
                why = f"no launcher heard from for {silent:g} s (launcher gone or its link down; "
                self.stop(protocol.BY_LEASE, why + "detach to leave a run on its own)")
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
            if stream == b"2":
                self.stderr_tail = (self.stderr_tail + data)[-4096:]
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
            self.note(t=protocol.RANKS, ranks=ranks, world=world)

        procs.watch_ranks(self.job.pid, self.tags, self.node, self.nnodes, self.job_done, report)

    # -- viewers ------------------------------------------------------------------------------

    def _accept(self, server):
        """Viewers, for as long as the daemon lives: out of file descriptors or threads (a
        flood, a busy host), it says so, waits and goes on; it never stops taking them."""
        pause = ACCEPT_BACKOFF_S[0]
        while not self.closing:
            try:
                sock, _ = server.accept()
                done = threading.Event()
                self.clients[sock] = [time.monotonic(), done]  # before _drain can miss it
                _thread(self._client, sock, done)
                pause = ACCEPT_BACKOFF_S[0]
            except (OSError, RuntimeError) as exc:
                if self.closing:
                    return
                log(f"viewers: {exc!r}; taking them again in {pause:g} s")
                time.sleep(pause)
                pause = min(pause * 2, ACCEPT_BACKOFF_S[1])

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
        verb = words[0].decode("ascii", "replace")
        if verb == protocol.SAY_STOP:
            self.stop(protocol.BY_LAUNCHER, "stopped from the launcher")
        elif verb in (protocol.SAY_DETACH, protocol.SAY_ATTACH):
            mode = "detached" if verb == protocol.SAY_DETACH else "attached"
            # attach: a launcher takes the run back on its lease (not once the job has ended)
            if self.mode != mode and (mode == "detached" or not self.job_done.is_set()):
                self.mode = mode
                self.note(t=protocol.MODE, mode=mode)
                self.save_state()
        elif verb == protocol.SAY_HUB and self.link is not None and len(words) == 3:
            with contextlib.suppress(ValueError):
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
    send(wire.control(t=protocol.STREAM_HELLO, **hello))
    while not done.is_set():
        try:
            chunk = spool.read(offset, SEND_MAX)
        except Trimmed as gone:
            send(wire.control(t=protocol.TRIMMED, missed=gone.start - offset, at=gone.start))
            offset = gone.start
            continue
        if chunk:
            send(wire.data_frame(offset, chunk))
            offset += len(chunk)
        elif spool.closed:
            send(wire.control(t=protocol.EOF, end=offset))
            return
        elif not spool.wait(offset, beat) and not spool.closed:
            send(wire.control(t=protocol.HEARTBEAT))


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


def guardian(tags, grace, runtime=None):
    """A tiny watcher that sweeps the job by its tags if this daemon dies (OOM, SIGKILL), and the
    run's containers with it (runtime: docker's or podman's outlive their client).

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
            if runtime:
                container.sweep(runtime, tags["DDPTUI_RUN_ID"])
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
