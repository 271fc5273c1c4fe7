"""GPU leases on the ssh test hosts, with the nvidia-smi stand-ins (each host's GPUs its own
UUIDs) and two real users: root and a colleague with a key and a home of its own.

A launch whose GPUs another user's run holds is refused at once, naming it, and nothing of it
starts; with --wait it queues and starts when they are given back, never on a GPU while another
run's rank is on it (each rank notes its interval and CUDA_VISIBLE_DEVICES). A run whose
supervisors are SIGKILLed holds nothing: the next launch takes its GPUs and names it. Two
one-GPU launches share a host; `gpus:` pins one, and one running other work is refused.
`ddptui who` says it before, during, after.

The default run takes the lean story (one host, launcher env: refused, queued, given back); the
longer ones here are listed in tests/slow_e2e.txt, and the four launches of two users at once
are in test_leases_slow_e2e.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nvidia_smi
import pytest
from e2etools import (
    Cli,
    Cmd,
    assert_nothing_left,
    cmdline,
    node_file,
    supervisors,
    wait_for,
)
from testhosts import COLLEAGUE, TestCluster

from ddptui.remote import inventory
from ddptui.remote.agents.fleet import fleet_for
from ddptui.remote.events import HostLeases
from ddptui.remote.exits import EXIT_REFUSED
from ddptui.remote.leases import who as leases_who
from ddptui.remote.run.runner import Run

pytestmark = pytest.mark.e2e

JOB = "tests/support/leasejob.py"
# node0 and node1: one H200 each (a run takes every GPU of both); node2: eight H100s, GPUs 2
# and 5 running other work
MACHINES = {0: nvidia_smi.H200, 1: nvidia_smi.H200, 2: nvidia_smi.H100_BUSY}


@pytest.fixture(scope="module")
def gpu_hosts(cluster: TestCluster) -> Iterator[TestCluster]:
    """The session's hosts with GPUs (stand-ins) and a colleague; the stand-ins go after."""
    cluster.add_colleague()
    for i, machine in MACHINES.items():
        cluster.put_tool(i, "nvidia-smi", nvidia_smi.stand_in(machine))
    try:
        yield cluster
    finally:
        for i in MACHINES:
            cluster.remove_tool(i, "nvidia-smi")


def job(out: Path, go: str, **more: Any) -> dict[str, Any]:
    """Its ranks hold their GPUs until OUT/GO exists (go() says so)."""
    return {"script": JOB, "args": [str(out), go], "nproc_per_node": "auto",
            "master_port": "auto", **more}  # fmt: skip


def go(out: Path, name: str) -> None:
    (out / name).touch()


def notes(out: Path, run_id: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob(f"{run_id}-r*.json"))]


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def who(inv: Path, base: Path, *flags: str) -> str:
    cmd = Cmd(["who", "-i", str(inv), *flags], base)
    assert cmd.wait(60) == 0, cmd.stderr
    return cmd.stdout


def states(inv: Path, base: Path) -> dict[str, list[str]]:
    """`who --json`: each host's GPUs' states."""
    found = json.loads(who(inv, base, "--json"))
    return {h["host"]: [g["state"] for g in h["gpus"]] for h in found["hosts"]}


def test_a_held_gpu_refuses_a_launch_queues_the_next_and_is_given_back(
    gpu_hosts: TestCluster, tmp_path: Path
) -> None:
    """The default run's story, lean: one host, ranks started directly (launcher: env); `who`
    is the longer stories' (tests/slow_e2e.txt)."""
    cluster = gpu_hosts
    out = cluster.shared_dir(tmp_path.name)
    lean = {"launcher": "env"}
    mine = cluster.write_inventory(tmp_path / "mine.yaml", job(out, "first", **lean), hosts=[0])
    theirs = cluster.write_inventory(
        tmp_path / "theirs.yaml", job(out, "now", **lean), hosts=[0],
        **cluster.colleague_defaults(),
    )  # fmt: skip
    go(out, "now")
    first = Cli(mine, tmp_path / "first")
    run_id = first.run_id()
    started = lambda: "rank 0/1" in _text(first.run_dir / "node-0.log")  # noqa: E731
    wait_for(started, 120, "its rank to start")  # untagged: it joins no group (launcher env)
    refused = Cli(theirs, tmp_path / "refused")
    queued = Cli(theirs, tmp_path / "queued", flags=["--wait"])
    wait_for(lambda: "waiting for GPUs, 1st in line" in queued.stderr, 60, "it to queue")
    assert refused.wait(120) == EXIT_REFUSED, refused.stderr
    assert f"root's run {run_id} holds GPU 0 on node0" in refused.stderr
    assert "run refused (exit 75): nothing was started" in refused.stderr
    gone = json.loads(refused.events()[0])["run_id"]
    assert not supervisors(gone) and not list(refused.run_dir.glob("rank-*.log"))

    go(out, "first")  # the first run ends: the queued one starts on its GPU
    assert first.wait(120) == 0, first.stderr
    assert queued.wait(120) == 0, queued.stderr
    [held], [after] = notes(out, run_id), notes(out, queued.run_id())
    assert held["cvd"] == after["cvd"] == "0" and after["user"] == COLLEAGUE
    assert after["start"] >= held["end"]  # never both at once


def test_a_launch_its_checks_refuse_gives_back_what_a_host_leased_early(
    gpu_hosts: TestCluster, tmp_path: Path
) -> None:
    """Each host is asked for its node's GPUs as soon as its own checks pass, while the others'
    go on: node1's fail (its workdir is missing), so node0 alone was asked, and the refused
    launch gives back what it took there, its agent still up (a dashboard's fleet outlives a
    launch: the agent's exit is not what frees it)."""
    cluster = gpu_hosts
    out = cluster.shared_dir(tmp_path.name)
    node1 = cluster.hosts[1]
    bad = {"host": node1.addr, "name": node1.name, "workdir": "/nonexistent/ddptui"}
    path = cluster.write_inventory(tmp_path / "inv.yaml", job(out, "never"), hosts=[0, bad])
    inv = inventory.load(path)
    asked: list[int] = []

    async def launch() -> tuple[str, list[HostLeases]]:
        fleet = fleet_for(inv)
        try:
            run = Run(inv, lambda event: None, run_dir=tmp_path / "run", fleet=fleet)
            early = run.launch.leases.ask_early

            def spied(k: int, want: dict[str, Any]) -> None:
                asked.append(k)
                early(k, want)

            run.launch.leases.ask_early = spied  # type: ignore[method-assign]
            status = (await run.execute()).status
            deadline = time.monotonic() + 30  # its agent hears the lease channel's end
            while True:
                found = await leases_who.gather(inv, fleet=fleet)
                gpus = [g.state for h in found for g in h.gpus or ()]
                if gpus == ["free", "free"] or time.monotonic() > deadline:
                    return status, found
                await asyncio.sleep(0.1)
        finally:
            await fleet.close()

    status, found = asyncio.run(launch())
    assert status == "failed" and asked == [0]
    assert [[g.state for g in h.gpus or ()] for h in found] == [["free"], ["free"]], found


def test_a_held_gpu_refuses_another_user_queues_them_and_is_given_back(
    gpu_hosts: TestCluster, tmp_path: Path
) -> None:
    cluster = gpu_hosts
    out = cluster.shared_dir(tmp_path.name)
    mine = cluster.write_inventory(tmp_path / "mine.yaml", job(out, "first"), hosts=[0, 1])
    theirs = cluster.write_inventory(
        tmp_path / "theirs.yaml", job(out, "now"), hosts=[0, 1], **cluster.colleague_defaults()
    )
    assert states(mine, tmp_path / "who-before") == {"node0": ["free"], "node1": ["free"]}

    go(out, "now")
    first = Cli(mine, tmp_path / "first")
    run_id = first.run_id()
    first.wait_ranks(2)
    during = who(mine, tmp_path / "who-during")
    assert f"held    root's run {run_id} (node 0," in during, during
    assert "attached, from root@" in during

    refused = Cli(theirs, tmp_path / "refused")
    assert refused.wait(120) == EXIT_REFUSED, refused.stderr
    assert f"root's run {run_id} holds GPU 0 on node[0-1]" in refused.stderr
    assert "run refused (exit 75): nothing was started" in refused.stderr
    assert refused.summary()["status"] == "refused"
    gone = json.loads((refused.run_dir / "events.jsonl").read_text().splitlines()[0])["run_id"]
    assert not supervisors(gone) and not list(refused.run_dir.glob("rank-*.log"))

    queued = Cli(theirs, tmp_path / "queued", flags=["--wait"])
    wait_for(lambda: "waiting for GPUs, 1st in line" in queued.stderr, 60, "it to queue")
    queue = who(mine, tmp_path / "who-queue")
    assert f"1. {COLLEAGUE}'s run {queued.run_id()} for 1 GPU(s) on node[0-1]" in queue

    go(out, "first")  # the first run ends: the queued one starts on its GPUs
    assert first.wait(120) == 0, first.stderr
    assert queued.wait(120) == 0, queued.stderr
    held, after = notes(out, run_id), notes(out, queued.run_id())
    assert len(held) == len(after) == 2
    assert {n["cvd"] for n in held + after} == {"0"}  # exactly the GPU each host leased
    assert {n["user"] for n in after} == {COLLEAGUE}
    assert min(n["start"] for n in after) >= max(n["end"] for n in held)  # never both at once
    after = who(mine, tmp_path / "who-after").splitlines()
    assert after[1].split() == ["node[0-1]", "0", "free"] and after[2] == "queue: nobody waits"


def test_a_killed_runs_gpus_are_taken_and_its_run_named(
    gpu_hosts: TestCluster, tmp_path: Path
) -> None:
    cluster = gpu_hosts
    out = cluster.shared_dir(tmp_path.name)
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job(out, "never"), hosts=[0, 1])
    go(out, "now")
    doomed = Cli(inv, tmp_path / "doomed", flags=["--detach"])
    assert doomed.wait(120) == 0, doomed.stderr
    run_id = doomed.run_id()
    found = supervisors(run_id)  # and their guardians, forked from them
    # the supervisors, told apart before any dies: a guardian whose supervisor is gone has
    # init for a parent, and killed with it, nothing is left to sweep the job's ranks
    heads = [pid for pid in found if parent(pid) not in found]
    assert len(heads) == 2, found
    for pid in heads:
        os.kill(pid, signal.SIGKILL)
    assert_nothing_left(cluster, run_id)
    left = who(inv, tmp_path / "who")
    assert f"(last root's run {run_id}, which died holding it)" in left, left

    short = cluster.write_inventory(tmp_path / "short.yaml", job(out, "now"), hosts=[0, 1])
    nxt = Cli(short, tmp_path / "next")
    assert nxt.wait(120) == 0, nxt.stderr
    assert f"root's run {run_id} held GPU 0 on node[0-1]" in nxt.stderr
    assert "it died holding them (its supervisor was killed); taken" in nxt.stderr


@pytest.mark.parametrize("launcher", ["env", "torchrun"])
def test_a_run_crashed_whole_leaves_no_rank_and_its_gpus_are_taken_naming_it(
    gpu_hosts: TestCluster, tmp_path: Path, launcher: str
) -> None:
    """Every process of a detached run but its ranks SIGKILLed at once (its supervisor, its
    guardian, torchrun: a crash, `pkill -9 -f`): its ranks go too, by the kernel, within seconds
    and with no launch after it; the next launch takes its GPU and names it. One host; the
    default run takes launcher env (its rank is what the supervisor starts), torchrun's (its
    ranks are torchrun's) is in tests/slow_e2e.txt."""
    cluster = gpu_hosts
    out = cluster.shared_dir(tmp_path.name)
    style = {"launcher": launcher}
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job(out, "never", **style), hosts=[0])
    doomed = Cli(inv, tmp_path / "doomed", flags=["--detach"])
    assert doomed.wait(120) == 0, doomed.stderr
    run_id = doomed.run_id()
    ours = supervisors(run_id)  # the supervisor and its guardian
    job_pids = lambda: [p for p in cluster.pids_with_env("DDPTUI_RUN_ID", run_id)  # noqa: E731
                        if p not in ours]  # fmt: skip
    ranks = lambda: [p for p in job_pids() if "torch" not in cmdline(p)]  # noqa: E731
    wait_for(ranks, 60, "its rank to start")  # torchrun's imports come first
    if launcher == "torchrun":  # its rank's Python has started (and bound itself): it said so
        ndir = node_file(cluster, 0, run_id, "n0", "")
        said = lambda: any("rank 0/1" in p.read_text() for p in ndir.rglob("stdout.log"))  # noqa: E731
        wait_for(said, 60, "its rank's first line")
    assert len(ours) == 2 and len(ranks()) == 1, (ours, job_pids())
    for pid in ours + [p for p in job_pids() if p not in ranks()]:
        os.kill(pid, signal.SIGKILL)
    assert assert_nothing_left(cluster, run_id, timeout=5) < 5

    nxt = cluster.write_inventory(tmp_path / "next.yaml", job(out, "now", **style), hosts=[0])
    go(out, "now")
    after = Cli(nxt, tmp_path / "next")
    assert after.wait(120) == 0, after.stderr
    assert f"root's run {run_id} held GPU 0 on node0" in after.stderr
    assert "it died holding them (its supervisor was killed); taken" in after.stderr


def test_one_gpu_launches_share_a_host_and_a_busy_one_is_refused(
    gpu_hosts: TestCluster, tmp_path: Path
) -> None:
    cluster = gpu_hosts
    out = cluster.shared_dir(tmp_path.name)
    one = cluster.write_inventory(
        tmp_path / "one.yaml", job(out, "all", nproc_per_node=1), hosts=[2]
    )
    pinned = cluster.write_inventory(
        tmp_path / "pinned.yaml", job(out, "all", nproc_per_node=1),
        hosts=[{"host": cluster.hosts[2].addr, "name": "node2", "gpus": [3]}],
        **cluster.colleague_defaults(),
    )  # fmt: skip
    busy = cluster.write_inventory(
        tmp_path / "busy.yaml", job(out, "all", nproc_per_node=1),
        hosts=[{"host": cluster.hosts[2].addr, "name": "node2", "gpus": [2]}],
    )  # fmt: skip
    refused = Cli(busy, tmp_path / "busy")
    launches = [Cli(one, tmp_path / "a"), Cli(one, tmp_path / "b"), Cli(pinned, tmp_path / "c")]
    assert refused.wait(120) == EXIT_REFUSED, refused.stderr
    assert "GPU 2 on node2 is busy: pid 48211 (/usr/bin/python3)" in refused.stderr
    assert "busy_gpus: wait (or share) takes them" in refused.stderr
    for cli in launches:
        cli.wait_ranks(1)  # all three hold their GPUs at once
    go(out, "all")
    for cli in launches:
        assert cli.wait(120) == 0, cli.stderr
    ran = [notes(out, cli.run_id())[0] for cli in launches]
    assert sorted(n["cvd"] for n in ran[:2]) == ["0", "1"] and ran[2]["cvd"] == "3"
    assert ran[2]["user"] == COLLEAGUE
