"""The host agent: what the one SSH exec per host runs; every op multiplexed over its stdio.

remote/agents/shipper.py's boot starts it (python3 >= 3.8, standard library only). It writes the
mark and HELLO on channel 0, then serves each channel the launcher opens (protocol.OPS) in a thread
of its own, writing every answer as a frame on its stdout. It leaves when its stdin closes (the
launcher or its connection went) or when the launcher has been silent for the lease: a cut link
never closes it, and a host must not keep an agent for every launcher that vanished. Node
supervisors it started live on: their own lease decides for them (remote/host/daemon.py).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import queue
import sys
import threading
import time

from . import prefork, protocol, wire
from .job import node_tags

TYPE_CHECKING = False  # typing costs import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any, Callable, Iterator

READ = 1 << 18
INBOX = 64  # frames waiting for an op; more, and the reader waits (the launcher slows down)


class Ended(Exception):
    """The launcher ended the channel."""


class Channel:
    """One op's channel: what the launcher sends on it, and the way to answer."""

    def __init__(self, agent: Agent, chan: int) -> None:
        self.agent, self.chan = agent, chan
        self.inbox: queue.Queue[tuple[bytes, Any]] = queue.Queue(INBOX)
        self.closers: list[Callable[[], object]] = []

    def put(self, kind: bytes, payload: Any) -> None:
        """From the reader thread: waits while the op is behind (the launcher slows down)."""
        self.inbox.put((kind, payload))

    def on_close(self, fn: Callable[[], object]) -> None:
        self.closers.append(fn)

    def close(self) -> None:
        for fn in self.closers:
            with contextlib.suppress(Exception):
                fn()
        with contextlib.suppress(queue.Full):  # wakes a thread still reading the channel
            self.inbox.put_nowait((b"e", None))

    # -- what an op reads --------------------------------------------------------------------

    def recv(self, timeout=None):
        """(kind, payload) next, a `j` frame's JSON parsed; None after timeout."""
        try:
            kind, payload = self.inbox.get(timeout=timeout)
        except queue.Empty:
            return None
        if kind == b"j":
            try:
                return kind, wire.Frame(self.chan, kind, payload).message()
            except wire.Garbage:
                return kind, None
        return kind, payload

    def read_all(self, limit: int) -> bytes:
        """Every data frame until the launcher ends the channel, at most limit bytes."""
        chunks, size = [], 0
        for chunk in self.reader_chunks():
            size += len(chunk)
            if size > limit:
                raise ValueError("more than {} bytes".format(limit))
            chunks.append(chunk)
        return b"".join(chunks)

    def reader_chunks(self) -> Iterator[bytes]:
        while True:
            kind, payload = self.recv()
            if kind == b"e":
                return
            if kind == b"d":
                yield payload

    def reader(self) -> _ChunkFile:
        """The channel's data as a file object, for a reader that streams (tarfile's `r|`)."""
        return _ChunkFile(self.reader_chunks())

    def read_line(self, limit: int = 256) -> bytes:
        """The first line of data (a node stream's `hello OFFSET`)."""
        data = b""
        while b"\n" not in data and len(data) < limit:
            got = self.recv(timeout=30)
            if got is None or got[0] != b"d":
                break
            data += got[1]
        return data.partition(b"\n")[0]

    # -- what an op says ---------------------------------------------------------------------

    def answer(self, msg: dict[str, Any]) -> None:
        self.agent.send(wire.jframe(self.chan, msg))

    def data(self, payload: bytes) -> None:
        self.agent.send(wire.frame(self.chan, b"d", payload))


class _ChunkFile:
    def __init__(self, chunks):
        self.chunks, self.buf = chunks, b""

    def read(self, n=-1):
        while n < 0 or len(self.buf) < n:
            chunk = next(self.chunks, None)
            if chunk is None:
                break
            self.buf += chunk
        out, self.buf = (self.buf, b"") if n < 0 else (self.buf[:n], self.buf[n:])
        return out


def _answer(fn):
    """An op whose function returns its one answer."""
    return lambda agent, ch, req: ch.answer(fn(req))


def _mod(name):
    """An op's module, imported when first asked for: every host pays each import in CPU, and
    a check needs none of a run's code (nor a run the checks')."""
    return importlib.import_module("." + name, __package__)


def _probe(agent, ch, req):
    warm = req.get("warm")  # a launch follows the checks: its start, ahead (its node's, or a run's)
    early = warm if isinstance(warm, dict) else None
    run_id = early.get("run_id") if early else warm
    if isinstance(run_id, str) and run_id and agent.code_dir:
        _mod("nodes").warm(agent.code_dir, run_id, early)
    ch.answer(_mod("probe").facts(req, agent.missing))


# What a launch asks of an agent before its start (its checks' probe carries `warm`): the spare
# supervisor waits through these (remote/host/prefork.py), and any other op ends it.
LAUNCH_OPS = {protocol.SYNC_PLAN, protocol.SYNC_PUT, protocol.COUNT, protocol.PORT,
              protocol.MONITOR, protocol.GPU_LEASE, protocol.START, protocol.MARK}  # fmt: skip

OPS = {
    protocol.PROBE: _probe,
    protocol.COUNT: _answer(lambda req: _mod("probe").visible_gpus(req)),
    protocol.SYNC_PLAN: lambda agent, ch, req: _mod("sync").serve(ch, req, "plan"),
    protocol.SYNC_PUT: lambda agent, ch, req: _mod("sync").serve(ch, req, "put"),
    protocol.MONITOR: lambda agent, ch, req: _mod("monitor").serve(ch, req),
    protocol.START: lambda agent, ch, req: _mod("nodes").start(
        ch, req, agent.code_dir, agent.sources
    ),
    protocol.ATTACH: lambda agent, ch, req: _mod("nodes").attach(ch, req),
    protocol.STACKS: _answer(lambda req: _mod("stacks").dump(req)),
    protocol.FLIGHT: lambda agent, ch, req: _mod("stacks").analyse(ch, req),
    protocol.SWEEP: lambda agent, ch, req: _mod("nodes").sweep(ch, req),
    protocol.STATUS: lambda agent, ch, req: _mod("nodes").status(ch, req),
    protocol.PORT: lambda agent, ch, req: _mod("nodes").free_port(ch, req),
    protocol.STANDBY: lambda agent, ch, req: _mod("standby").start(ch, req, agent.code_dir),
    protocol.HANGS: _answer(lambda req: _mod("watch").kept(req)),
    protocol.GPU_LEASE: lambda agent, ch, req: _mod("leaseop").serve(ch, req),
    protocol.GPU_LEASES: _answer(lambda req: _mod("leaseop").view(req)),
    protocol.SLURM: lambda agent, ch, req: _mod("slurmcmd").slurm(ch, req),
    protocol.RELAY: lambda agent, ch, req: _mod("slurmcmd").relay(ch, req),
    protocol.MARK: _answer(lambda req: _mod("checkpoints").mark(req)),
}


class Agent:
    def __init__(self, code_dir, sources, missing):
        self.code_dir, self.sources, self.missing = code_dir, sources, missing
        # Frames alone on the real stdout: anything else this process or a child prints (a
        # warning, a tool run without a pipe) goes to stderr instead.
        self.out = os.dup(1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        self.lock = threading.Lock()
        self.channels = {}
        self.heard = time.monotonic()
        self.lease = protocol.AGENT_LEASE_S

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        with self.lock:
            try:
                while view:
                    view = view[os.write(self.out, view) :]
            except OSError:  # the launcher's end is gone
                self.leave()

    def run(self):
        self.send(wire.MARK + wire.jframe(0, self.hello()))
        threading.Thread(target=self._watch, daemon=True).start()
        reader = wire.FrameReader(marked=True)
        try:
            while True:
                data = os.read(0, READ)
                if not data:
                    break
                for f in reader.feed(data):
                    self.dispatch(f)
        except (OSError, wire.Garbage) as exc:
            sys.stderr.write("ddptui agent: {}\n".format(exc))
        self.leave()

    def hello(self) -> dict[str, Any]:
        conn = os.environ.get("SSH_CONNECTION", "").split()
        return {
            "t": protocol.HELLO,
            "v": protocol.VERSION,
            "pid": os.getpid(),
            "hostname": os.uname().nodename,  # gethostname() is this, without importing socket
            "python": "{}.{}.{}".format(*sys.version_info[:3]),
            "exe": sys.executable,
            "missing_python": self.missing,
            "ssh_addr": conn[2] if len(conn) == 4 else None,  # as this host's sshd was reached
            "code": "kept" if self.code_dir else "memory",
        }

    def dispatch(self, f):
        self.heard = time.monotonic()
        if f.chan == 0:
            return self._control(f)
        ch = self.channels.get(f.chan)
        if ch is not None:
            ch.put(f.kind, f.payload)
        elif f.kind == b"j":
            self.open(f.chan, f.message())

    def _control(self, f):
        if f.kind != b"j":
            return
        msg = f.message()
        if msg.get("t") == protocol.PING:
            self.send(wire.jframe(0, {"t": protocol.PONG}))
        elif msg.get("t") == protocol.LEASE:
            self.lease = float(msg.get("seconds") or protocol.AGENT_LEASE_S)

    def open(self, chan, req):
        ch = self.channels[chan] = Channel(self, chan)
        op = OPS.get(req.get("op"))
        threading.Thread(target=self._serve, args=(op, ch, req), daemon=True).start()

    def _serve(self, op, ch, req):
        kind = req.get("op")
        if kind not in LAUNCH_OPS and not (kind == protocol.PROBE and req.get("warm")):
            prefork.discard()  # no launch follows here: nothing of ours idles on the host
        try:
            if op is None:
                ch.answer({"error": "unknown op {!r}".format(req.get("op"))})
            else:
                op(self, ch, req)
        except Exception as exc:  # the launcher hears why; the agent serves on
            import traceback

            traceback.print_exc()
            ch.answer({"error": "{} failed: {!r}".format(req.get("op"), exc)})
        finally:
            self.channels.pop(ch.chan, None)
            ch.close()
            self.send(wire.frame(ch.chan, b"e"))

    def _watch(self):
        while True:
            time.sleep(1.0)
            if time.monotonic() - self.heard > self.lease:
                sys.stderr.write("ddptui agent: no word from the launcher; leaving\n")
                self.leave()

    def leave(self) -> None:
        for ch in list(self.channels.values()):
            ch.close()
        with contextlib.suppress(OSError):
            sys.stderr.flush()
        os._exit(0)


def main(code_dir: str | None, sources: dict[str, str], missing: str | None) -> None:
    # A run's tags are its processes' alone (a sweep by tags takes them): an agent started from
    # inside a run (a job that runs ddptui) passes none on to its checks, supervisors, monitor.
    for tag in node_tags("", 0):
        os.environ.pop(tag, None)
    # From memory, a supervisor needs its code written out: a fresh one, then. In a Slurm job's
    # step (srun --overlap), the supervisors are the batch script's, never this agent's; on
    # Slurm's login node (NO_PREFORK, kept from what it runs: sbatch passes it on) none runs.
    no_launch = os.environ.pop(protocol.NO_PREFORK, None)
    if code_dir and "SLURM_STEP_ID" not in os.environ and not no_launch:
        prefork.fork(code_dir)  # before any thread
    Agent(code_dir, sources, missing).run()
