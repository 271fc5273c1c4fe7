"""A host's part of runs: start a node's supervisor, relay its stream, sweep it, say its state.

Ops of the agent (remote/host/agent.py):

  start   make the node's private directory, start its supervisor there (remote/host/daemon.py,
          a daemon of its own that outlives this SSH session), then relay its stream
  attach  relay a running node's stream; if its supervisor is gone, serve what its spool kept
  sweep   stop what is left of a node by its tags (its supervisor died)
  status  the state of some runs' nodes on this host
  port    a free TCP port (job.master_port: auto)

The supervisor is a fresh interpreter, not a fork of the agent: the agent runs threads, and a
fork would inherit whatever lock one of them held. Its stream is reached through its Unix socket
(a relative name, through /proc/self/fd: a deep home must not exceed sun_path's 108 bytes).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time

from . import prefork, procs, protocol, state
from .common import close

TYPE_CHECKING = False  # typing's names cost import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any

START_TIMEOUT = 60.0  # seconds the supervisor may take to say it is up
DAEMON_BOOT = "import sys;sys.path.insert(0,sys.argv[1]);from ddph import boot;boot.daemon()"
# ((code_dir, run_id), process, early spec or None): supervisors started ahead of their node
_warm: list[tuple[tuple[str, str], subprocess.Popen[bytes], dict[str, object] | None]] = []


def warm(code_dir: str, run_id: str, early: dict[str, object] | None = None) -> None:
    """Start a supervisor while the launch's checks run (the probe asks for it): the start then
    only hands it its node. An interpreter and its imports are most of a start's CPU, paid here
    while the host waits on its peers' checks. Given its node's early spec (protocol.EARLY), it
    goes on and prepares the node (remote/host/boot.py), all but the job. It leaves,
    unused and leaving nothing, with the agent (its stdin ends). One waits at most: a
    dashboard's launch that failed its checks leaves its own to the next launch, which ends it."""
    key = (code_dir, run_id)
    for i, (held, proc, said) in reversed(list(enumerate(_warm))):
        if held == key and _alive(proc, said) and said == early:
            return
        del _warm[i]
        _end(proc)
    proc = _boot(code_dir, run_id)
    if isinstance(proc, str):
        return
    if early is not None:
        try:
            _tell(proc, _node_dir(early), early)
        except OSError:
            _end(proc)  # the start will say why, if it comes
            return
    _warm.append((key, proc, early))


def _boot(code_dir, run_id):
    """A supervisor's interpreter, waiting on its stdin for its node (remote/host/boot.py); or
    why it could not start. The run's id is in its command line for `ps` (and for whoever
    looks for a run's supervisors); the boot reads its node from stdin alone. The agent's
    prefork (remote/host/prefork.py) where it has one, else a fresh interpreter."""
    # -S: the supervisor needs the standard library and its own code only; a host's site
    # (a venv's .pth files, conda's) costs each start tens of ms of CPU, times every node
    argv = [sys.executable, "-S", "-c", DAEMON_BOOT, code_dir, run_id]
    proc = prefork.take(argv, code_dir)
    if proc is not None:
        return proc
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True,
            close_fds=True,
        )  # fmt: skip
    except OSError as exc:
        return "cannot start the supervisor: {}".format(exc.strerror)


def _node_dir(early):
    """The node's private directory, made fresh: one already there is not ours to reuse."""
    ndir = state.node_dir(early["run_id"], early["node"], early["attempt"])
    state.private_dirs(os.path.dirname(ndir))
    os.mkdir(ndir, 0o700)
    return ndir


def _tell(proc, ndir, early):
    """The supervisor's node: its directory and its early spec; it prepares from there."""
    proc.stdin.write(json.dumps(ndir).encode() + b"\n" + json.dumps(early).encode() + b"\n")
    proc.stdin.flush()


def _alive(proc, early):
    """A plain warm one lives while its process does; a prepared one (its first process gone,
    its daemon waiting) while it has said nothing (an error, or its end)."""
    if early is None:
        return proc.poll() is None
    return not select.select([proc.stdout], [], [], 0)[0]


def _take_warm(code_dir, early):
    """The one waiting for this node (prepared for it, or for none); another ends. One
    prepared for it is taken even if it failed there: its words say why (the start's answer)."""
    while _warm:
        key, proc, said = _warm.pop()
        if key == (code_dir, early["run_id"]) and said == early:
            return proc, True
        if key == (code_dir, early["run_id"]) and said is None and _alive(proc, said):
            return proc, False
        _end(proc)  # another run's or node's (its checks failed), or it died
    return None, False


def _end(proc):
    with contextlib.suppress(OSError):
        proc.stdin.close()  # a prepared daemon hears that no go comes, and leaves
    proc.kill()
    proc.wait()


def start(ch: Any, req: dict[str, Any], code_dir: str | None, sources: dict[str, str]) -> None:
    spec = req["spec"]
    if not os.path.isdir("/proc/self"):  # the job's processes are found through /proc
        return _error(ch, f"ddptui needs Linux on the hosts: this is {sys.platform} (no /proc)")
    try:
        spec = protocol.spec(spec)
    except protocol.SpecError as exc:
        return _error(ch, "this host's ddptui does not understand the launcher's: {}".format(exc))
    why = spawn(spec, code_dir, sources)
    if why:
        return _error(ch, why)
    relay(ch, state.node_dir(spec["run_id"], spec["node"], spec["attempt"]))


def _error(ch: Any, msg: str) -> None:
    ch.answer({"t": protocol.ERROR, "msg": msg})


def _keep_code(ndir, sources):
    """The code beside the node, for its supervisor, where the state dir could not keep it."""
    path = os.path.join(ndir, "code")
    os.mkdir(path, 0o700)
    os.mkdir(os.path.join(path, "ddph"), 0o700)
    for name, text in sources.items():
        with open(os.path.join(path, "ddph", name + ".py"), "w", encoding="utf-8") as f:
            f.write(text)
    return path


def spawn(spec: protocol.Spec, code_dir: str | None, sources: dict[str, str]) -> str | None:
    """Start the node's supervisor (the one prepared for it, a warm one, or a fresh one); None
    once it says it is up, else why not. The go is the whole spec, on a line."""
    early = protocol.early(spec)
    proc, prepared = _take_warm(code_dir, early) if code_dir else (None, False)
    if not prepared:
        try:
            ndir = _node_dir(early)
        except OSError as exc:
            if proc is not None:
                _end(proc)
            return "cannot make the node's directory: {}".format(exc)
        proc = proc or _boot(code_dir or _keep_code(ndir, sources), spec["run_id"])
        if isinstance(proc, str):
            return proc
        try:
            _tell(proc, ndir, early)
        except OSError as exc:
            _end(proc)
            return "cannot start the supervisor: {}".format(exc)
    if proc is None:  # prepared: never without the warm one that was
        return "the prepared supervisor is gone"
    go = json.dumps(spec).encode() + b"\n"
    try:  # it says "ok" (or why not) and lets go of its stdout; its parent leaves at once
        if spec["lease"] and spec["lease"].get("handoff"):  # the GPUs held here: theirs now
            _hand_over(proc, go, spec)
            go = b""
        said, _ = proc.communicate(go, timeout=START_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        return "the supervisor did not start within {:g} s".format(START_TIMEOUT)
    except (OSError, ValueError) as exc:  # its lease: gone, or never taken over
        _end(proc)
        return "cannot start the supervisor: {}".format(exc)
    if said == b"ok":
        return None
    return said.decode("utf-8", "replace").strip() or "the supervisor died at its start"


def _hand_over(proc, go, spec):
    """The go, then the node's GPUs' lease, which the agent's `gpu-lease` op holds (leaseop.py),
    handed to the supervisor over its socket: held all along, by one or the other."""
    from . import lease, leaseop  # here: only a launch with GPUs to lease needs them

    held = leaseop.take_over(spec["run_id"], spec["node"])
    if held is None:
        raise ValueError("its GPUs' lease is no longer held here (the launch let it go)")
    ndir = state.node_dir(spec["run_id"], spec["node"], spec["attempt"])
    try:
        proc.stdin.write(go)
        proc.stdin.flush()
        lease.hand_over(held, lambda: connect(ndir), time.monotonic() + START_TIMEOUT)
    except BaseException:
        held.give_back()
        raise


# -- a node's stream -----------------------------------------------------------------------------


def attach(ch: Any, req: dict[str, Any], *_: object) -> None:
    ndir = state.node_dir(req["run_id"], req["node"], req.get("since", 0))
    if not os.path.isdir(ndir):
        return _error(ch, "no such run on this host ({})".format(ndir))
    relay(ch, ndir)


def connect(ndir: str) -> socket.socket | None:
    """A connection to the node's supervisor, or None when it is gone."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        fd = os.open(ndir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        sock.close()
        return None
    try:
        sock.connect("/proc/self/fd/{}/{}".format(fd, protocol.CTL_SOCKET))
        return sock
    except OSError:
        sock.close()
        return None
    finally:
        os.close(fd)


def relay(ch: Any, ndir: str) -> None:
    """Bytes both ways until the supervisor hangs up; the launcher's end is passed on."""
    sock = connect(ndir)
    if sock is None:
        return replay(ch, ndir)

    def to_daemon():
        with contextlib.suppress(OSError):
            for chunk in ch.reader_chunks():
                sock.sendall(chunk)
            sock.shutdown(socket.SHUT_WR)  # the launcher ended its side (detach)

    ch.on_close(lambda: close(sock))
    threading.Thread(target=to_daemon, daemon=True).start()
    try:
        while True:
            data = sock.recv(1 << 18)
            if not data:
                return
            ch.data(data)
    except OSError:
        return
    finally:
        close(sock)


def replay(ch: Any, ndir: str) -> None:
    """The node's supervisor is gone: its spool from the asked offset, then its final state."""
    from .spool import Spool  # here: the agent's other ops need none of the supervisor's code
    from .viewers import send_spool

    words = ch.read_line().split()
    offset = int(words[1]) if words[:1] == [b"hello"] and len(words) > 1 else 0
    spool = Spool(ndir, 1 << 30, writable=False)
    spool.closed = True
    found = state.read_state(ndir)
    hello = {"node": found.get("node"), "run_id": found.get("run_id"), "live": False,
             "state": found, "spool_start": spool.start, "spool_end": spool.end}  # fmt: skip
    send_spool(ch.data, spool, offset, hello, 1.0, threading.Event())


# -- sweep, status, port -------------------------------------------------------------------------


def sweep(ch: Any, req: dict[str, Any], *_: object) -> None:
    """What is left of a node: its tagged processes, then its containers (docker's and
    podman's outlive their client)."""
    tags = {"DDPTUI_RUN_ID": req["run_id"], "DDPTUI_NODE": str(req["node"])}
    found = procs.tagged_pids(tags)
    # Nothing of a node is this agent's child: it reaps none (a wait on any child would take
    # the exit status of a check's nvidia-smi under way, which then reads 0)
    left = procs.sweep(lambda: procs.tagged_pids(tags), req.get("grace", 5.0), lambda: None)
    runtime = state.read_state(state.node_dir(req["run_id"], req["node"])).get("runtime")
    if runtime:
        from . import container  # here: a host without containers never pays its import

        why = container.sweep(runtime, req["run_id"], req["node"])[1]
        if why:
            left.append("containers of the run: {}".format(why))
    reply: protocol.SweptReply = {"t": "swept", "found": len(found), "survivors": left}
    ch.answer(reply)


def status(ch: Any, req: dict[str, Any], *_: object) -> None:
    """{run_id: {node: state}} for [run_id, node(, since)] items; `alive` when its supervisor
    answers."""
    found: dict[str, dict[str, protocol.NodeState | None]] = {}
    for item in req["nodes"]:
        run_id, node = item[0], item[1]
        ndir = state.node_dir(run_id, node, item[2] if len(item) > 2 else 0)
        got = state.read_state(ndir)
        if got:
            sock = connect(ndir)
            got["alive"] = sock is not None
            if sock is not None:
                sock.close()
            if node == 0 and req.get("series"):  # the training's curve (remote/host/progress.py)
                from .progress import read_series

                got["series"] = read_series(ndir)
        found.setdefault(run_id, {})[str(node)] = got or None
    reply: protocol.StatusReply = {"t": "status", "runs": found}
    ch.answer(reply)


def free_port(ch: Any, req: dict[str, Any], *_: object) -> None:
    """A port nobody listens on now, outside the ephemeral range (job.master_port: auto)."""
    from .netif import free_port

    reply: protocol.PortReply = {"t": "port", "port": free_port()}
    ch.answer(reply)
