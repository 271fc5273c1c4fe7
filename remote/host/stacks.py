"""Every rank's stack, host side: one op of its agent runs `py-spy dump` on each rank process of
a run's node, all at once, and with the flight recorder on, each rank's NCCL trace as well.

Only what this host's side started counts: the node's supervisor (from its state in the private
state dir) and its descendants that run as this user; a process another user made look like a
rank (it may carry the run's tags: the run id is in `ps`) is never dumped, poked or read. The
flight recorder's pipes and traces are those of the node's own scratch directory (the paths the
plan gave every rank), opened without following links, and a trace is read only if it is a file
of this user's. A trace is a pickle: it is read here, by an unpickler that refuses every global
(a trace holds plain dicts, lists and numbers), and leaves as JSON. python3 >= 3.8, stdlib only.

It answers {hostname, ranks: {rank: {pid, threads} | {pid, error}}, problem, flight}.
"""

from __future__ import annotations  # py3.8: annotations stay unevaluated

import io
import json
import os
import pickle
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time

from . import procs, state
from .flightfiles import PIPE, TRACE
from .probe import _start, find_py_spy, ptrace_rights

TYPE_CHECKING = False  # typing costs milliseconds of import on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any

DUMP_TIMEOUT = 20.0
TRACE_MAX = 64 << 20  # bytes of one rank's trace
FLIGHT_POLL = 0.1
# py-spy's read of a live process fails now and then as a thread comes or goes under it
# ("Failed to get stack traces ... get_stack_trace for thread"): that rank is read again
MISREAD = "py-spy: Error: Failed to get stack traces"
DUMP_TRIES = 2
ANALYSER = "torch.distributed.flight_recorder.fr_trace"
ANALYSE_TIMEOUT = 120.0
VERDICT_MAX = 64 << 10


def dump(spec: dict[str, Any]) -> dict[str, Any]:
    """spec: {run_id, node, nnodes, native, stacks (bool), flight_wait (seconds; 0: no
    flight recorder)}."""
    found: dict[str, Any] = {"hostname": socket.gethostname(), "ranks": {}, "problem": None}
    node = state.read_state(state.node_dir(spec["run_id"], spec["node"], spec.get("since", 0)))
    by_pid: dict[int, int] = {}
    if node.get("pid") and node.get("status") in ("starting", "running"):
        tags = {"DDPTUI_RUN_ID": spec["run_id"], "DDPTUI_NODE": str(spec["node"])}
        mine = procs.own_descendants(node["pid"])
        runtime, name = node.get("runtime"), node.get("container")
        if runtime and name:  # docker's processes are its daemon's children, not ours
            mine += _in_container(runtime, name)
        by_pid, _ = procs.ranks_by_pid(tags, spec["node"], spec["nnodes"], among=mine)
    if not by_pid:
        found["problem"] = "no rank of run {} runs on this host".format(spec["run_id"])
    elif spec.get("stacks", True):
        spy = find_py_spy()
        if spy is None:
            found["problem"] = "py-spy not found (pip install py-spy, in the train extra)"
        else:
            found["ranks"] = dump_all(spy, by_pid, spec.get("native", False))
            found["ptrace"] = ptrace_rights()
    if by_pid and spec.get("flight_wait"):
        found["flight"] = flight(node.get("scratch"), sorted(by_pid.values()), spec["flight_wait"])
    return found


def _in_container(runtime: str, name: str) -> list[int]:
    """The processes of the node's own container (named by its supervisor), by host pid."""
    try:
        res = subprocess.run(
            [runtime, "inspect", "--format", "{{.State.Pid}}", name],
            capture_output=True, timeout=30, check=False,
        )  # fmt: skip
        pid = int(res.stdout.split()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return []
    return [pid, *procs.own_descendants(pid)] if pid > 0 else []


def dump_all(
    spy: str,
    by_pid: dict[int, int],
    native: bool,
    nonblocking: bool = False,
    timeout: float = DUMP_TIMEOUT,
) -> dict[str, Any]:
    """{rank: {pid, threads}} for every rank process, the dumps running side by side.
    nonblocking: the ranks are not paused while read (the run's own watch)."""
    extra = (["--native"] if native else []) + (["--nonblocking"] if nonblocking else [])
    deadline = time.monotonic() + timeout
    out: dict[str, Any] = {}
    todo = list(by_pid)
    for _ in range(DUMP_TRIES):
        running = {pid: _start([spy, "dump", "--json", "--pid", str(pid), *extra]) for pid in todo}
        todo = []
        for pid, proc in running.items():
            stack: dict[str, Any] = {"pid": pid}
            stack.update(_dumped(proc, max(0.0, deadline - time.monotonic()), timeout))
            out[str(by_pid[pid])] = stack
            if str(stack.get("error", "")).startswith(MISREAD):
                todo.append(pid)
        if not todo or time.monotonic() >= deadline:
            break
    return out


def _dumped(proc: Any, wait: float, timeout: float) -> dict[str, Any]:
    if isinstance(proc, OSError):
        return {"error": "cannot run py-spy: {}".format(proc.strerror)}
    try:
        out, err = proc.communicate(timeout=wait)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"error": "py-spy did not answer in {:g} s".format(timeout)}
    if proc.returncode != 0:
        lines = [ln.strip() for ln in err.decode("utf-8", "replace").splitlines() if ln.strip()]
        return {"error": "py-spy: " + (" ".join(lines[:3]) or "exit {}".format(proc.returncode))}
    try:
        threads = json.loads(out)
    except ValueError:
        return {"error": "py-spy printed no stack"}
    return {"threads": [_thread(t) for t in threads]}


def _thread(t: dict[str, Any]) -> dict[str, Any]:
    """What the launcher groups by, less py-spy's extras (locals, ids) and the frames of the
    interpreter's own entry machinery (runpy, for `python -m`). py-spy's `is_shim_entry` is no
    such mark: py-spy 0.4 sets it on the script's own `<module>` frame, where a loop written at
    module level waits."""
    frames = [
        {"function": f.get("name"), "file": f.get("short_filename"), "path": f.get("filename"),
         "line": f.get("line")}
        for f in t.get("frames", ()) if not _entry_machinery(f)
    ]  # fmt: skip
    main = t.get("thread_name") == "MainThread" or t.get("os_thread_id") == t.get("pid")
    return {"name": t.get("thread_name"), "main": main, "active": t.get("active"),
            "frames": frames}  # fmt: skip


def _entry_machinery(frame: dict[str, Any]) -> bool:
    """A frame of the standard library's runpy, which runs `python -m module` (torchrun's
    `--module`, a launcher run as `-m`): the interpreter's, never the job's. Python >= 3.11
    freezes it; before, it is lib/pythonX.Y/runpy.py."""
    path = frame.get("filename") or ""
    if path == "<frozen runpy>":
        return True
    where, name = os.path.split(path)
    return name == "runpy.py" and os.path.basename(where).startswith("python")


# -- the flight recorder -------------------------------------------------------------------------


def flight(scratch: str | None, ranks: list[int], wait: float) -> dict[str, Any]:
    """Ask every rank to dump its NCCL flight recorder; {rank: {trace} | {error}}."""
    if not scratch or not _private_dir(scratch):
        refused = "the node's scratch directory is not this user's private one"
        return {str(rank): {"error": refused} for rank in ranks}
    asked: dict[int, tuple[str, Any]] = {}  # rank → (trace file, its stat before we asked)
    out: dict[str, Any] = {}
    for rank in ranks:
        path = os.path.join(scratch, TRACE + str(rank))
        before = _stat(path)
        why = _poke(os.path.join(scratch, PIPE + str(rank) + ".pipe"))
        if why:
            out[str(rank)] = {"error": why}
        else:
            asked[rank] = (path, before)
    deadline = time.monotonic() + wait
    torn: dict[int, dict[str, Any]] = {}  # rank → why its trace, as last read, was unreadable
    while asked and time.monotonic() < deadline:
        for rank, (path, before) in list(asked.items()):
            got = _fresh(path, before)
            if got is not None and "error" in got:
                # another dump may be rewriting it (a user's `stacks` and the run's hang watch
                # at once): read it again once it changes, until the deadline
                torn[rank], asked[rank] = got, (path, _stat(path))
            elif got is not None:
                out[str(rank)] = got
                del asked[rank]
        time.sleep(FLIGHT_POLL)
    for rank, (path, _) in asked.items():
        no = {"error": "no trace in {} after {:g} s".format(path, wait)}
        out[str(rank)] = torn.get(rank, no)
    return out


def _private_dir(path: str) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def _poke(pipe: str) -> str | None:
    """One byte into a rank's dump pipe; why not, if it could not be written."""
    try:
        fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError as exc:  # ENXIO: nobody reads it (no process group yet, or not NCCL)
        return "the flight recorder is not on for this rank ({})".format(exc.strerror)
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return "{} is not a pipe".format(pipe)
        os.write(fd, b"1")
    finally:
        os.close(fd)
    return None


def _stat(path: str) -> tuple[float, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_mtime, st.st_size


def _fresh(path: str, before: tuple[float, int] | None) -> dict[str, Any] | None:
    """The trace as JSON once it was (re)written since `before` and has stopped growing."""
    now = _stat(path)
    if now is None or now == before or now[1] == 0:
        return None
    time.sleep(FLIGHT_POLL)
    if _stat(path) != now:
        return None
    try:
        trace = read_trace(path)
        json.dumps(trace)  # what goes back: plain JSON, or nothing
    except (OSError, ValueError, TypeError, pickle.UnpicklingError, EOFError) as exc:
        return {"error": "unreadable trace {}: {}".format(path, exc)}
    return {"file": path, "trace": trace}


class _PlainUnpickler(pickle.Unpickler):
    """Plain data only: a pickle that names any class or function is refused, not run."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError("refused {}.{}: a trace holds plain data".format(module, name))


def read_trace(path: str) -> Any:
    """A rank's trace: a regular file of this user's, at most TRACE_MAX, plain data."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            raise ValueError("not a file of this user's")
        if st.st_size > TRACE_MAX:
            raise ValueError("{} bytes, more than {}".format(st.st_size, TRACE_MAX))
        return _PlainUnpickler(io.BytesIO(f.read())).load()


def analyse(ch: Any, req: dict[str, Any]) -> None:
    """The run's traces, sent as JSON ({rank: trace}), analysed here by torch's own analyser
    with this host's python; the verdict goes back as text."""
    traces = json.loads(ch.read_all(TRACE_MAX * 8))
    where = state.node_dir(req["run_id"], req["node"], req.get("since", 0))
    ch.answer(verdict(traces, where, ANALYSE_TIMEOUT))


# The analyser's interpreter, started before the traces are in: importing torch is most of its
# time (~2 s on an idle node, 15-20 s on a loaded one), and it overlaps the ranks' dumps
_WARM = """import runpy, sys
import {m}
where = sys.stdin.readline().strip()
if where:
    sys.argv = [{m!r}, "-p", {p!r}, where]
    runpy.run_module({m!r}, run_name="__main__", alter_sys=True)
""".format(m=ANALYSER, p=TRACE)


class Analyser:
    """torch's analyser, started now, given the traces later (verdict()); `budget`: seconds
    from its start to its verdict."""

    def __init__(self, budget: float) -> None:
        self.budget, self.deadline = budget, time.monotonic() + budget
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WARM],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip

    def verdict(self, traces: dict[str, Any], parent: str) -> dict[str, Any]:
        """Its verdict on traces ({rank: trace}, plain data), in a fresh directory under the
        private `parent`: {verdict, code} | {error}. The pickles it reads are written here,
        from that data, and gone after."""
        where = tempfile.mkdtemp(prefix="flight-", dir=parent)
        try:
            for rank, trace in traces.items():
                path = os.path.join(where, TRACE + str(int(rank)))
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as f:
                    pickle.dump(trace, f)
            wait = max(0.0, self.deadline - time.monotonic())
            try:
                out, err = self.proc.communicate((where + "\n").encode(), timeout=wait)
            except subprocess.TimeoutExpired:
                return {"error": "no verdict in {:g} s".format(self.budget)}
            text = (out + err).decode("utf-8", "replace")[-VERDICT_MAX:]
            return {"verdict": text, "code": self.proc.returncode}
        finally:
            self.close()
            shutil.rmtree(where, ignore_errors=True)

    def close(self) -> None:
        """Stopped, if it still runs (no traces to analyse, or past its budget)."""
        if self.proc.returncode is None:
            self.proc.kill()
            self.proc.communicate()


def verdict(traces: dict[str, Any], parent: str, timeout: float) -> dict[str, Any]:
    """torch's analyser on traces, started now (Analyser)."""
    return Analyser(timeout).verdict(traces, parent)
