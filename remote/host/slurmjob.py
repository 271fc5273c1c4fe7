"""A run handed to Slurm, on its nodes: the batch script's head, and each node's supervisor.

The batch script (remote/slurm/script.py) runs `head` on the batch host, the payload on its
stdin: this code, every node's spec as the launcher planned it, and what the allocation alone
can tell left as placeholders. The head finds those: the nodes (SLURM_JOB_NODELIST, expanded
here: a node may lack scontrol), node 0's address as the other nodes reach it (the route to
them, never its name, which a node's /etc/hosts may send to loopback), the ports, the run's
secret (made here, never on disk), the processes per node for `auto`; then one srun task per
node runs `node` with the same payload, which fills its node's spec and runs its supervisor
(remote/host/daemon.py) in the foreground: inside Slurm's step, so Slurm's scancel reaches it
and nothing of it outlives the job. Its node directory is the one an SSH host's would be;
an agent reached through `srun --overlap` (remote/host/slurmcmd.py) relays its stream.

Runs on the cluster: python3 >= 3.8, standard library only.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

from . import channel, hostlist, jobstart, netif, procs, protocol, state
from .common import log, thread

# In the launcher's plan, what only the allocation knows (remote/slurm/script.py writes them).
MASTER = "{ddptui-master-addr}"  # node 0's address as the others reach it
ADDR = "{ddptui-node-addr}"  # this node's own (c10d's --local-addr)
PORT = "{ddptui-master-port}"  # the rendezvous port (job.master_port: auto)
NPROC = "{ddptui-nproc}"  # processes per node (nproc_per_node: auto)
WORLD = "{ddptui-world}"  # every process of the job
RUN_VAR = "DDPTUI_SLURM_RUN"  # from the head to each node: what it found
SECRET_VAR = "DDPTUI_SLURM_SECRET"
# What srun tells each task of our supervisors' step: not the job's ranks (Lightning would
# take SLURM_NTASKS and SLURM_PROCID for them); the job's own SLURM_JOB_* stay.
TASK_VARS = [
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_STEP_ID",
    "SLURM_STEPID",
    "SLURM_TASK_PID",
    "SLURM_GTIDS",
]
CANCELLED = "cancelled in Slurm (scancel)"


def main(role, payload, raw):
    try:
        code = head(payload, raw) if role == "head" else node(payload)
    except Failed as exc:
        sys.stderr.write("ddptui: {}\n".format(exc))
        code = 1
    sys.stdout.flush()
    sys.exit(code)


class Failed(Exception):
    """The run cannot start here: one line for the job's output file."""


# -- the batch host --------------------------------------------------------------------------


def head(p, raw):
    """Find what the allocation tells, start a supervisor on every node (one srun task each),
    and end as they do: the job's exit status is the run's."""
    try:
        names = hostlist.expand(os.environ["SLURM_JOB_NODELIST"])
    except (KeyError, ValueError) as exc:
        raise Failed("cannot read SLURM_JOB_NODELIST: {}".format(exc)) from None
    order = in_order(names, me())
    master = p["master_addr"] or own_address(order)
    port = p["master_port"] or netif.free_port()
    hub = netif.free_port()
    while hub == port:
        hub = netif.free_port()
    found = {
        "order": order,
        "master": master,
        "port": port,
        "hub": hub,
        "nproc": p["nproc"] or gpus_here(),
    }
    print(
        "ddptui: run {} on {} ({} nodes); node 0 at {}:{}".format(
            p["run_id"], ",".join(order), len(order), master, port
        ),
        flush=True,
    )
    n = str(len(order))
    argv = [
        "srun",
        "--nodes",
        n,
        "--ntasks",
        n,
        "--ntasks-per-node",
        "1",
        "--input",
        "all",
        "--kill-on-bad-exit=0",
        "--unbuffered",
        sys.executable,
        "-S",
        "-c",
        p["boot"],
        "node",
    ]
    env = dict(os.environ)
    env[RUN_VAR], env[SECRET_VAR] = json.dumps(found), os.urandom(16).hex()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # scancel: the supervisors stop the job
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, env=env)
    except OSError as exc:
        raise Failed("cannot run srun: {}".format(exc.strerror)) from None
    with_stdin(proc, raw)
    code = proc.wait()
    if run_status(p["run_id"], p["specs"][0]["attempt"]) == "stopped":
        # a user's stop ended the run: the job says so (CANCELLED), not FAILED
        subprocess.call(["scancel", os.environ.get("SLURM_JOB_ID", "")])
    return code


def with_stdin(proc, raw):
    try:
        proc.stdin.write(raw)
        proc.stdin.close()
    except OSError:
        pass


def me():
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def in_order(names, head):
    """Node 0 is the batch host (where this runs, and the rendezvous store with it), then the
    others in Slurm's order."""
    return [head] + [n for n in names if n != head] if head in names else list(names)


def own_address(order):
    """This node's address as the others reach it: the one its route to them starts from."""
    if len(order) == 1:
        return "127.0.0.1"
    for name in order[1:]:
        for peer in _addresses(name):
            local = _source(peer)
            if local and not _loopback(local):
                return local
    raise Failed(
        "cannot find this node's address as the others reach it: no route to {} "
        "(their names resolve to no address here)".format(",".join(order[1:]))
    )


def _addresses(name):
    try:
        found = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except OSError:
        return []
    return [a[4][0] for a in found if not _loopback(a[4][0])]


def _source(peer):
    family = socket.AF_INET6 if ":" in peer else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((peer, 9))  # picks a route, sends nothing
            return s.getsockname()[0]
    except OSError:
        return None


def _loopback(addr):
    return addr.startswith("127.") or addr == "::1"


def gpus_here():
    """Processes per node for `auto`: the GPUs Slurm gave the job here (CUDA_VISIBLE_DEVICES),
    else those nvidia-smi lists, else 1."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if given and given != "NoDevFiles":
        return len([d for d in given.split(",") if d.strip()])
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return 1
    return max(1, sum(line.startswith("GPU ") for line in out.stdout.splitlines()))


def run_status(run_id, attempt):
    """How node 0 (here) says the run ended."""
    found = state.read_state(state.node_dir(run_id, 0, attempt))
    return found.get("run_status") or found.get("status")


# -- each node --------------------------------------------------------------------------------


def node(p):
    try:
        found = json.loads(os.environ.pop(RUN_VAR))
        secret = os.environ.pop(SECRET_VAR)
    except (KeyError, ValueError):
        raise Failed("started outside its batch script (no {})".format(RUN_VAR)) from None
    here = me()
    if here not in found["order"]:
        raise Failed("{} is not a node of the job ({})".format(here, ",".join(found["order"])))
    k = found["order"].index(here)
    spec = protocol.spec(fill(p["specs"][k], found, secret, k, p["auto_ranks"]))
    ndir = state.node_dir(spec["run_id"], k, spec["attempt"])
    try:
        state.private_dirs(os.path.dirname(ndir))
        os.mkdir(ndir, 0o700)
    except OSError as exc:
        raise Failed("cannot make the node's directory {}: {}".format(ndir, exc)) from None
    print(
        "ddptui: node {} on {}: its supervisor's log is {}/supervisor.log".format(k, here, ndir),
        flush=True,
    )
    return supervise(spec, ndir)


def fill(spec, found, secret, k, auto_ranks):
    """Node k's spec as the launcher planned it, with what the allocation told."""
    nproc = int(found["nproc"])
    master = found["master"]
    words = {
        MASTER: master,
        ADDR: master if k == 0 else (_source(master) or ""),
        PORT: str(found["port"]),
        NPROC: str(nproc),
        WORLD: str(nproc * len(found["order"])),
    }

    def sub(text):
        for word, value in words.items():
            text = text.replace(word, value)
        return text

    spec = dict(spec)
    spec["argv"] = [sub(a) for a in spec["argv"]]
    spec["env"] = {name: sub(v) for name, v in spec["env"].items()}
    spec["names"] = list(found["order"])
    spec["master_addr"] = master
    spec["route_to"] = master if spec["route_to"] else None
    spec["hub_port"] = found["hub"]
    spec["joins"] = False  # every node of this job starts its attempt with node 0
    spec["secret"] = secret if k == 0 else channel.node_key(secret, k)  # its own (identity.py)
    spec["detached"] = True  # Slurm holds the job: a launcher may follow it, or none
    spec["unset"] = list(spec["unset"]) + TASK_VARS
    if auto_ranks:  # the plan's, had it known the processes per node
        spec["ranks"] = list(range(k * nproc, (k + 1) * nproc))
        spec["learn_ranks"] = False
    return spec


def supervise(spec, ndir):
    """The node's supervisor, here and now (not detached: Slurm's step holds it); its exit
    status the node's. Its first attempt's job starts before the supervisor's own modules
    load: torchrun imports torch meanwhile."""
    os.chdir(ndir)
    log_fd = os.open("supervisor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(protocol.CTL_SOCKET)  # relative: a deep home must not exceed sun_path
    server.listen(64)
    os.umask(0o077)
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    subreaper = procs.become_subreaper()
    early = jobstart.Early(spec, ndir) if jobstart.Early.fits(spec) else None

    from .boot import guardian
    from .daemon import Daemon
    from .job import node_tags

    box = spec["container"]
    daemon = Daemon(spec, ndir)
    daemon.subreaper, daemon.early = subreaper, early
    daemon.guard = guardian(
        node_tags(spec["run_id"], spec["node"]), spec["grace"], box and box["runtime"]
    )
    signal.signal(signal.SIGTERM, lambda *_: thread(daemon.stop, protocol.BY_LAUNCHER, CANCELLED))
    try:
        daemon.serve(server, lambda text: None)
    except BaseException as exc:
        import traceback

        log("supervisor failed: {!r}\n{}".format(exc, traceback.format_exc()))
        return 1
    return exit_code(daemon.state)


def exit_code(found):
    status = found.get("run_status") or found.get("status")
    if status == "succeeded":
        return 0
    code = found.get("exit_code")
    return code if isinstance(code, int) and 0 < code < 256 else 1
