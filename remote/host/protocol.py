"""The contract between the launcher and a host: the agent's ops, the node spec, the messages.

Both ends import this module (the launcher as `ddptui.remote.host.protocol`, the host as
`ddph.protocol`): every key, default and message kind is named here once. Standard library only,
python3 >= 3.8. The bytes that carry these (frames, spool records) are remote/host/wire.py's.

One SSH exec per host starts the agent (remote/host/agent.py). It says HELLO on channel 0, then
serves ops, each on a channel the launcher opens with a JSON request `{"op": OP, ...}`:

  probe      the checks' facts (remote/host/probe.py)            one answer
  count      the GPUs a job would see, for nproc_per_node: auto   one answer
  sync-plan  which of the launcher's files this host lacks         data in, one answer
  sync-put   those files, as one tar                               data in, one answer
  monitor    GPU samples every few seconds, until ended           answers; {"pause": bool} in
  start      start a node's supervisor (remote/host/daemon.py),   its stream both ways (data)
             then relay its stream
  attach     relay a running node's stream, or replay its spool   likewise
  stacks     every rank's stack and flight-recorder traces (JSON)  one answer
  flight     the run's traces analysed by torch, on this host     data in, one answer
  sweep      stop what is left of a node by its tags               one answer
  status     the state of some runs' nodes on this host (node 0's    one answer
             training curve too, with {"series": true})
  port       a free TCP port on this host (job.master_port: auto)  one answer
  gpu-lease  a node's GPUs taken, or waited for in the queue, held   answers both ways
             until its supervisor takes them over (leaseop.py)
  gpu-leases every GPU's lease and the queue (`ddptui who`)        one answer

Channel 0 carries the agent's own words: HELLO first, PONG to each PING, and LEASE from the
launcher (seconds of silence after which the agent leaves).
"""

from __future__ import annotations

import hashlib

TYPE_CHECKING = False  # typing costs import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any, List, Mapping, Sequence, Tuple, TypedDict

    # -- what the hub and its peers say (HUB_*) --

    class Join(TypedDict):
        t: str
        since: int  # the attempt the peer's supervisor started at (a spare: the one it joins)
        attempt: int  # the attempt it runs

    class End(TypedDict):
        t: str
        attempt: int
        status: str  # succeeded, failed, stopped, lost
        reason: str | None
        echo: bool  # the failing rank died of a peer's failure: another's failure is the cause
        # what the hub weighs a failure by (remote/host/retry.py): cause, rank, code, lines,
        # bad (the host may not run the job again), host
        facts: dict[str, Any] | None

    class Halt(TypedDict):
        t: str
        status: str  # a key of HALT_BY
        reason: str

    class Stop(TypedDict):
        t: str
        reason: str
        node: int | None  # whose failure or loss; None: a halt's
        attempt: int
        by: str | None  # a value of HALT_BY: the halt's

    class Restart(TypedDict):
        t: str
        attempt: int
        after: str  # why: the last attempt's failure

    class Over(TypedDict):
        t: str
        reason: str

    # -- a node's spec (START): what its supervisor is handed; SPEC_DEFAULTS below says each
    # key's default (REQUIRED: none), the launcher's node_spec (remote/run/plan.py) its value --

    class Spec(TypedDict, total=False):
        run_id: str
        node: int
        names: list[str]
        argv: list[str]
        secret: str
        env: dict[str, str]
        unset: list[str]
        expand: list[int]
        scratch_arg: str | None
        workdir: str | None
        route_to: str | None
        ifname_vars: list[str]
        master_addr: str | None
        ranks: list[int]
        learn_ranks: bool
        tail_ranks: bool
        line_buffer: bool
        container: dict[str, Any] | None
        grace: float
        link_timeout: float
        spool_max: int
        detached: bool
        attempt: int
        joins: bool
        restarts: int
        restart_delay: float
        spares: int
        standbys: list[str]
        hub_port: int | None
        restart_on: Sequence[int | str] | None  # exit codes and causes (job.restart_on)
        notify: dict[str, Any] | None
        progress: str | bool | None
        hang_after: float | None
        on_hang: str
        on_straggler: str
        checkpoint: str | None
        lease: dict[str, Any] | None

    # -- a node's state file (remote/host/state.py: STATE), as its supervisor writes it --

    class NodeState(TypedDict, total=False):
        run_id: str
        node: int
        pid: int  # the supervisor's
        mode: str  # attached, detached
        spool_end: int
        status: str  # starting, running, waiting, restarting; then how the job ended
        attempt: int
        started: float  # time.time()
        ended: float
        job_pid: int
        scratch: str | None
        container: str | None  # its name, for a runtime with a daemon (docker, podman)
        runtime: str | None
        exit_code: int | None
        by: str | None  # BY_*: who stopped it
        reason: str | None
        survivors: list[str]  # what could not be stopped
        waiting: list[str]  # node 0: the lost nodes' names a spare must replace
        run_status: str  # node 0: the run's end
        run_reason: str
        run_why: str  # node 0: why no attempt follows (a restart chain that stops)
        checkpoint: dict[str, Any]  # node 0: job.checkpoint's newest {path, step, at}
        bad_hosts: dict[str, list[str]]  # node 0: node -> [host, why]: not used again (policy.py)
        swapped: dict[str, list[Any]]  # node 0: node -> [hot spare, attempt]: an attach follows
        alive: bool  # STATUS: its supervisor answers
        series: dict[str, Any] | None  # STATUS, node 0, asked for: the training's curve, or None

    # -- the ops' replies (one answer) --

    class CountReply(TypedDict):
        cuda_visible_devices: str | None
        list: Any  # nvidia-smi -L's answer, as the probe's commands give it

    class SweptReply(TypedDict):
        t: str  # "swept"
        found: int
        survivors: list[str]

    class StatusReply(TypedDict):
        t: str  # "status"
        runs: dict[str, dict[str, NodeState | None]]  # run id -> node (a string) -> its state

    class PortReply(TypedDict):
        t: str  # "port"
        port: int

    class ErrorReply(TypedDict):
        error: str  # an unknown op, or one that failed


VERSION = 1

# -- ops ----------------------------------------------------------------------------------------

PROBE = "probe"
COUNT = "count"
SYNC_PLAN = "sync-plan"
SYNC_PUT = "sync-put"
MONITOR = "monitor"
START = "start"
ATTACH = "attach"
STACKS = "stacks"
FLIGHT = "flight"
SWEEP = "sweep"
STATUS = "status"
PORT = "port"
STANDBY = "standby"  # a hot spare's standby: idle until node 0's hub says which node it takes
HANGS = "hangs"  # node 0's kept hangs (hang-<attempt>.json, remote/host/watch.py)
GPU_LEASE = "gpu-lease"  # a node's GPUs taken (or queued for), held until its supervisor's
GPU_LEASES = "gpu-leases"  # every GPU's lease and the queue: `ddptui who`
SLURM = "slurm"  # the login node: one of Slurm's commands (remote/host/slurmcmd.py)
RELAY = "relay"  # the login node: srun into a job's node, its stdio the channel's data
SLURM_RUN_DIR = "{run_dir}"  # in a slurm op's argv: the run's directory there, once prepared
MARK = "mark"  # node 0's mark where job.checkpoint is, for the checks (remote/host/checkpoints.py)
OPS = (
    PROBE, COUNT, SYNC_PLAN, SYNC_PUT, MONITOR, START, ATTACH, STACKS, FLIGHT, SWEEP, STATUS, PORT,
    STANDBY, HANGS, GPU_LEASE, GPU_LEASES, SLURM, RELAY, MARK,
)  # fmt: skip

# -- channel 0 ----------------------------------------------------------------------------------

HELLO = "hello"  # agent: {v, pid, hostname, python, exe, missing_python, ssh_addr, code}
PING = "ping"  # launcher, every few seconds
PONG = "pong"  # agent, to each ping
LEASE = "lease"  # launcher: {seconds}: leave after that long without a word
CTL_SOCKET = "ctl.sock"  # a supervisor's socket in its node directory: viewers connect there
NO_PREFORK = "DDPTUI_NO_PREFORK"  # in an agent's environment: no launch follows (a login node)
AGENT_LEASE_S = 60.0  # until the launcher says otherwise

# -- a node's stream (spool meta records and out-of-band control, remote/host/daemon.py) --------

STARTED = "started"  # {pid, hostname, ifname, hub_port, mode, ranks, attempt}
RANKS = "ranks"  # {ranks, world}: only the run reveals them (c10d, spawn, Lightning)
STOPPING = "stopping"  # {by, reason, node, grace, checkpoint}: TERM sent, KILL after grace
# {code, stopped, by, reason, node, survivors, attempt, died: {rank, code, at}, evidence: what a
# health verdict (by: health) rests on, each a line (remote/host/health.py)}
EXIT = "exit"
ERROR = "error"  # {msg, attempt}: the node could not start (its job, or its supervisor)
# node 0's stream only: the run's hub speaks
HUB_PORT = "hub-port"  # {port}: where the hub listens, said first (a job that cannot start too)
RESTART = "restart"  # {attempt, of, after, node, delay, replace}: the next attempt is coming
NOTIFY = "notify"  # {event, status, message, wanted}: something happened (job.notify)
RUN_END = "run-end"  # {status, why}: the run ends; why no attempt follows ("": it says itself)
CHECKPOINT = "checkpoint"  # {path, step, at}: the job saved a new newest checkpoint
SAVED = "saved"  # {attempt, path, step, reached, lost}: a failed attempt, against its checkpoint
NOTIFY_FAILED = "notify-failed"  # {event, error}: the notify command failed (nothing changes)
TRIMMED = "trimmed"  # meta {bytes, max}; control {missed, at}
MODE = "mode"  # {mode}: attached or detached
# {rank, text}: the last drawing of a rank's line still redrawn with \r (a tqdm bar), at most
# once a second a rank: read for progress only (remote/host/progress.py), never a log line
REDRAWN = "redrawn"
HEALTH = "health"  # {level, text, attempt}: this host's GPUs or NICs, news since the attempt began
# node 0's stream: {node, name, why}: a host no attempt of this run may use again
SPARE_NEWS = "spare-news"  # {level, text}: node 0: a hot spare's standby lost, or swapped in
PEER_REFUSED = "peer-refused"  # {text}: node 0: a host claimed another's node at the hub
BAD_HOST = "bad-host"
# control frames only
STREAM_HELLO = "hello"  # {node, run_id, mode, live, spool_start, spool_end, state}
HEARTBEAT = "hb"
EOF = "eof"  # {end}: the stream is complete

# Why a node stopped (EXIT's `by`, STOPPING's `by`).
BY_LAUNCHER = "launcher"  # a launcher said stop
BY_PEER = "peer"  # the run's hub said stop (another node failed or was lost)
BY_LEASE = "lease"  # no launcher heard from for link_timeout
BY_HEALTH = "health"  # this host's GPUs or NICs failed (remote/host/healthwatch.py)
HALT_BY = {"stopped": BY_LAUNCHER, "lost": BY_LEASE}  # stops that end a run: none follows

# Launcher to a node's supervisor: text lines on its stream.
SAY_HELLO = "hello"  # hello OFFSET [view]: resume the spool there (view: only watch, viewers.py)
SAY_VIEW = "view"
SAY_PING = "ping"
SAY_STOP = "stop"  # stop [failure]: a user's stop ends the run; `failure`: this attempt only
SAY_STOP_FAILURE = "failure"
SAY_DETACH = "detach"
SAY_ATTACH = "attach"
SAY_HUB = "hub"  # hub ADDR PORT: where the run's hub listens
SAY_GONE = "gone"  # gone NODE ATTEMPT: that node's supervisor is dead (its stream ended mute)
SAY_REPLACE = "replace"  # replace NODE TICKET: node 0: a spare comes for NODE, proving TICKET
SAY_NO_SPARE = "nospare"  # nospare WHY...: node 0: no spare can replace the lost: the run ends
SAY_NOTIFY = "notify"  # notify EVENT MESSAGE...: node 0: tell job.notify (a hang the launcher saw)

# -- the run's hub and its peers (remote/host/hub.py): a JSON object a line, each way -------------
# Every message's kind is its `t`; what else it carries is its TypedDict below.

HUB_JOIN = "join"  # peer, first: the attempt its supervisor started at, and the one it runs
HUB_BEAT = "hb"  # either way: a peer's heartbeat, the hub's answer
HUB_END = "end"  # peer: its job of this attempt ended (succeeded, failed, stopped, lost)
HUB_HALT = "halt"  # peer: a user's stop or a lease: no attempt may follow
HUB_STOP = "stop"  # hub: stop this attempt's job, because of a node (or a halt)
HUB_RESTART = "restart"  # hub: start attempt N
HUB_OVER = "over"  # hub: the run is over (or another host took this node's place)
HUB_SAMPLE = "sample"  # hub: sample your ranks (stacks too): the run's hang watch
HUB_SAMPLED = "sampled"  # peer: its ranks' sample (remote/host/vitals.py), for that ask
HUB_FLIGHT = "flight"  # hub, at a hang: send your ranks' flight recorder traces
HUB_TRACE = "trace"  # peer: a piece of them, or done (remote/host/hangtraces.py)
HUB_TAKE = "take"  # hub, to a hot spare's standby: start node N's supervisor from attempt M
HUB_TOOK = "took"  # standby: its node's supervisor is up (ok), or why not

# -- restarts and word of them (job.restarts, job.notify) ---------------------------------------

RESTART_DELAY_MAX = 300.0  # the doubling delay between attempts stops here (unless set above)
NOTIFY_EVENTS = ("failed", "succeeded", "lost", "stopped", "restarted", "hang", "straggler")
NOTIFY_DEFAULT = ("failed", "lost", "stopped", "restarted", "hang", "straggler")
NOTIFY_TIMEOUT = 30.0  # seconds a notify command may run


def restart_delay(first: float, attempt: int) -> float:
    """The wait before attempt `attempt` (1: the first restart): doubling from `first`, at most
    RESTART_DELAY_MAX (or `first`, when set above it)."""
    return min(max(first, RESTART_DELAY_MAX), first * 2.0 ** max(0, attempt - 1))


# -- a node's spec (START) ----------------------------------------------------------------------

CODE = "{ddptui-code}"  # in a node's argv: the directory holding this host's ddptui code (ddph/)

REQUIRED = object()
SPEC_DEFAULTS = {
    "run_id": REQUIRED,
    "node": REQUIRED,
    "names": REQUIRED,  # every node's name, in node order
    "argv": REQUIRED,
    "secret": REQUIRED,  # the supervisors' proof to each other (the hub); never on disk
    "env": {},  # exported to the job over the host's own environment
    "unset": [],  # removed from the job's environment, even the host's own
    "expand": [],  # argv indices that are paths: `~` expanded on the host
    "scratch_arg": None,  # this text in argv and env becomes the node's scratch directory
    "workdir": None,
    "route_to": None,  # set ifname_vars to the interface that routes to this address
    "ifname_vars": [],
    "master_addr": None,  # where the peers reach node 0 (the hub binds there)
    "ranks": [],  # global ranks by local rank; [] when only the run reveals them
    "learn_ranks": False,  # watch the job's processes for their ranks
    "tail_ranks": False,  # torchrun's --redirects: read each rank's files (remote/host/tail.py)
    "line_buffer": False,  # the whole-lines sitecustomize (remote/host/linebuf.py)
    "container": None,  # the job in a container: the inventory's spec (remote/host/container.py)
    "grace": 5.0,  # seconds between TERM and KILL
    "link_timeout": 60.0,
    "spool_max": 1 << 30,
    "detached": False,
    "attempt": 0,  # the attempt this supervisor starts at (a spare: the one it joins)
    "joins": True,  # attempt > 0: joins a run going, at its hub's word (a new Slurm job's don't)
    "restarts": 0,  # attempts after the first, at most (job.restarts)
    "restart_delay": 10.0,  # seconds before the first restart, doubling (restart_delay())
    "spares": 0,  # node 0: spare hosts a launcher may put in a lost node's place
    "standbys": [],  # node 0: the spares' names, in fleet order: each may stand by (hot)
    "hub_port": None,  # where the hub listens, known at the start (a hot spare's node; Slurm)
    "restart_on": None,  # node 0: job.restart_on (None: every failure restarts)
    "notify": None,  # node 0: {command, events} (job.notify)
    "progress": None,  # node 0: job.progress, a regex on the lines (remote/host/progress.py)
    "hang_after": 600.0,  # node 0: job.hang_after (None: no hang watch; remote/host/watch.py)
    "on_hang": "restart",  # node 0: job.on_hang: restart | stop | warn
    "on_straggler": "warn",  # node 0: job.on_straggler: warn | replace
    "checkpoint": None,  # job.checkpoint: where the job saves (remote/host/checkpoints.py)
    # the node's GPUs' lease (remote/host/lease.py): {run_id, node, count, pins, cvd, busy,
    # launcher, handoff}; handoff: the agent holds it for the supervisor, else it takes its own
    "lease": None,
}


# What a node's supervisor needs before its job: known before the checks end, so a launch's
# supervisors are prepared while the other hosts are still checked (remote/host/nodes.py: warm).
EARLY = ("run_id", "node", "attempt", "grace", "container")


def early(spec: Mapping[str, Any]) -> dict[str, Any]:
    return {key: spec[key] for key in EARLY}


class SpecError(ValueError):
    pass


def spec(given: Mapping[str, Any]) -> Spec:
    """A node spec with its defaults filled in; an unknown or missing key is a SpecError (a
    launcher and a host of different versions say so instead of guessing)."""
    unknown = sorted(set(given) - set(SPEC_DEFAULTS))
    if unknown:
        raise SpecError("unknown spec keys: " + ", ".join(unknown))
    out = {}
    for key, default in SPEC_DEFAULTS.items():
        if key in given:
            out[key] = given[key]
        elif default is REQUIRED:
            raise SpecError("the spec lacks " + key)
        else:
            out[key] = type(default)(default) if isinstance(default, (list, dict)) else default
    return out  # type: ignore[return-value]  # every key of Spec, each checked above


def say(verb: str, *args: object) -> str:
    """A launcher's word to a supervisor (a SAY_* verb and its arguments), as one line; free
    text goes last (its spaces are the reader's to join)."""
    return " ".join([verb, *(str(a) for a in args)])


def heard(words: List[str]) -> Tuple[str, List[str]]:
    """A launcher's word as its supervisor reads it (its line's words): its verb ("" if none)
    and its arguments."""
    return (words[0], words[1:]) if words else ("", [])


# Facts both sides act on, each said once here:
SMI_CSV = "--format=csv,noheader,nounits"  # how nvidia-smi is asked, by the hosts and the launcher
DAEMONS = ("docker", "podman")  # runtimes whose containers outlive the client: swept by label
# (and the inventory refuses their options on the others)


def file_sha256(path: str) -> str:
    """A file's name for job.sync and the probe, the same on both sides."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def beat_interval(link_timeout: float) -> float:
    """Heartbeats often enough that a few lost ones never end a lease."""
    return min(5.0, max(0.2, link_timeout / 6.0))
