"""The login node's part of a run handed to Slurm: Slurm's commands, run for the launcher, and
the way to each node of the job, through Slurm itself.

Ops of the agent (remote/host/agent.py) on the login node, the one host of the cluster ddptui
logs into (python3 >= 3.8, standard library only):

  slurm  one of Slurm's client commands (sbatch, squeue, sacct, scancel, sinfo), given its input,
         its output bounded; `prepare`: the run's directory on the login node made first (the
         job's output file goes there, and Slurm needs it to exist at submit), answered with
         its path (a `{run_dir}` in argv is it: the job's output file); `read`: RUN_ID/NAME,
         the end of that file of the run's (the job's output); `test`: a command run first with
         the same input (`sbatch --test-only`), argv run only if it succeeds, both told: a
         submission is one round trip
  relay  `srun --jobid J --overlap ... -w NODE ...`: a process on one node of the job (its agent,
         booted as over ssh), its stdin and stdout the channel's data, its stderr's lines and its
         exit told as JSON: every node is reached through this one login, none by ssh (sites
         allow ssh to the login node alone), and OpenSSH's 10 sessions a connection never limit
         how many nodes a run has. `sh`: an agent on the login node itself, the same way (a
         run's spools on a shared home, read once its job is over)
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from typing import Any

from . import protocol, state

COMMANDS = ("sbatch", "squeue", "sacct", "scancel", "sinfo")
OUT_MAX = 1 << 20  # what a command's answer carries, each of stdout and stderr
ERR_LINES = 50  # the relay's stderr lines told, at most (srun's own words)
TIMEOUT = 60.0


def slurm(ch, req):
    argv = [str(a) for a in req.get("argv") or ()]
    if argv and argv[0] not in COMMANDS:
        return ch.answer({"error": "not one of Slurm's commands: {!r}".format(argv[:1])})
    test = [str(a) for a in req.get("test") or ()]
    if test and test[0] not in COMMANDS:
        return ch.answer({"error": "not one of Slurm's commands: {!r}".format(test[:1])})
    answer: dict[str, Any] = {"t": "slurm"}
    if req.get("prepare") or req.get("read"):
        run_id, _, name = str(req.get("prepare") or req["read"]).partition("/")
        where = _run_dir(run_id)
        state.private_dirs(where)
        answer["dir"] = where
        argv = [a.replace(protocol.SLURM_RUN_DIR, where) for a in argv]
        if name:
            answer["output"] = _tail(os.path.join(where, os.path.basename(name)))
    text, timeout = str(req.get("input") or ""), float(req.get("timeout") or TIMEOUT)
    if test:
        tested = answer["test"] = _run(test, text, timeout)
        if tested["code"] != 0:
            argv = []  # refused: nothing is submitted
    if argv:
        answer.update(_run(argv, text, timeout))
    ch.answer(answer)


def _run(argv, text, timeout):
    try:
        done = subprocess.run(argv, input=text.encode(), capture_output=True, timeout=timeout)
    except FileNotFoundError:
        return {"code": 127, "out": "", "err": "{}: not found on the login node".format(argv[0])}
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"code": None, "out": "", "err": "{}: {}".format(argv[0], exc)}
    return {"code": done.returncode, "out": _text(done.stdout), "err": _text(done.stderr)}


def _text(data):
    return data[-OUT_MAX:].decode("utf-8", "replace")


def _run_dir(run_id):
    if not run_id or "/" in run_id or run_id.startswith("."):
        raise ValueError("not a run id: {!r}".format(run_id))
    return os.path.join(state.runs_dir(), run_id)


def _tail(path, size=8192):
    """The end of a file of the run's (the job's output file), or ""."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - size))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def relay(ch, req):
    argv = [str(a) for a in req["argv"]]
    if argv[:1] not in (["srun"], ["sh"]):  # a node's agent, or one more here (shipper's boot)
        return ch.answer({"error": "the relay runs srun or an agent's boot alone"})
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        return ch.answer({"t": "exit", "code": 127, "why": "cannot run srun: {}".format(exc)})
    ch.on_close(proc.kill)
    threading.Thread(target=_to_node, args=(ch, proc), daemon=True).start()
    errs = threading.Thread(target=_errors, args=(ch, proc.stderr), daemon=True)
    errs.start()
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    try:
        while True:
            data = os.read(fd, 1 << 18)
            if not data:
                break
            ch.data(data)
    except OSError:
        pass
    code = proc.wait()
    errs.join(timeout=5)
    ch.answer({"t": "exit", "code": code})


def _to_node(ch, proc):
    """The launcher's data to srun's stdin; its end closes it (the node's agent leaves); a
    `kill` ends srun at once."""
    try:
        while True:
            kind, payload = ch.recv()
            if kind == b"e":
                break
            if kind == b"d":
                proc.stdin.write(payload)
                proc.stdin.flush()
            elif kind == b"j" and payload and payload.get("kill"):
                proc.kill()
                break
    except (OSError, ValueError):
        pass
    with contextlib.suppress(OSError):
        proc.stdin.close()


def _errors(ch, pipe):
    told = 0
    for line in iter(pipe.readline, b""):
        if told < ERR_LINES:
            ch.answer({"t": "err", "text": line[:1000].decode("utf-8", "replace").rstrip()})
            told += 1
