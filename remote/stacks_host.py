"""Every rank's Python stack on this host, in one round trip: `py-spy dump` on each rank process
of the run, all at once, and with the flight recorder on, each rank's NCCL trace as well.

It runs on the host's python3 (>= 3.8, standard library only) and travels in the command line
after the host side's procs.py (its ranks_by_pid finds the rank processes by their tags) and
probe_host.py's (find_py_spy, ptrace_rights), so nothing is installed. It prints one line,
MARK + JSON: {hostname, ranks: {rank: {pid, threads} | {pid, error}}, error, flight}.

Flight recorder (design §8): each rank made `<TORCH_NCCL_DEBUG_INFO_PIPE_FILE><rank>.pipe`; a
byte written there makes it dump its trace to `<TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>`, which
goes back base64-encoded (no shared filesystem is assumed). The paths come from each rank's
own environment, so they are whatever the run set.
"""

from __future__ import annotations  # py3.8: annotations stay unevaluated

import base64
import json
import os
import socket
import subprocess
import sys
import time

TYPE_CHECKING = False  # typing costs milliseconds of import on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any

MARK = "DDPTUI-STACKS "
DUMP_TIMEOUT = 20.0
PIPE_VAR = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"
TRACE_VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
FLIGHT_POLL = 0.1


def main(sup: dict[str, Any], probe: dict[str, Any], spec_text: str) -> int:
    """spec: {run_id, node, nnodes, native, stacks (bool), flight_wait (seconds; 0: no
    flight recorder)}."""
    spec = json.loads(spec_text)
    tags = {"DDPTUI_RUN_ID": spec["run_id"], "DDPTUI_NODE": str(spec["node"])}
    by_pid, _ = sup["ranks_by_pid"](tags, spec["node"], spec["nnodes"])
    found: dict[str, Any] = {"hostname": socket.gethostname(), "ranks": {}, "error": None}
    if not by_pid:
        found["error"] = f"no rank of run {spec['run_id']} runs on this host"
    elif spec.get("stacks", True):
        spy = probe["find_py_spy"]()
        if spy is None:
            found["error"] = "py-spy not found (pip install py-spy, in the train extra)"
        else:
            found["ranks"] = dump_all(probe["_start"], spy, by_pid, spec.get("native", False))
            found["ptrace"] = probe["ptrace_rights"]()
    if by_pid and spec.get("flight_wait"):
        found["flight"] = flight(sup["environ"], by_pid, spec["flight_wait"])
    sys.stdout.write(MARK + json.dumps(found) + "\n")
    sys.stdout.flush()
    return 0


def dump_all(start: Any, spy: str, by_pid: dict[int, int], native: bool) -> dict[str, Any]:
    """{rank: {pid, threads}} for every rank process, the dumps running side by side.
    start: the probe's way to start a command (a Popen, or the OSError it raised)."""
    extra = ["--native"] if native else []
    running = {pid: start([spy, "dump", "--json", "--pid", str(pid), *extra]) for pid in by_pid}
    out = {}
    for pid, proc in running.items():
        stack: dict[str, Any] = {"pid": pid}
        stack.update(_dumped(proc))
        out[str(by_pid[pid])] = stack
    return out


def _dumped(proc: Any) -> dict[str, Any]:
    if isinstance(proc, OSError):
        return {"error": f"cannot run py-spy: {proc.strerror}"}
    try:
        out, err = proc.communicate(timeout=DUMP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"error": f"py-spy did not answer in {DUMP_TIMEOUT:g} s"}
    if proc.returncode != 0:
        lines = [ln.strip() for ln in err.decode("utf-8", "replace").splitlines() if ln.strip()]
        return {"error": "py-spy: " + (" ".join(lines[:3]) or f"exit {proc.returncode}")}
    try:
        threads = json.loads(out)
    except ValueError:
        return {"error": "py-spy printed no stack"}
    return {"threads": [_thread(t) for t in threads]}


def _thread(t: dict[str, Any]) -> dict[str, Any]:
    """What the launcher groups by, less py-spy's extras (locals, ids)."""
    frames = [
        {"function": f.get("name"), "file": f.get("short_filename"), "path": f.get("filename"),
         "line": f.get("line")}
        for f in t.get("frames", ()) if not f.get("is_shim_entry")
    ]  # fmt: skip
    main = t.get("thread_name") == "MainThread" or t.get("os_thread_id") == t.get("pid")
    return {"name": t.get("thread_name"), "main": main, "frames": frames}


def flight(environ: Any, by_pid: dict[int, int], wait: float) -> dict[str, Any]:
    """Ask every rank to dump its NCCL flight recorder; {rank: {data} | {error}}."""
    asked: dict[int, tuple[str, Any]] = {}  # rank → (trace file, its stat before we asked)
    out: dict[str, Any] = {}
    for pid, rank in by_pid.items():
        env = environ(pid)
        trace = next((env[v] for v in TRACE_VARS if env.get(v)), None)
        if not env.get(PIPE_VAR) or not trace:
            out[str(rank)] = {"error": "the flight recorder is not on for this rank"}
            continue
        path = trace + str(rank)
        before = _stat(path)
        why = _poke(env[PIPE_VAR] + str(rank) + ".pipe")
        if why:
            out[str(rank)] = {"error": why}
        else:
            asked[rank] = (path, before)
    deadline = time.monotonic() + wait
    while asked and time.monotonic() < deadline:
        for rank, (path, before) in list(asked.items()):
            data = _fresh(path, before)
            if data is not None:
                out[str(rank)] = {"file": path, "data": base64.b64encode(data).decode()}
                del asked[rank]
        time.sleep(FLIGHT_POLL)
    for rank, (path, _) in asked.items():
        out[str(rank)] = {"error": f"no trace in {path} after {wait:g} s"}
    return out


def _poke(pipe: str) -> str | None:
    """One byte into a rank's dump pipe; why not, if it could not be written."""
    try:
        fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:  # ENXIO: nobody reads it (no process group yet, or not NCCL)
        return f"cannot write {pipe}: {exc.strerror}"
    try:
        os.write(fd, b"1")
    finally:
        os.close(fd)
    return None


def _stat(path: str) -> tuple[float, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime, st.st_size


def _fresh(path: str, before: tuple[float, int] | None) -> bytes | None:
    """The file's bytes once it was (re)written since `before` and has stopped growing."""
    now = _stat(path)
    if now is None or now == before or now[1] == 0:
        return None
    time.sleep(FLIGHT_POLL)
    if _stat(path) != now:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None
