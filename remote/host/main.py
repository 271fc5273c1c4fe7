"""What one SSH exec of ddptui does on a host: one JSON command line on stdin says which.

  start   make the node's private directory, start the supervisor daemon there (it detaches
          itself), then relay this SSH session to it
  attach  relay this SSH session to a run's daemon; if it is gone, serve its spool instead
  sweep   stop whatever of a run is left on this host (its supervisor died), by its tags
  status  the state of some runs' nodes on this host

The private directory is <state>/ddptui/runs/<run id>/n<node>, mode 0700 all the way (state:
$XDG_STATE_HOME, else ~/.local/state). Every answer starts with wire.MARK, so whatever the login
shell or a python wrapper printed before is told apart from ddptui's own words.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import sys
import threading
import time

from . import daemon, procs, wire
from .spool import Spool

KEEP_DAYS = 14  # finished runs' directories on a host are removed after this long


def main(cmd):
    do = cmd.get("do")
    if do == "start":
        return start(cmd["spec"])
    if do == "attach":
        return attach(node_dir(cmd["run_id"], cmd["node"]))
    if do == "sweep":
        return answer(sweep(cmd))
    if do == "status":
        return answer(status(cmd["nodes"]))
    return answer({"error": f"unknown command {do!r}"})


def answer(msg):
    out = sys.stdout.buffer
    out.write(wire.MARK + wire.control(**msg))
    out.flush()
    return 0


# -- directories ---------------------------------------------------------------------------------


def state_root():
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(base, "ddptui")


def node_dir(run_id, node):
    return os.path.join(state_root(), "runs", run_id, f"n{node}")


def private_dirs(path):
    """Make path (under state_root) and ddptui's parents of it 0700; refuse another's."""
    root = state_root()
    os.makedirs(os.path.dirname(root), exist_ok=True)  # ~/.local/state: the user's own
    levels = [root] + [p for p in _parents(path) if len(p) > len(root)]
    for p in levels:
        with contextlib.suppress(FileExistsError):
            os.mkdir(p, 0o700)
        st = os.lstat(p)
        if st.st_uid != os.getuid() or not os.path.isdir(p) or os.path.islink(p):
            raise OSError(f"{p} is not a directory of this user's")
        if st.st_mode & 0o077:
            os.chmod(p, 0o700)


def _parents(path):
    out = [path]
    while os.path.dirname(out[-1]) != out[-1]:
        out.append(os.path.dirname(out[-1]))
    return list(reversed(out))


def prune(runs, keep_days=KEEP_DAYS):
    """Forget finished runs older than keep_days (best effort)."""
    cutoff = time.time() - keep_days * 86400
    try:
        names = os.listdir(runs)
    except OSError:
        return
    for name in names:
        run = os.path.join(runs, name)
        try:
            states = [read_state(os.path.join(run, n)) for n in os.listdir(run)]
            if states and all(s.get("ended") and s["ended"] < cutoff for s in states):
                shutil.rmtree(run, ignore_errors=True)
        except OSError:
            continue


def read_state(ndir):
    try:
        with open(os.path.join(ndir, daemon.STATE)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


# -- start ---------------------------------------------------------------------------------------


def start(spec):
    if not os.path.isdir("/proc/self"):  # the job's processes are found through /proc
        why = "ddptui needs Linux on the hosts: this is {} (no /proc)".format(sys.platform)
        return answer({"t": "error", "msg": why})
    ndir = node_dir(spec["run_id"], spec["node"])
    try:
        private_dirs(os.path.dirname(ndir))
        os.mkdir(ndir, 0o700)  # fresh: a directory already there is not ours to reuse
    except OSError as exc:
        return answer({"t": "error", "msg": f"cannot make {ndir}: {exc}"})
    prune(os.path.dirname(os.path.dirname(ndir)))
    os.chdir(ndir)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(daemon.SOCKET)  # relative: a deep home must not exceed sun_path's 108 bytes
    server.listen(16)
    r, w = os.pipe()
    if os.fork() == 0:  # the daemon: a grandchild in a session of its own, adopted by init
        os.close(r)
        os.setsid()
        os.umask(0o077)
        if os.fork():
            os._exit(0)
        _daemonize(ndir)
        said = []

        def ready(text):
            said.append(text)
            _say(w, text)

        code = 0
        try:
            daemon.Daemon(spec, ndir).serve(server, ready)
        except BaseException as exc:  # its log says why
            daemon.log(f"supervisor failed: {exc!r}")
            if not said:
                _say(w, f"supervisor failed: {exc!r}")
            code = 1
        os._exit(code)
    os.close(w)
    server.close()
    os.wait()  # the intermediate child, gone at once
    said = _read_all(r)
    if said != b"ok":
        return answer({"t": "error", "msg": said.decode("utf-8", "replace") or "supervisor died"})
    return attach(ndir)


def _daemonize(ndir):
    """Let go of the SSH session: its pipes must not be held open by the daemon."""
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDWR)
    logfd = os.open(
        os.path.join(ndir, "supervisor.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
    )
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.dup2(logfd, 2)
    os.close(null)
    os.close(logfd)
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115


def _say(fd, text):
    os.write(fd, text.encode())
    os.close(fd)


def _read_all(fd):
    data = b""
    while True:
        chunk = os.read(fd, 4096)
        if not chunk:
            return data
        data += chunk


# -- attach --------------------------------------------------------------------------------------


def attach(ndir):
    """Relay this session to the daemon's socket; with no daemon, serve what it left."""
    try:
        os.chdir(ndir)
    except OSError:
        return answer({"t": "error", "msg": f"no such run on this host ({ndir})"})
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(daemon.SOCKET)
    except OSError:
        return replay(ndir)
    out = sys.stdout.buffer
    out.write(wire.MARK)
    out.flush()
    return relay(sys.stdin.buffer.fileno(), out.fileno(), sock)


def relay(infd, outfd, sock):
    """Bytes both ways until the daemon hangs up (the launcher's EOF is passed on)."""
    sfd = sock.fileno()
    reading = [infd, sfd]
    while True:
        ready = select.select(reading, [], [])[0]
        if sfd in ready:
            data = sock.recv(1 << 18)
            if not data:
                return 0
            _write_all(outfd, data)
        if infd in ready:
            data = os.read(infd, 1 << 16)
            if data:
                sock.sendall(data)
            else:
                sock.shutdown(socket.SHUT_WR)
                reading.remove(infd)


def _readline(fd):
    """One line of stdin, read a byte at a time: nothing beyond it is taken from the pipe."""
    line = b""
    while not line.endswith(b"\n") and len(line) < 256:
        c = os.read(fd, 1)
        if not c:
            break
        line += c
    return line


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def replay(ndir):
    """The run's daemon is gone: send its spool from the asked offset, then its final state."""
    out = sys.stdout.buffer
    out.write(wire.MARK)
    out.flush()
    words = _readline(0).split()
    offset = int(words[1]) if words[:1] == [b"hello"] and len(words) > 1 else 0
    spool = Spool(ndir, 1 << 30, writable=False)
    spool.closed = True
    state = read_state(ndir)
    hello = {"node": state.get("node"), "run_id": state.get("run_id"), "live": False,
             "state": state, "spool_start": spool.start, "spool_end": spool.end}  # fmt: skip

    def send(data):
        _write_all(out.fileno(), data)

    daemon.send_spool(send, spool, offset, hello, 1.0, threading.Event())
    return 0


# -- sweep, status -------------------------------------------------------------------------------


def sweep(cmd):
    tags = {"DDPTUI_RUN_ID": cmd["run_id"], "DDPTUI_NODE": str(cmd["node"])}
    found = procs.tagged_pids(tags)
    left = procs.sweep(lambda: procs.tagged_pids(tags), cmd.get("grace", 5.0))
    return {"t": "swept", "found": len(found), "survivors": left}


def status(nodes):
    """{run_id: {node: state}} for [run_id, node] pairs; `alive` when its daemon answers."""
    found = {}
    for run_id, node in nodes:
        ndir = node_dir(run_id, node)
        state = read_state(ndir)
        if state:
            state["alive"] = _alive(ndir)
        found.setdefault(run_id, {})[str(node)] = state or None
    return {"t": "status", "runs": found}


def _alive(ndir):
    here = os.getcwd()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.chdir(ndir)  # a relative name: sun_path holds 108 bytes
        sock.connect(daemon.SOCKET)
        return True
    except OSError:
        return False
    finally:
        sock.close()
        os.chdir(here)
