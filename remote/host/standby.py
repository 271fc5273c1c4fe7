"""A hot spare's standby: started with the run, idle until node 0's hub says which node it takes.

A launcher starts one on each spare host that passed its checks (remote/run/recover.py), with
what it needs to become any node k: node k's spec as a spare in its place (its rank, env,
ports; the same world size; a key for k the hub takes only once it chose this standby for k),
its own key (remote/host/identity.py) and where the hub listens. It holds no GPU and
runs no job: it connects to the hub as a peer numbered after the nodes (its fleet slot) and
heartbeats (remote/host/hub.py). Told "take k" (a node lost or bad, nobody attached), it starts
node k's supervisor exactly as the agent's `start` op would (remote/host/nodes.py), says so,
and leaves; that supervisor joins the hub in node k's place. Told "over" (the run ended), or
its hub silent for link_timeout, it leaves: nothing of it stays on the host.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from . import nodes, protocol
from .hublink import HubLink

TYPE_CHECKING = False  # typing's names cost import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any

BOOT = "import sys;sys.path.insert(0,sys.argv[1]);from ddph import standby;standby.boot()"
START_TIMEOUT = 30.0  # seconds the standby may take to say it is up


def start(ch: Any, req: dict[str, Any], code_dir: str | None) -> None:
    """The agent's `standby` op: the standby started, detached; "ok" or why not."""
    if not code_dir:
        ch.answer({"error": "this host keeps no ddptui code to stand by"})
        return
    run_id = str(req["run_id"])
    argv = [sys.executable, "-S", "-c", BOOT, code_dir, run_id]  # the run's id, for `ps`
    env = dict(os.environ, DDPTUI_RUN_ID=run_id)  # found as the run's, and swept with it
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                start_new_session=True, close_fds=True)  # fmt: skip
        said, _ = proc.communicate(json.dumps(req).encode() + b"\n", timeout=START_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        ch.answer({"error": "cannot stand by: {}".format(exc)})
        return
    if said != b"ok":
        why = said.decode("utf-8", "replace").strip() or "the standby died at its start"
        ch.answer({"error": why})
        return
    ch.answer({"t": "ok"})


def boot() -> None:
    """The standby's own process: its request on stdin, then detached ("ok" on stdout)."""
    try:
        req = json.loads(sys.stdin.buffer.readline())
        slot, specs, secret = int(req["slot"]), dict(req["specs"]), str(req["secret"])
        addr, port = str(req["hub"][0]), int(req["hub"][1])
        link_timeout = float(req["link_timeout"])
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        os.write(1, "cannot stand by: {!r}".format(exc).encode())
        os._exit(1)
    if os.fork():  # the agent waits for this parent; the standby goes on, adopted by init
        os._exit(0)
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    os.write(1, b"ok")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    link = HubLink(secret, slot, link_timeout, protocol.beat_interval(link_timeout),
                   lambda *_: None)  # fmt: skip
    link.connect(addr, port)
    with link.cond:
        link.cond.wait_for(lambda: link.over is not None or link.take is not None)
    if link.over is None and link.take is not None:
        node, attempt = link.take
        why = become(specs.get(str(node)), attempt, port, sys.path[0])
        link.say(t=protocol.HUB_TOOK, ok=why is None, why=why)
    link.leave("the standby's part is over")
    os._exit(0)


def become(spec: object, attempt: int, port: int, code_dir: str) -> str | None:
    """Node k's supervisor started from its spec, joining at `attempt`: None, else why not."""
    if not isinstance(spec, dict):
        return "no spec for that node"
    os.environ.pop("DDPTUI_RUN_ID", None)  # the supervisor's own environment, as a start's
    try:
        spec = protocol.spec(dict(spec, attempt=attempt, hub_port=port, detached=True))
    except protocol.SpecError as exc:
        return str(exc)
    return nodes.spawn(spec, code_dir, {})
