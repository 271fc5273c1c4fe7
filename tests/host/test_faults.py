"""Faults on this machine (local transport): the real supervisors, hub and engine, several
nodes on one host. The verdict names the right node and cause, the run ends as soon as all is
known, and no line is lost. Faults that need a network (a cut link) are tests/e2e's.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from runtools import run_job

from ddptui.remote import inventory
from ddptui.remote.events import Event, LogBatch, NodeRanks, NodeStarted
from ddptui.remote.host import nodes, procs
from ddptui.remote.run.runner import Run

SLEEPER = "import os, time\nprint('up', os.environ['NODE_RANK'], flush=True)\ntime.sleep(300)\n"
LEASE = 20.0  # link_timeout: every end below must come well before it


def write(tmp: Path, nodes: int = 3, hosts: dict[int, dict[str, Any]] | None = None,
          **job: Any) -> inventory.Inventory:  # fmt: skip
    (tmp / "job.py").write_text(SLEEPER)
    doc = {
        "defaults": {"transport": "local", "workdir": str(tmp), "python": sys.executable},
        "hosts": [
            {"host": "localhost", "name": f"node{k}", **(hosts or {}).get(k, {})}
            for k in range(nodes)
        ],
        "job": {
            "script": "job.py", "launcher": "env", "master_port": "auto", "stop_grace": 1,
            "link_timeout": LEASE, "nccl": {"socket_ifname": None}, **job,
        },
    }  # fmt: skip
    (tmp / "inventory.yaml").write_text(yaml.safe_dump(doc))
    return inventory.load(tmp / "inventory.yaml")


def node_dir(run_id: str, k: int) -> Path:
    """Node k's private directory on its host (this machine): state.json, its spool."""
    return Path.home() / ".local/state/ddptui/runs" / run_id / f"n{k}"


def supervisors(run_id: str) -> list[int]:
    """The run's supervisors (and their guardians): their command line names its directory."""
    found = []
    for pid in procs.all_pids():
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if run_id.encode() in cmd and nodes.DAEMON_BOOT.encode() in cmd:
            found.append(pid)
    return found


def up(events: list[Event], nodes: int) -> bool:
    said = {text for e in events if isinstance(e, LogBatch) for _, text in e.lines}
    return len([e for e in events if isinstance(e, NodeStarted)]) >= nodes and all(
        f"up {k}" in said for k in range(nodes)
    )


@pytest.mark.parametrize("k", [1, 0])
async def test_a_killed_supervisor_ends_the_run_at_once(tmp_path: Path, k: int) -> None:
    """SIGKILL of node k's supervisor: the launcher finds its stream ended without a word and
    tells the hub (of the hub's own, every peer), so nobody waits out link_timeout for it."""
    inv = write(tmp_path)
    killed: list[float] = []

    def kill(run: Run, events: list[Event]) -> None:
        if not killed and up(events, 3):
            pid = json.loads((node_dir(run.run_id, k) / "state.json").read_text())["pid"]
            os.kill(pid, signal.SIGKILL)
            killed.append(time.monotonic())

    fin, _ = await run_job(inv, tmp_path, kill, timeout=LEASE)
    took = time.monotonic() - killed[0]
    print(f"node {k}'s supervisor killed: the launcher ended {took:.2f} s later")
    assert fin.status == "failed" and fin.failure is not None
    assert (fin.failure.host, fin.failure.message) == (
        f"node{k}",
        "its supervisor died (the host's part is swept by the run's tags)",
    )
    assert took < 5  # the others stopped (grace 1 s) and ended: not LEASE later
    run_id = json.loads((tmp_path / "run" / "run.json").read_text())["run_id"]
    assert not supervisors(run_id)


async def test_a_node_that_cannot_start_ends_the_run_at_once(tmp_path: Path) -> None:
    """node 0's job cannot start (no workdir there): its hub said where it listens first, so
    the others learn it, tell it their end, and leave at once (before, each waited
    link_timeout for an address that never came)."""
    inv = write(tmp_path, hosts={0: {"workdir": str(tmp_path / "nowhere")}})
    t0 = time.monotonic()
    fin, _ = await run_job(inv, tmp_path, timeout=LEASE)
    took = time.monotonic() - t0
    print(f"node 0 could not start: the run ended in {took:.2f} s")
    assert fin.failure is not None and fin.failure.host == "node0"
    assert "cannot start" in fin.failure.message
    assert took < 5
    run_id = json.loads((tmp_path / "run" / "run.json").read_text())["run_id"]
    assert not supervisors(run_id)


# The env style as Lightning runs it: the script is local rank 0 and starts local rank 1 (its
# LOCAL_RANK); when its child dies it notices (a pipe's end), says what c10d says, tears down
# (torch takes a while) and fails, its dead child reaped as its Popen goes.
LIGHTNING_LIKE = """
import os, subprocess, sys, time
node = int(os.environ["NODE_RANK"])
if "LOCAL_RANK" in os.environ:
    print(f"rank {node * 2 + 1} up", flush=True)
    time.sleep(300)
r, w = os.pipe()
env = {**os.environ, "LOCAL_RANK": "1"}
child = subprocess.Popen([sys.executable, __file__], env=env, pass_fds=(w,))
os.close(w)
print(f"rank {node * 2} up", flush=True)
os.read(r, 1)
print("[W1125 00:33:30.133239418 socket.cpp:207] [c10d] The hostname of the client socket "
      "cannot be retrieved. err=-3", file=sys.stderr, flush=True)
time.sleep(0.5)
sys.exit(1)
"""


# A torchrun rank that, like one whose store reverse-looks its peers up, warns first.
WARNS_THEN_TICKS = """
import os, sys, time
print(WARNING, file=sys.stderr, flush=True)
for i in range(100000):
    print(f"tick {os.environ['RANK']} {i}", flush=True)
    time.sleep(0.05)
""".replace("WARNING", repr(
    "[W1125 00:33:30.133239418 socket.cpp:207] [c10d] The hostname of the client socket "
    "cannot be retrieved. err=-3"
))  # fmt: skip


def rank_pid(run_id: str, node: int, env: dict[str, str]) -> int | None:
    """The pid of node's process whose environment holds `env` (a rank's)."""
    for pid in procs.tagged_pids({"DDPTUI_RUN_ID": run_id, "DDPTUI_NODE": str(node)}):
        if env.items() <= procs.environ(pid).items():
            return pid
    return None


@pytest.mark.parametrize("style", ["env", "torchrun"])
async def test_a_rank_killed_is_named_with_its_signal(tmp_path: Path, style: str) -> None:
    """SIGKILL of rank 3 (the OOM killer's way): named with its signal, never by the last
    line it printed (c10d's warning). Before, the env style named no rank at all."""
    if style == "env":
        (tmp_path / "lightning_like.py").write_text(LIGHTNING_LIKE)
        job: dict[str, Any] = {"script": "lightning_like.py", "nproc_per_node": 2}
        rank3 = {"NODE_RANK": "1", "LOCAL_RANK": "1"}
    else:
        (tmp_path / "ticks.py").write_text(WARNS_THEN_TICKS)
        job = {"script": "ticks.py", "launcher": "torchrun", "nproc_per_node": 2}
        rank3 = {"RANK": "3"}
    inv = write(tmp_path, nodes=2, **job)
    killed: list[int] = []

    def kill(run: Run, events: list[Event]) -> None:
        said = {text for e in events if isinstance(e, LogBatch) for _, text in e.lines}
        if killed or not ({"rank 3 up", "tick 3 40"} & said):  # its rank scan is done by then
            return
        if style == "env" and not any(
            isinstance(e, NodeRanks) and e.node_rank == 1 for e in events
        ):
            return  # node1's scan found its ranks: it watches them
        pid = rank_pid(run.run_id, 1, rank3)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    fin, _ = await run_job(inv, tmp_path, kill, timeout=LEASE)
    assert killed and fin.failure is not None, fin
    root = fin.failure
    assert (root.host, root.rank, root.exit_code) == ("node1", 3, -signal.SIGKILL), root
    assert root.message == "killed by SIGKILL (out of memory?)"


def spooled(run_id: str, k: int, rank: int) -> int:
    """How many of rank's tick lines node k's spool holds (all it printed)."""
    spool = b"".join(p.read_bytes() for p in sorted(node_dir(run_id, k).glob("spool.*")))
    return spool.count(b"]:tick %d " % rank)


def test_a_launcher_stopped_past_the_lease_ends_lost_and_keeps_every_line(tmp_path: Path) -> None:
    """A laptop's lid closed (SIGSTOP of the launcher) past the lease: the hosts end the run
    by their lease. On waking, the launcher reads what they said meanwhile before it judges
    anyone: the run is lost, no host blamed, it says how long it was away, and every line the
    ranks printed is in rank-N.log (before, each host was called lost, and its last lines
    stayed in its spool)."""
    from e2etools import Cli, wait_for

    tick = str(Path(__file__).parents[1] / "data" / "tick.py")
    job = {"script": tick, "args": ["100000", "0.05"], "launcher": "torchrun",
           "nproc_per_node": 2, "link_timeout": 3}  # fmt: skip
    inv = write(tmp_path, nodes=2, **job)
    cli = Cli(inv.path, tmp_path / "run", env={"XDG_DATA_HOME": str(tmp_path / "data")})
    run_id = cli.run_id()
    wait_for(lambda: "tick 3 20" in cli.stdout, 60, "every rank to tick")
    cli.proc.send_signal(signal.SIGSTOP)
    try:

        def ended(k: int) -> bool:
            state = json.loads((node_dir(run_id, k) / "state.json").read_text())
            return state.get("status") == "lost"

        wait_for(lambda: ended(0) and ended(1), 30, "the hosts to end the run on their lease")
    finally:
        cli.proc.send_signal(signal.SIGCONT)
    assert cli.wait(60) == 1, cli.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["status"], summary["failure"]) == ("lost", None)
    assert summary["reason"].startswith("ddptui itself was not running for ")
    assert summary["reason"].endswith(" past the 3 s lease: the hosts ended the run")
    assert f"run lost in {summary['elapsed']:.1f} s (exit 1): {summary['reason']}" in cli.stderr
    assert "lost: not heard from" not in cli.stderr
    for r in range(4):
        log = (tmp_path / "run" / f"rank-{r}.log").read_text().splitlines()
        ticks = [line for line in log if line.startswith(f"tick {r} ")]
        assert ticks == [f"tick {r} {i}" for i in range(len(ticks))]  # in order, none twice
        assert len(ticks) == spooled(run_id, r // 2, r) > 40  # and every one the host kept
