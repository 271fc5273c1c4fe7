"""The cluster at a glance and into a hang, on the ssh test hosts.

- `ddptui` in a real terminal (tmux) on 3 hosts with recorded nvidia-smi stand-ins: each
  host's GPUs and the busy GPU's process within 20 s, no key pressed, nothing started but each
  host's agent (whose monitor streams the figures); `q` quits at once and leaves no agent.
- The agents never outlive the launcher: SIGKILLed, or its link to a host cut (veth down).
- A stall on 3 hosts x 2 ranks (tests/data/stall.py, real torchrun with gloo): `hang_after`
  warns and saves every rank's stack unasked; `stacks --json` puts rank 3 alone in its own
  function and the five others in one group; the flight recorder's traces come back with
  torch's analyser naming rank 3 as missing from the barrier.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import nvidia_smi
import pytest
from testhosts import REPO, TestCluster, pids_with_env, veth_name
from tmux import Tmux
from tmux import wait_for as wait_on_screen

pytestmark = pytest.mark.e2e

DATA = Path(__file__).parents[1] / "data"


def on_host(cluster: TestCluster, i: int) -> list[int]:
    """What runs on test host i, less its sshd (the listener, and each session's: `sshd:
    root@notty` names itself so)."""
    netns = os.stat(f"/run/netns/{cluster.hosts[i].netns}")
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            ns = os.stat(f"/proc/{entry.name}/ns/net")
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes()
        except OSError:
            continue
        program = Path(cmdline.split(b"\0")[0].decode(errors="replace")).name
        if (ns.st_dev, ns.st_ino) == (netns.st_dev, netns.st_ino) and not program.startswith(
            "sshd"
        ):
            found.append(int(entry.name))
    return found


def agents_on(cluster: TestCluster, *hosts: int) -> list[int]:
    """Pids of ddptui's host agents (remote/host/agent.py) running on these test hosts."""
    found = []
    for i in hosts:
        for pid in on_host(cluster, i):
            try:
                if b"from ddph import agent" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
            except OSError:
                continue
    return found


def wait(cond: Callable[[], object], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.1)


# -- the dashboard opens on the cluster ----------------------------------------------------------


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_dashboard_opens_on_the_cluster_then_quits_leaving_nothing(
    gpu_cluster: TestCluster, tmp_path: Path
) -> None:
    job = {"script": "examples/train.py", "master_port": 29661}
    inv = gpu_cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=(0, 1, 2))
    # node0's busy GPU 2 runs a process of user nobody that exists here (the recorded pid
    # does not), so the dashboard can say whose it is
    owned = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                              "sleep", "300"])  # fmt: skip
    recording = tmp_path / "h100-owned"
    shutil.copytree(nvidia_smi.DATA / nvidia_smi.H100_BUSY, recording)
    apps = recording / "query-compute-apps.csv"
    apps.write_text(apps.read_text().replace("48211", str(owned.pid)))
    stand_in = f"#!/bin/sh\ndata={recording}\n" + (nvidia_smi.DATA / "stand-in.sh").read_text()
    gpu_cluster.put_tool(0, "nvidia-smi", stand_in)
    ddptui = str(Path(sys.executable).parent / "ddptui")
    env = {"XDG_DATA_HOME": str(tmp_path / "data"), "TERM": "xterm-256color"}
    term = Tmux([ddptui, "-i", str(inv)], env, (120, 32))
    try:
        t0 = time.monotonic()

        def glance() -> bool:
            s = term.screen()
            return all(x in s for x in ("8× H100", "4× A100", "2:python3", "5:python"))  # noqa: RUF001

        wait_on_screen(glance, "every host's GPUs and the busy GPUs' processes", 20, term)
        took = time.monotonic() - t0
        busy = f"GPU 2 in use by pid {owned.pid} /usr/bin/python3 (70.1 GiB)"
        wait_on_screen(lambda: busy in term.screen(), "the findings", 5, term)
        screen = term.screen()
        assert "none" in next(ln for ln in screen.splitlines() if "node2" in ln)
        wait_on_screen(lambda: "hosts up 3/3" in term.screen(), "every host up", 20, term)
        assert "no run yet" in term.screen()
        # the checks brought the first figures; then each GPU host's monitor keeps them live
        wait_on_screen(lambda: "2:python3 (nobody)" in term.screen(), "whose process", 10, term)
        agents = agents_on(gpu_cluster, 0, 1, 2)
        assert len(agents) == 3, "one agent per host"
        running = [p for h in (0, 1, 2) for p in on_host(gpu_cluster, h) if p not in agents]
        assert running == [], "nothing but the agents runs on the hosts"
        term.send("q")
        t1 = time.monotonic()
        wait_on_screen(lambda: not term.alive, "ddptui to exit", 10, term)
        quit_s = time.monotonic() - t1
        wait(lambda: not agents_on(gpu_cluster, 0, 1, 2), "the agents to leave", 10)
        assert not any(on_host(gpu_cluster, h) for h in (0, 1, 2)), "nothing left on the hosts"
        print(f"GPUs of every host on screen after {took:.1f} s; q took {quit_s:.2f} s")
        assert quit_s < 3
    finally:
        term.kill()
        owned.kill()
        owned.wait()
        gpu_cluster.put_tool(0, "nvidia-smi", nvidia_smi.stand_in(nvidia_smi.H100_BUSY))


# -- the agents never outlive the launcher -------------------------------------------------------

WATCHER = """
import asyncio, sys
from ddptui.remote import inventory
from ddptui.remote.run.cluster import Cluster
inv = inventory.load(sys.argv[1])
def emit(event):
    print(type(event).__name__, getattr(event, "host", ""), getattr(event, "state", ""), flush=True)
asyncio.run(Cluster(inv, emit).run())
"""


def watcher(inv: Path, out: Path) -> subprocess.Popen[str]:
    """A launcher of its own holding the cluster's agents (and their monitors) open; what it
    hears goes to `out`."""
    with out.open("w") as f:
        return subprocess.Popen([sys.executable, "-c", WATCHER, str(inv)], cwd=REPO, stdout=f,
                                stderr=subprocess.STDOUT, text=True)  # fmt: skip


def test_agents_leave_when_the_launcher_is_killed(gpu_cluster: TestCluster, tmp_path: Path) -> None:
    inv = gpu_cluster.write_inventory(tmp_path / "inv.yaml", {"script": "x.py"}, hosts=(0, 1))
    proc = watcher(inv, tmp_path / "watcher.out")
    try:
        wait(lambda: len(agents_on(gpu_cluster, 0, 1)) == 2, "an agent on each host", 30)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        wait(lambda: not agents_on(gpu_cluster, 0, 1), "the agents to leave (stdin EOF)", 10)
    finally:
        proc.kill()


def test_an_agent_leaves_when_its_link_is_cut(gpu_cluster: TestCluster, tmp_path: Path) -> None:
    """A cut link never closes the agent's stdin (its sshd does not notice): its lease does."""
    job = {"script": "x.py", "link_timeout": 3}
    inv = gpu_cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=(0, 1))
    out = tmp_path / "watcher.out"
    proc = watcher(inv, out)
    veth = veth_name(gpu_cluster.prefix, 1)
    try:
        wait(lambda: len(agents_on(gpu_cluster, 0, 1)) == 2, "an agent on each host", 30)
        # told its lease: an agent keeps the default (60 s) until its launcher says
        wait(lambda: "GpuStats node1" in out.read_text(), "node1's GPU figures", 30)
        [on_node1] = agents_on(gpu_cluster, 1)
        subprocess.run(["ip", "link", "set", veth, "down"], check=True)
        t0 = time.monotonic()
        wait(lambda: not Path(f"/proc/{on_node1}").exists(), "node1's agent to leave", 15)
        print(f"node1's agent left {time.monotonic() - t0:.1f} s after its link was cut")
        assert len(agents_on(gpu_cluster, 0)) == 1  # node0's goes on
    finally:
        subprocess.run(["ip", "link", "set", veth, "up"], check=False)
        proc.kill()
        proc.wait()


# -- into a hang -------------------------------------------------------------------------------


def ddptui(*args: str) -> list[str]:
    return [sys.executable, "-m", "ddptui.tui.cli", "--headless", *args]


def test_a_stall_is_caught_and_every_rank_stack_grouped(
    cluster: TestCluster, tmp_path: Path
) -> None:
    job = {
        "script": str(DATA / "stall.py"),
        "nproc_per_node": 2,
        "master_port": 29662,
        "stop_grace": 2,
        "hang_after": 15,
        "on_hang": "warn",  # the stall stays for its stacks to be read (the run's own watch)
        "nccl": {"flight_recorder": True},
    }
    for host in cluster.hosts[:3]:  # CPU hosts: the GPU stand-ins of the tests above go
        (host.bin_dir / "nvidia-smi").unlink(missing_ok=True)
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=(0, 1, 2))
    run_dir = tmp_path / "run"
    log = tmp_path / "launch.log"  # the ranks' lines and ddptui's own
    out = log.open("w")
    launch = subprocess.Popen(
        ddptui("launch", "-i", str(inv), "--run-dir", str(run_dir)),
        cwd=REPO, stdout=out, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait(lambda: log.read_text().count("all_reduce done") == 6, "every rank's all_reduce", 120)
        t0 = time.monotonic()
        res = subprocess.run(
            ddptui("stacks", str(run_dir), "-i", str(inv), "--json"),
            cwd=REPO, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        took = time.monotonic() - t0
        assert res.returncode == 0, res.stderr
        found = json.loads(res.stdout)
        alone, rest = found["groups"]
        assert alone["ranks"] == [3] and alone["hosts"] == ["node1"]
        assert alone["frames"][0]["function"] == "load_batch"
        assert alone["frames"][0]["file"].endswith("stall.py")
        assert rest["ranks"] == [0, 1, 2, 4, 5] and rest["hosts"] == ["node0", "node1", "node2"]
        assert any(f["function"] == "barrier" for f in rest["frames"])
        assert found["elapsed_s"] < 5, found["elapsed_s"]
        recorder = found["flight_recorder"]
        assert recorder["ranks"] == [0, 1, 2, 3, 4, 5], recorder
        assert "missing ranks: {3}" in recorder["verdict"], recorder["verdict"]
        print(f"stacks --json of 6 ranks on 3 hosts: {took:.2f} s (dump {found['elapsed_s']} s)")
        # hang_after: 15 s after the last line, unasked: the warning and a stacks file
        wait(lambda: "every rank's stack saved to" in log.read_text(), "the hang's capture", 60)
        text = log.read_text()
        assert "no rank printed a line for 1" in text and "ranks 0-5 on node[0-2]" in text
        saved = sorted(run_dir.glob("stacks-*.txt"))
        assert len(saved) == 2  # the one asked for, and the hang's
        assert saved[-1].read_text().startswith("rank 3 (node1)")
        events = [json.loads(line) for line in (run_dir / "events.jsonl").open()]
        assert any(e["event"] == "HangDetected" and e["ranks"] == list(range(6)) for e in events)
        assert any(e["event"] == "StacksCaptured" for e in events)
    finally:
        launch.send_signal(signal.SIGINT)
        launch.wait(timeout=60)
        out.close()
    run_id = json.loads((run_dir / "events.jsonl").open().readline())["run_id"]
    wait(lambda: not pids_with_env("DDPTUI_RUN_ID", run_id), "nothing of the run left", 20)
