"""Attacks on a run from its neighbours, on real sshd test hosts (issue 19): anyone on the
cluster network flooding node 0's hub, and a second local user who may write a shared workdir;
a host of the run speaking as another (issue 37).
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2etools import Cli, Cmd, assert_nothing_left, wait_for
from hostile import SHAPES, printed
from testhosts import REPO, TestCluster, as_neighbour, neighbour, netns_popen

from ddptui.remote import inventory
from ddptui.remote.events import BadHost, Event, Notice
from ddptui.remote.run.runner import Run

pytestmark = [pytest.mark.e2e, pytest.mark.security]

FLOOD = str(Path(__file__).parents[1] / "support" / "flood.py")


def node_dir(cluster: TestCluster, i: int, run_id: str) -> Path:
    """Host i's private directory of the run (its HOME is its own: testhosts.py)."""
    return cluster.hosts[i].home / ".local" / "state" / "ddptui" / "runs" / run_id / f"n{i}"


def spool(ndir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(ndir.glob("spool.*")))


def ticks(text: bytes | str, rank: int) -> list[int]:
    pattern = rf"tick {rank} (\d+)"
    found = re.findall(pattern.encode() if isinstance(text, bytes) else pattern, text)
    return [int(i) for i in found]


@pytest.fixture
def few_open_files(cluster: TestCluster) -> Iterator[None]:
    """node0's logins (and so its supervisor) under the usual 1,024 open files."""
    with cluster.login_shell("ulimit -n 1024\n", 0):
        yield


@pytest.mark.usefixtures("few_open_files")
def test_a_flood_from_another_host_never_cuts_node0_off(
    cluster: TestCluster, tmp_path: Path
) -> None:
    """1,100 connections from another host, each sending a byte every 8 s, against node 0's
    hub: they took a thread and a file each until node 0's supervisor hit EMFILE, its accept
    loops ended for good, `attach` never showed node 0's lines again and `stop` left its ranks
    running. Now the hub holds 64 at most, and the run is seen and stopped as ever."""
    data_home = {"XDG_DATA_HOME": str(tmp_path / "data")}
    job = {
        "script": "tests/data/tick.py", "args": ["100000", "0.05"], "nproc_per_node": 2,
        "master_port": 29671, "link_timeout": 30, "stop_grace": 2,
    }  # fmt: skip
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1])
    cli = Cli(inv, tmp_path / "run", flags=["--detach"], env=data_home)
    assert cli.wait(120) == 0, cli.stderr
    run_id = cli.stdout.splitlines()[-1]
    ndir = node_dir(cluster, 0, run_id)
    supervisor = json.loads((ndir / "state.json").read_text())["pid"]
    limits = Path(f"/proc/{supervisor}/limits").read_text()
    assert re.search(r"Max open files\s+1024\s", limits), limits
    port = int(wait_for(lambda: re.search(rb'"hub_port": (\d+)', spool(ndir)), 30, "hub")[1])

    flood = netns_popen(cluster, 3, [sys.executable, FLOOD, cluster.hosts[0].addr, str(port),
                                     "1100", "8"])  # fmt: skip
    try:
        assert flood.stdout is not None
        while int(flood.stdout.readline().split()[1]) < 1100:  # "made M", each round
            pass
        flood.stdout.readline()  # a second round: every connection has had its byte
        open_files = len(list(Path(f"/proc/{supervisor}/fd").iterdir()))

        since = max(ticks(spool(ndir), 0))
        attach = Cmd(["attach", run_id], tmp_path / "attach", data_home)
        wait_for(lambda: max(ticks(attach.stdout, 0), default=0) > since + 20, 60, "node0's lines")
        attach.proc.send_signal(signal.SIGINT)  # detach: the run goes on
        assert attach.wait(30) == 130, attach.stderr

        stop = Cmd(["stop", run_id], tmp_path / "stop", data_home)
        assert stop.wait(60) == 0, stop.stderr
        assert_nothing_left(cluster, run_id, timeout=10)
        assert open_files < 200, open_files  # the hub's share: 64 handshakes at most
    finally:
        flood.kill()
        flood.wait()


@pytest.fixture
def shared_workdir() -> Iterator[Path]:
    """A project directory of the neighbour's, that root syncs code into."""
    top = Path(tempfile.mkdtemp(prefix="ddptui-shared-"))
    top.chmod(0o755)
    work = top / "proj"
    work.mkdir()
    user = neighbour()
    shutil.chown(work, user.pw_uid, user.pw_gid)
    try:
        yield work
    finally:
        shutil.rmtree(top)


PLANT = """
import os, sys
work, victim, what, first = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if what == "tmp names":
    for pid in range(first, first + 4000):  # every pid the sync's python may get
        os.symlink(victim, os.path.join(work, "train.py.ddptui-sync.node0.%d" % pid))
else:
    os.symlink(os.path.dirname(victim), os.path.join(work, "pkg"))
"""


@pytest.mark.parametrize("what", ["tmp names", "a directory"])
def test_symlinks_planted_in_a_shared_workdir_touch_nothing_of_roots(
    cluster: TestCluster, tmp_path: Path, shared_workdir: Path, what: str
) -> None:
    """A neighbour who may write the workdir plants the sync's tmp names as symlinks to a file
    of root's (root's 0600 file was overwritten and made 0644), or a directory as a symlink to
    one of root's (the code went in there). Now the tmp names are random and made exclusively,
    and the symlinked directory is refused, naming it."""
    secrets = tmp_path / "root-only"
    secrets.mkdir(mode=0o700)
    victim = secrets / "credentials"
    victim.write_text("root's secret\n")
    victim.chmod(0o600)
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    shutil.copy(REPO / "examples" / "train.py", src / "train.py")
    (src / "pkg" / "model.py").write_text("W = 1\n")

    first = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    planted = as_neighbour(cluster, 0, [sys.executable, "-c", PLANT, str(shared_workdir),
                                        str(victim), what, str(first)])  # fmt: skip
    assert planted.returncode == 0, planted.stderr
    job = {"script": "train.py", "args": ["--epochs", "1"], "sync": True, "master_port": 29672}
    inv = cluster.write_inventory(src / "inv.yaml", job, hosts=[0], workdir=str(shared_workdir))
    cli = Cli(inv, tmp_path / "run")
    if what == "tmp names":
        assert cli.wait() == 0, cli.stderr
        assert (shared_workdir / "train.py").read_bytes() == (src / "train.py").read_bytes()
    else:
        assert cli.wait() == 1, cli.stderr
        assert "refusing 'pkg/model.py': pkg is a symlink or not a directory" in cli.stderr
    assert victim.read_text() == "root's secret\n"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert sorted(p.name for p in secrets.iterdir()) == ["credentials"]


IMPOSTOR = """
import sys
from ddptui.remote.host import channel
addr, port, key, node = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
try:
    channel.dial((addr, port), key, node).close()
    print("let in")
except ValueError as exc:
    print(exc)
"""


async def test_a_host_of_the_run_cannot_speak_as_another(
    cluster: TestCluster, tmp_path: Path
) -> None:
    """Node 1's host, with the key its spec gave it, joins node 0's hub as node 2: refused and
    named, and the run goes on (on the one shared secret, node 2 was taken over, marked bad and
    lost, and the run stopped)."""
    job = {"script": "tests/data/tick.py", "args": ["100000", "0.2"], "nproc_per_node": 1,
           "master_port": 29673, "link_timeout": 30, "stop_grace": 2}  # fmt: skip
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1, 2])
    events: list[Event] = []
    run = Run(inventory.load(inv), events.append, run_dir=tmp_path / "run", checks=False)
    task = asyncio.create_task(run.execute())
    try:
        await asyncio.wait_for(run.gang.running.wait(), 120)
        argv = [sys.executable, "-c", IMPOSTOR, cluster.hosts[0].addr, str(run.gang.hub_port),
                run.launch.key(1), "2"]  # fmt: skip
        said = await asyncio.to_thread(cluster.netns_exec, 1, argv)
        assert said.stdout.strip() == "the hub did not prove itself", said
        refused = "node1 (node 1) tried to join the run's hub as node2 (node 2): refused"
        await asyncio.to_thread(
            wait_for,
            lambda: any(isinstance(e, Notice) and e.text == refused for e in events),
            30,
            "the hub to name the impostor",
        )
    finally:
        run.stop()
        fin = await task
    assert fin.status == "stopped" and not [e for e in events if isinstance(e, BadHost)]
    assert_nothing_left(cluster, run.run_id)


HOSTILE_JOB = {"script": "tests/data/hostile_job.py", "nproc_per_node": 1, "master_port": "auto",
               "link_timeout": 10, "stop_grace": 2}  # fmt: skip
# What no display may pass on: C0 and C1 controls but newline and tab (ESC starts every escape
# sequence; BEL and ST end OSC and DCS strings), and the clipboard's and the title's payloads.
COMMANDS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]|cm0gLXJmIH4=|pwned")


@pytest.mark.parametrize("launcher", ["torchrun", "env"])
def test_a_rank_printing_200_kb_hostile_lines_never_stops_the_run(
    cluster: TestCluster, tmp_path: Path, launcher: str
) -> None:
    """Rank 0 prints a 200 KB line of every shape that made a parser backtrack (issue 37: one
    16 KB line held node 0's supervisor, its hub and heartbeats, for 13 s; the run was lost past
    link_timeout): the other rank's lines go on streaming, nothing is lost and the run succeeds."""
    stop = tmp_path / "stop"
    job = {**HOSTILE_JOB, "args": ["lines", str(stop)], "launcher": launcher}
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1])
    cli = Cli(
        inv,
        tmp_path / "run",
        flags=["--skip-checks"],
        env={"XDG_DATA_HOME": str(tmp_path / "data")},
    )
    run_id = cli.run_id()
    # the env style's lines are untagged (no torch here): each is its node's
    kind = "node" if launcher == "env" else "rank"
    log0, log1 = (cli.run_dir / f"{kind}-{i}.log" for i in (0, 1))
    wait_for(lambda: log0.exists() and b"hostile lines printed" in log0.read_bytes(), 90, "rank 0")
    since = max(ticks(log1.read_bytes(), 1))
    wait_for(lambda: max(ticks(log1.read_bytes(), 1)) > since + 20, 30, "rank 1's lines")
    stop.touch()
    assert cli.wait() == 0, cli.stderr[-3000:]
    assert "lost" not in cli.stderr, cli.stderr[-3000:]
    shapes = [printed(line, 200_000) for line in SHAPES.values()]
    assert log0.read_bytes().split(b"\n")[1:-2] == [s.encode() for s in shapes]  # each whole
    assert ticks(log1.read_bytes(), 1) == list(range(len(ticks(log1.read_bytes(), 1))))
    assert_nothing_left(cluster, run_id)


def test_terminal_commands_a_job_prints_reach_no_display(
    cluster: TestCluster, tmp_path: Path
) -> None:
    """OSC 52 (the clipboard), OSC 0 (the title), DCS, APC, CSI and C1 controls in a rank's
    progress line, a tracker's link and the exception it dies of: none reaches ddptui's words on
    the console (the failure banner, the link), `runs`, `plot` or job.notify's environment
    (issue 37, item 4)."""
    data_home = {"XDG_DATA_HOME": str(tmp_path / "data")}
    notified = tmp_path / "notified"
    job = {**HOSTILE_JOB, "args": ["escapes"],
           "notify": {"command": f"env > {notified}", "events": ["failed"]}}  # fmt: skip
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0])
    cli = Cli(inv, tmp_path / "run", flags=["--skip-checks"], env=data_home)
    run_id = cli.run_id()
    assert cli.wait() == 1, cli.stderr[-3000:]
    assert "ValueError: hostile abcde" in cli.stderr  # the failure banner, made safe
    listed = Cmd(["runs"], tmp_path / "runs", data_home)
    plot = Cmd(["plot", run_id], tmp_path / "plot", data_home)
    assert listed.wait(60) == 0 and plot.wait(60) == 0, listed.stderr + plot.stderr
    assert "hostile abcde" in listed.stdout and "loss" in plot.stdout
    env = wait_for(lambda: notified.exists() and notified.read_text(errors="replace"), 30, "notify")
    said = dict(line.split("=", 1) for line in env.splitlines() if line.startswith("DDPTUI_"))
    assert said["DDPTUI_MESSAGE"] == "rank 0 failed on node0", said
    assert said["DDPTUI_LINKS"] == "http://localhost:6006/", said
    # ranks' lines in a pipe stay as written (console.py): the rest is ddptui's words on them
    own = "\n".join(x for x in cli.stderr.split("\n") if not x.startswith("["))
    for shown in (own, listed.stdout, plot.stdout, plot.stderr, env):
        assert not COMMANDS.search(shown), COMMANDS.findall(shown)
