"""The supervisor proper: a daemon on the host that owns one node's part of a run to its end.

The agent's `start` op runs it as a fresh interpreter (remote/host/boot.py), which detaches at
once. It outlives any one SSH connection (launchers come and go): it starts the job
(its command: remote/host/job.py) in a session of its own with the run's tags in its
environment, is a child subreaper, spools every byte the job prints (remote/host/spool.py; in
the torchrun styles each rank's files, read by remote/host/tail.py), and serves viewers on a
Unix socket in its private directory (remote/host/viewers.py), which an agent's relay reaches
(remote/host/nodes.py). It stops the job (TERM, grace, KILL) when
- a launcher says `stop`;
- the run is attached and no launcher has been heard from for link_timeout (the lease);
- the run's hub says so (another node failed or was lost; remote/host/hub.py).
When the job ends, whatever it left behind goes too. With job.restarts the daemon runs attempt
after attempt of its node's job, in the same spool, as the run's hub says; each attempt's lines
follow a marked line in every rank's log, and its processes have DDPTUI_ATTEMPT. What the node
does for the run beside its own job is its role's (remote/host/role.py): node 0 coordinates it
(the hub, restarts, job.notify: remote/host/coordinator.py), the others are peers
(remote/host/peer.py). Once no attempt follows, the daemon leaves as soon as its viewers have
the last byte (or after a while: the spool stays for a later `attach`).
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
import threading
import time

from . import (
    healthwatch,
    job,
    jobstart,
    procs,
    protocol,
    ranktag,
    torchrun,
    vitals,
    wire,
)
from .attempt import Attempt
from .common import log, rmtree, thread
from .jobbox import JobBox
from .owncommands import OwnCommands
from .peer import Peer
from .protocol import beat_interval
from .role import Role, Supervisor
from .spool import Spool
from .state import STATE
from .tail import RankTail
from .viewers import Viewers

TYPE_CHECKING = False  # typing costs import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any, Callable, Unpack

    from .lease import Held

CHUNK = 1 << 16
GATHER_S = 0.002  # what a lone line waits, at most, for the lines behind it
DRAIN_S = 10.0  # at the end, how long viewers get to take the last bytes
REAP_WAIT_S = 0.2  # how long a rank's end waits for the reaper to give its exit code


def now_ms() -> int:
    return int(time.time() * 1000)


class Daemon:
    role: Role  # node 0 coordinates the run, the others are its peers: set as it serves

    def __init__(self, spec: protocol.Spec, ndir: str) -> None:
        self.spec, self.dir = spec, ndir
        self.node, self.nnodes = spec["node"], len(spec["names"])
        self.name = spec["names"][self.node]
        self.tags = job.node_tags(spec["run_id"], self.node)
        self.grace = spec["grace"]
        self.link_timeout = spec["link_timeout"]
        self.beat = beat_interval(self.link_timeout)
        self.mode = "detached" if spec["detached"] else "attached"
        self.spool = Spool(ndir, spec["spool_max"])
        self.viewers = Viewers(self.spool, self._hello, self._command, self.beat)
        self.over = False  # no attempt follows: a launcher can no longer take the lease
        self.stop_once = threading.Lock()
        self.att: Attempt | None = None  # the current Attempt
        self.number = spec["attempt"]  # the current attempt's number
        self.box = JobBox(spec, ndir, self.save_state)  # its container, if any
        self.halted: tuple[str, str] | None = (
            None  # (status, reason): a stop that ends the run (no attempt follows)
        )
        self.reaper = procs.Reaper(self._exited)  # every child's exit code
        # its own commands (health reads, job.notify's): never swept, their codes the reaper's
        self.own = OwnCommands(self.reaper.wait, self.reaper.cond, self.reaper.codes)
        self.exempt = {os.getpid()}  # never ours to stop (the guardian is added here)
        self.subreaper = False  # orphans of the job come to this daemon (boot)
        self.guard = (0, -1)  # the guardian's pid and pipe (boot)
        self.ranks = list(spec["ranks"])  # as planned, else as the last attempt revealed them
        self.smi = shutil.which("nvidia-smi")
        self.watch_health = healthwatch.worth_watching(self.smi)  # a CPU host watches nothing
        self.vitals = vitals.Node()  # its ranks' progress, for the run's hang watch
        self.state: protocol.NodeState = {
            "run_id": spec["run_id"],
            "node": self.node,
            "pid": os.getpid(),
        }
        self.state_lock = threading.Lock()
        self.lease: Held | None = None  # its GPUs' lease (lease.py): given back at the end
        self.early: jobstart.Early | None = None  # its first attempt's job, started (slurmjob)

    # -- records ------------------------------------------------------------------------------

    def note(self, **msg: Any) -> None:
        if not self.spool.closed:  # a thread late with its news after the end: dropped
            self._append(wire.meta(now_ms(), **msg))

    def _append(self, data: bytes) -> None:
        trimmed = self.spool.append(data)
        if trimmed:  # said in the spool itself, so every viewer learns it in order
            self.spool.append(
                wire.meta(now_ms(), t=protocol.TRIMMED, bytes=trimmed, max=self.spool.max_bytes)
            )

    def save_state(self, **changes: Unpack[protocol.NodeState]) -> None:
        # Threads save it (the job's, a viewer's detach): one at a time, or one's replace finds
        # the other's tmp file gone, and a supervisor dies of its run's own detach.
        with self.state_lock:
            self.state.update(changes)
            self.state["mode"], self.state["spool_end"] = self.mode, self.spool.end
            tmp = os.path.join(self.dir, STATE + ".tmp")
            with open(tmp, "w") as f:
                json.dump(self.state, f)
            os.replace(tmp, os.path.join(self.dir, STATE))

    # -- life ---------------------------------------------------------------------------------

    def serve(self, server: socket.socket, ready: Callable[[str], None]) -> None:
        """Run the node to its end; `ready(text)` tells the starter we are up (or why not)."""
        pid, self.guardian_pipe = self.guard
        self.exempt.add(pid)
        self.role = self._role()
        self.role.start()
        self.viewers.serve(server)
        thread(self.reaper.run)
        thread(self._watch_lease)
        self.save_state(status="starting", started=time.time(), attempt=self.spec["attempt"])
        ready("ok")
        step = self.role.first(self.spec["attempt"])
        while step is not None:
            self._attempt(*step)
            step = self.role.next(step[0])
        self._end()

    def _role(self) -> Role:
        """Node 0 coordinates the run; every other node is its hub's peer."""
        sup = Supervisor(self.dir, self.note, self.save_state, self._told_stop,
                         self._launcher_heard, self.own, self.vitals)  # fmt: skip
        if self.node == 0:
            from .coordinator import Coordinator  # node 0's alone (its hub, its watch)

            return Coordinator(self.spec, sup, min(self.link_timeout, DRAIN_S))
        return Peer(self.spec, sup)

    def _launcher_heard(self) -> float | None:
        """When a launcher holding the run's lease last said a word; None: none holds it."""
        return self.viewers.heard if self.mode == "attached" else None

    def _attempt(self, number, after):
        """One attempt of the node's job, from its start to its end (and its leftovers gone)."""
        self.box.sweep()  # the last attempt's, if left: its name is this one's
        self.role.begin(number)
        att = Attempt(number, self.name, self.spec["ranks"])
        with self.stop_once:
            self.att, self.number = att, number
            if self.halted is not None:  # a restart crossed a stop: it ends at once, unstarted
                att.stopped.set()
                att.reason = self.halted[1]
                att.by = protocol.HALT_BY[self.halted[0]]
        if number or after:
            self._mark(number, after)
        self.save_state(status="starting", attempt=number)
        self.vitals.start()
        started = self._start_job(att)
        if started is not None and self.spec["hang_after"] is not None:  # the watch is on
            thread(self.vitals.look, att.done)
        watch = self.role.watch(number) if started is not None else None
        if started is not None:
            att.done.wait()
            if watch is not None:
                watch.stop()
            # The job is over; whatever it left behind (daemons, orphaned workers) goes too.
            att.survivors += procs.sweep(self._find, self.grace, reap=lambda: None)
            for t in started:
                t.join(timeout=5)
        att.done.set()
        self._finish(att)
        if started is not None:
            self.box.finished(att)

    def _mark(self, number, after):
        """`ddptui: attempt 2 of 3 (after ...)` in every rank's log before the attempt's lines."""
        said = "ddptui: attempt {} of {}".format(number + 1, self.spec["restarts"] + 1)
        said += " (after {})".format(after) if after else ""
        text = said.encode("utf-8", "replace")
        if self.ranks:
            data = b"".join(ranktag.tag(rank) + text + b"\n" for rank in self.ranks)
        else:
            data = text + b"\n"  # ranks yet unknown: the node's own line
        self._append(wire.record(b"1", now_ms(), data))

    def _start_job(self, att):
        spec, early, self.early = self.spec, self.early, None
        if early is not None and early.number != att.number:
            early = None  # not this attempt's (never: the first is the first)
        if early is None:
            argv, env, cwd, ifname = jobstart.command(
                spec, self.dir, att.number, self.tags, lambda: self.scratch(att),
                self.role.checkpoint(att.number), bool(self.box.box),
            )  # fmt: skip
            stdin = subprocess.DEVNULL
            if self.box.box:  # the runtime's client; the job's environment reaches it by -e
                argv, env = self.box.command(argv, env, cwd, self.scratch(att))
                stdin, cwd = subprocess.PIPE, None  # the job's own cwd is inside
        else:
            ifname = early.ifname
        with self.stop_once, self.reaper.cond:  # a stop, and the reaper, see it started or not
            if att.stopped.is_set():
                if early is not None and early.proc is not None:  # a stop came first: unseen
                    pid = early.proc.pid
                    procs.signal_all([*procs.own_descendants(pid), pid], signal.SIGKILL)
                return None
            if early is None:
                att.job, att.error = jobstart.popen(argv, env, cwd, stdin)
            else:
                att.job, att.error, att.scratch = early.proc, early.error, early.scratch
                if att.job is not None and att.job.pid in self.reaper.codes:  # ended already
                    self._exited(att.job.pid, self.reaper.codes[att.job.pid])
        if att.error:
            self.note(t=protocol.ERROR, msg=att.error, attempt=att.number)
            return None
        self.note(
            t=protocol.STARTED, pid=att.job.pid, hostname=socket.gethostname(), ifname=ifname,
            hub_port=self.role.hub_port, mode=self.mode, ranks=spec["ranks"],
            attempt=att.number,
        )  # fmt: skip
        self.save_state(status="running", job_pid=att.job.pid, scratch=att.scratch,
                        container=self.box.name(), runtime=self.box.runtime)  # fmt: skip
        threads = [
            thread(self._pump, att.job.stdout, b"1", att),
            thread(self._pump, att.job.stderr, b"2", att),
        ]
        if spec["tail_ranks"]:  # torchrun's --redirects: each rank's own files
            tail = RankTail(
                self.scratch(att), spec["ranks"], self.tags, self._spool_lines, self._redrawn
            )
            threads.append(thread(tail.run, att.done))
        threads.append(thread(self._watch_ranks, att))
        if self.watch_health:
            thread(self._watch_health, att)  # not joined: a hung read must not hold the end
        return threads

    def _redrawn(self, rank: int, shown: bytes) -> None:
        """A rank's bar being redrawn: told for its progress (never a log line)."""
        text = shown.decode("utf-8", "replace")
        self.note(t=protocol.REDRAWN, rank=rank, text=text)
        self.role.feed(ranktag.tag(rank) + shown + b"\n", self.number)

    def _spool_lines(self, stream: bytes, data: bytes) -> None:
        if self.att is not None:
            self.att.lines += data.count(b"\n")
        self._append(wire.record(stream, now_ms(), data))
        self.vitals.line()
        self.role.feed(data, self.number)

    def _finish(self, att):
        code, not_started = self.box.ended(att)
        echo, stopped = False, att.stopped.is_set()
        if not_started:  # the runtime's words: no rank ever ran
            att.error = not_started
            self.note(t=protocol.ERROR, msg=not_started, attempt=att.number)
        if code and not stopped and self._read_health(att):  # a GPU's failure that took its
            att.by = protocol.BY_HEALTH  # rank down before the watch's next read: the cause
        if att.error:  # said already (ERROR): the launcher takes that as this attempt's end
            status, reason = "failed", f"{self.name} could not start its job: {att.error}"
        else:
            if att.sick:  # its GPUs or NICs failed: the cause, whatever its ranks then did
                status, att.reason = "failed", att.sick
            elif stopped:
                status = "lost" if att.by == protocol.BY_LEASE else "stopped"
            else:
                status = "succeeded" if code == 0 else "failed"
            if not stopped and code != 0 and not att.sick:
                att.reason, echo = att.failed_text()
            reason = att.reason
            died = att.died and {"rank": att.died[0], "code": att.died[1], "at": att.died[2]}
            self.note(
                t=protocol.EXIT, code=code, stopped=stopped, by=att.by, reason=reason,
                node=att.node, survivors=att.survivors, attempt=att.number, died=died,
                evidence=att.evidence if att.sick else [],
            )  # fmt: skip
        self.save_state(status=status, exit_code=code, by=att.by, reason=reason,
                        survivors=att.survivors, ended=time.time())  # fmt: skip
        said = (status, reason)
        if stopped and att.by == protocol.BY_PEER and code and not att.sick:
            # A peer's echo (its rank lost ours) may have stopped us after our own failure:
            # the hub hears of ours, the cause.
            own = att.own_failure()
            said = ("failed", own) if own else said
        if att.scratch:
            rmtree(att.scratch)
        self.role.ended(*said, echo, att.facts(said[1], code))

    def _end(self):
        """The run is over here: its GPUs given back first (the next launch in the queue
        starts now), word goes out, then the viewers get the last bytes."""
        self.over = True
        if self.lease is not None:
            self.lease.give_back()
        self.role.close()
        self.spool.close()
        self.viewers.closing = True
        # a later attach finds no daemon and is served the spool instead
        _unlink(protocol.CTL_SOCKET)
        self.viewers.drain(time.monotonic() + DRAIN_S)
        self.box.sweep()  # its client removed it; the net, after the end is told
        self.own.end()  # a health read still under way goes with its supervisor
        os.write(self.guardian_pipe, b"k")  # a normal end: the guardian has nothing to do

    # -- stopping -----------------------------------------------------------------------------

    def stop(
        self, by: str, reason: str, node: int | None = None, attempt: int | None = None
    ) -> None:
        """Stop the job once; the first reason given is the one recorded. node: the node
        whose failure (or loss) this stop answers, when another node's. A user's stop or a
        lease also ends the run: no attempt follows. attempt: only if this one is running."""
        if by in (protocol.BY_LAUNCHER, protocol.BY_LEASE):
            self._halt("lost" if by == protocol.BY_LEASE else "stopped", reason)
        with self.stop_once:
            att = self.att
            if att is None or att.stopped.is_set() or att.done.is_set():
                return
            if attempt is not None and attempt != att.number:
                return
            att.by, att.reason, att.node = by, reason, node
            att.stopped.set()
            running = att.job is not None
        # the grace said to every viewer: whoever stopped it, each counts the ranks' time down
        self.note(t=protocol.STOPPING, by=by, reason=reason, node=node, grace=self.grace,
                  checkpoint=self.spec["checkpoint"])  # fmt: skip
        if running:
            thread(self._sweep, att)

    def _halt(self, status, reason):
        with self.stop_once:
            if self.halted is not None:
                return
            self.halted = (status, reason)
        self.role.halt(status, reason)

    def _watch_health(self, att):
        """This host's GPUs and NICs, all along the attempt (remote/host/healthwatch.py): a
        warning is told, a failure ends the attempt at once, naming the GPU, and the host is
        bad for the rest of the run."""
        with att.reading:
            watch = healthwatch.HealthWatch(self.smi, run=self.own.run)
            watch.begin()
            att.watch = watch
        while not att.done.wait(healthwatch.INTERVAL_S):
            if self._read_health(att):
                self.stop(protocol.BY_HEALTH, att.sick, self.node, att.number)
                return

    def _read_health(self, att):
        """One read of the watch: its news told; True once a failure made the host sick."""
        with att.reading:
            if att.sick or att.watch is None:
                return False
            failures, warnings = att.watch.poll()
            for issue in failures + warnings:
                text = healthwatch.describe(self.name, issue)
                self.note(t=protocol.HEALTH, level=issue["level"], text=text, attempt=att.number)
            if failures:
                why = healthwatch.describe(self.name, failures[0])
                log("{} ({})".format(why, "; ".join(failures[0]["evidence"])))
                with self.stop_once:
                    att.sick, att.evidence = why, failures[0]["evidence"]
            return bool(failures)

    def _told_stop(self, reason: str, node: int | None, by: str | None = None) -> None:
        """The run's hub says stop (a peer failed or was lost; a halt elsewhere)."""
        halt = by if by in protocol.HALT_BY.values() else None  # a user's stop, or a lease
        self.stop(halt or protocol.BY_PEER, reason, node)

    def _sweep(self, att):
        if self.box.box and att.job.stdin:
            with contextlib.suppress(OSError):
                att.job.stdin.close()  # the shim in the container ends the job
        att.survivors += procs.sweep(self._find, self.grace, reap=lambda: None)

    def _find(self):
        """The job's processes: this daemon's tree (and its tags), less its own commands (no
        command of its own starts unseen while the job is looked for)."""
        with self.own.lock:
            exempt = self.exempt | self.own.held()
            return procs.job_pids(os.getpid(), self.tags if self._tagged() else None, exempt)

    def _tagged(self):
        """Whether the job's processes are found by their tags, not as this daemon's tree: what
        left the tree (a container's processes), or any where it could not adopt orphans."""
        return bool(self.box.box) or not self.subreaper

    def _watch_lease(self):
        while not self.viewers.closing:
            time.sleep(self.beat)
            silent = time.monotonic() - self.viewers.heard
            if self.mode == "attached" and silent > self.link_timeout and self.halted is None:
                why = f"no launcher heard from for {silent:g} s (launcher gone or its link down; "
                self.stop(protocol.BY_LEASE, why + "detach to leave a run on its own)")
            self.viewers.close_silent(self.link_timeout)

    # -- the job's processes ------------------------------------------------------------------

    def scratch(self, att: Attempt) -> str:
        """A fresh private directory for torchrun's --log-dir, gone when the attempt ends."""
        if not att.scratch:  # one per attempt, however many places name it
            att.scratch = jobstart.scratch_dir(self.spec["run_id"], self.node, self.dir)
        return att.scratch

    def _exited(self, pid: int, code: int | None) -> None:
        """The reaper's word of a child's end (under its lock): the job's ends the attempt."""
        att = self.att
        if att is not None and att.job is not None and pid == att.job.pid:
            att.job.returncode = att.code = code
            att.done.set()

    def _pump(self, pipe, stream, att):
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
                att.err = (att.err + data)[-torchrun.ERR_KEPT :]
            data = rest + data
            cut = data.rfind(b"\n") + 1
            rest = data[cut:]
            if cut:
                att.lines += data.count(b"\n", 0, cut)
                self._append(wire.record(stream, now_ms(), data[:cut]))
                self.vitals.line()
                self.role.feed(data[:cut], att.number)
            if len(rest) >= wire.RECORD_MAX:  # a runaway line: pass it on in pieces
                pieces = split_line(rest)
                rest = pieces.pop()
                self._append(wire.record(stream, now_ms(), b"".join(pieces)))
        if rest:
            self._append(wire.record(stream, now_ms(), rest + b"\n"))

    def _watch_ranks(self, att):
        """The rank processes here (their ranks told where only the run reveals them), then
        which of them ends first, and how: a rank SIGKILLed is named, with its signal."""

        def report(ranks, world):
            self.ranks = list(ranks)
            self.note(t=protocol.RANKS, ranks=ranks, world=world)

        learn = report if self.spec["learn_ranks"] else None
        tree = None if self._tagged() else os.getpid()  # the job's tree holds every rank
        by_pid = procs.watch_ranks(att.job.pid, self.tags, self.node, self.nnodes, att.done, learn,
                                   tree)  # fmt: skip
        self.vitals.by_pid, self.vitals.scratch = by_pid, att.scratch
        if by_pid:  # until the job ends, or is told to stop: what follows a stop is ours
            att.died = procs.first_end(by_pid, lambda: att.done.is_set() or att.stopped.is_set(),
                                       self._reaped)  # fmt: skip

    def _reaped(self, pid):
        """A child's exit code, once the reaper has it (it may be a moment behind)."""
        return self.reaper.code(pid, REAP_WAIT_S)

    # -- viewers ------------------------------------------------------------------------------

    def _hello(self) -> dict[str, Any]:
        """What a viewer is told first."""
        return {
            "node": self.node,
            "run_id": self.spec["run_id"],
            "mode": self.mode,
            "live": True,
            "spool_start": self.spool.start,
            "spool_end": self.spool.end,
        }

    def _command(self, words: list[str]) -> None:
        """A launcher's word on a viewer's connection, its line's words."""
        verb, args = protocol.heard(words)
        if not verb:
            return
        if verb == protocol.SAY_STOP and args[:1] == [protocol.SAY_STOP_FAILURE]:
            attempt = int(args[1]) if len(args) > 1 and args[1].isdigit() else None
            why = "another node failed (the launcher said stop)"
            self.stop(protocol.BY_PEER, why, attempt=attempt)
        elif verb == protocol.SAY_STOP:
            self.stop(protocol.BY_LAUNCHER, "stopped from the launcher")
        elif verb in (protocol.SAY_DETACH, protocol.SAY_ATTACH):
            mode = "detached" if verb == protocol.SAY_DETACH else "attached"
            # attach: a launcher takes the run back on its lease (not once the run is over)
            if self.mode != mode and (mode == "detached" or not self.over):
                self.mode = mode
                self.note(t=protocol.MODE, mode=mode)
                self.save_state()
                if self.lease is not None:  # `ddptui who` says it
                    self.lease.note(mode=mode)
        elif verb == protocol.SAY_GONE and len(args) == 2 and all(a.isdigit() for a in args):
            self._gone(int(args[0]), int(args[1]))
        else:
            self.role.command(verb, args)

    def _gone(self, node, attempt):
        """A launcher found node's supervisor dead: the hub (or, of node 0's, every peer)
        need not wait out its silence."""
        names = self.spec["names"]
        if node < len(names):
            why = "{}'s supervisor died (its stream ended without a word)".format(names[node])
            self.role.gone(node, attempt, why)


def split_line(data: bytes) -> list[bytes]:
    """A line too long for one record, cut into pieces that each end a line; a torchrun rank
    prefix is repeated on each piece so they stay that rank's. The last element is the rest."""
    prefix = ranktag.prefix(data)
    size = wire.RECORD_MAX - len(prefix)
    pieces = [data[:size] + b"\n"]
    data = data[size:]
    while len(data) >= size:
        pieces.append(prefix + data[:size] + b"\n")
        data = data[size:]
    pieces.append(prefix + data if data else b"")
    return pieces


def _unlink(path):
    with contextlib.suppress(OSError):
        os.unlink(path)
