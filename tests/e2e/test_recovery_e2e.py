"""Runs that recover (job.restarts), on real sshd test hosts with real torchrun and gloo.

A rank that fails on the first attempt and not on the second; a host cut off (veth down) whose
node rank a spare host takes; a detached run that restarts with nobody attached; a detached
run whose cut host a hot spare's standby replaces, nobody attached, and one whose standby died
(an attach brings the spare); a stop during the restart delay. Each ends with nothing of the
run left on any host.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from e2etools import (
    Cli,
    Cmd,
    assert_node1_ran_on_the_spare,
    assert_nothing_left,
    cut_off,
    standbys,
    supervisors,
    wait_for,
)  # fmt: skip
from testhosts import TestCluster, veth_name

pytestmark = pytest.mark.e2e

TRAIN = {"script": "examples/train.py", "nproc_per_node": 2}
# rank 3 (node1) raises in epoch 1 (8 steps an epoch), on the first attempt only
FAILS_ONCE = ["--epochs", "3", "--fail-rank", "3", "--fail-attempt", "0", "--fail-step", "12"]


@pytest.fixture
def data_home(tmp_path: Path) -> dict[str, str]:
    """Where the CLI keeps its runs (each test its own history)."""
    return {"XDG_DATA_HOME": str(tmp_path / "data")}


def greeting(log: list[str], text: str) -> int:
    """Where the line holding `text` is (torch may warn before it)."""
    return next(i for i, line in enumerate(log) if text in line)


def test_a_failed_rank_restarts_the_job_and_the_next_attempt_succeeds(
    cluster: TestCluster, tmp_path: Path, data_home: dict[str, str]
) -> None:
    notified, ckpt = tmp_path / "notified", tmp_path / "ckpt.pt"
    line = '"$DDPTUI_EVENT|$DDPTUI_STATUS|$DDPTUI_RUN_ID|$DDPTUI_MESSAGE"'
    job = {
        **TRAIN, "args": [*FAILS_ONCE, "--checkpoint", str(ckpt)], "master_port": "auto",
        "restarts": 2, "restart_delay": 0.5,
        "notify": {"command": f"echo {line} >> {notified}",
                   "events": ["failed", "restarted", "succeeded", "stopped", "lost"]},
    }  # fmt: skip
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1])
    cli = Cli(inv, tmp_path / "run", env=data_home)
    run_id = cli.run_id()
    assert cli.wait() == 0, cli.stderr
    summary = cli.summary()
    assert (summary["status"], summary["exit_code"]) == ("succeeded", 0)
    first, second = summary["attempts"]
    assert (first["attempt"], first["status"], second["status"]) == (0, "failed", "succeeded")
    assert (first["failure"]["rank"], first["failure"]["host"]) == (3, "node1")
    assert first["finished"] <= second["started"]
    mark = "ddptui: attempt 2 of 3 (after rank 3 failed on node1)"
    assert "ddptui: restarting in 0.5 s: attempt 2 of 3 (after rank 3 failed on node1)" in (
        cli.stderr
    )
    for r in range(4):  # every rank's log goes on after the mark, with the second attempt
        log = (cli.run_dir / f"rank-{r}.log").read_text().splitlines()
        assert log.count(mark) == 1
        assert greeting(log, f"rank {r}/4 on node{r // 2}") < log.index(mark)
        assert greeting(log[log.index(mark) :], f"rank {r}/4 on node{r // 2}")
    assert "[r0 node0] attempt 1: resuming after epoch 0" in cli.stdout  # its checkpoint
    assert "run succeeded after 2 attempts" in cli.stderr
    words = [w.split("|") for w in notified.read_text().splitlines()]
    assert [(w[0], w[1]) for w in words] == [
        ("failed", "restarting"), ("restarted", "running"), ("succeeded", "succeeded"),
    ]  # fmt: skip
    assert {w[2] for w in words} == {run_id}
    assert words[0][3] == "rank 3 failed on node1; restarting in 0.5 s (attempt 2 of 3)"
    listed = Cmd(["runs", "--json"], tmp_path / "runs", data_home)
    assert listed.wait(60) == 0, listed.stderr
    assert json.loads(listed.stdout)["runs"][0]["attempts"] == 2
    assert_nothing_left(cluster, run_id)
    wait_for(lambda: not supervisors(run_id), 20, "every supervisor to leave")


def test_a_cut_host_gives_its_node_rank_to_a_spare(cluster: TestCluster, tmp_path: Path) -> None:
    args = ["--epochs", "5", "--step-time", "0.1"]
    job = {**TRAIN, "args": args, "master_port": 29781, "restarts": 1, "restart_delay": 1,
           "link_timeout": 8, "stop_grace": 2}  # fmt: skip
    spare = {"host": cluster.hosts[2].addr, "name": "node2", "spare": True}
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1, spare])
    cli = Cli(inv, tmp_path / "run")
    run_id = cli.run_id()
    wait_for(lambda: "[r0 node0] epoch 0:" in cli.stdout, 120, "the first epoch")
    veth = veth_name(cluster.prefix, 1)
    subprocess.run(["ip", "link", "set", veth, "down"], check=True)
    try:
        wait_for(lambda: "takes node1's place" in cli.stderr, 120, "the spare to take node 1")
        subprocess.run(["ip", "link", "set", veth, "up"], check=True)  # node1 is back
        assert cli.wait(180) == 0, cli.stderr
        summary = cli.summary()
        # the hosts as the run ended, as an attach says them, and the swap named
        assert (summary["status"], summary["hosts"]) == ("succeeded", ["node0", "node2"])
        assert summary["replaced"] == [{"node": 1, "host": "node1", "by": "node2", "attempt": 1}]
        assert summary["unread"] == []  # node1's spool read at the run's end: nothing left
        first, second = summary["attempts"]
        assert (first["status"], first["failure"]["host"]) == ("failed", "node1")
        assert "lost" in first["failure"]["message"]
        assert second["status"] == "succeeded"
        assert "node2 takes node1's place as node 1 from attempt 2" in cli.stderr
        started = [json.loads(e) for e in cli.events() if '"NodeStarted"' in e]
        # attempt 2's nodes start in any order: node 1's is the spare's
        where = [(e["host"], e["node_rank"], e["hostname"]) for e in started]
        assert ("node2", 1, "node2") in where
        mark = "ddptui: attempt 2 of 2 (after node1 was lost)"
        for r in (2, 3):  # node 1's ranks, the same world: on the spare now
            log = (cli.run_dir / f"rank-{r}.log").read_text().splitlines()
            assert greeting(log, f"rank {r}/4 on node1 (node 1") < log.index(mark)
            assert greeting(log, f"rank {r}/4 on node2 (node 1") > log.index(mark)
        assert "[r0 node0] done" in cli.stdout
        assert_nothing_left(cluster, run_id, timeout=30)
    finally:
        subprocess.run(["ip", "link", "set", veth, "up"], check=True)
    # the cut host's supervisor, cut off from its hub, leaves too
    wait_for(lambda: not supervisors(run_id), 40, "every supervisor to leave")


def test_a_detached_run_restarts_with_nobody_attached(
    cluster: TestCluster, tmp_path: Path, data_home: dict[str, str]
) -> None:
    args = ["--epochs", "2", "--fail-rank", "1", "--fail-attempt", "0", "--fail-step", "4"]
    job = {**TRAIN, "args": args, "master_port": 29782, "restarts": 1, "restart_delay": 0.5}
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1])
    cli = Cli(inv, tmp_path / "run", flags=["--detach"], env=data_home)
    assert cli.wait(120) == 0, cli.stderr
    run_id = cli.stdout.splitlines()[-1]
    # nothing left may be seen between the attempts: the supervisors leave once the second ends
    assert_nothing_left(cluster, run_id, timeout=150)  # failed, restarted, done: alone
    wait_for(lambda: not supervisors(run_id), 120, "every supervisor to leave")
    attach = Cmd(["attach", run_id], tmp_path / "attach", data_home)
    assert attach.wait(60) == 0, attach.stderr
    assert "restarting in 0.5 s: attempt 2 of 2 (after rank 1 failed on node0)" in attach.stderr
    assert "run succeeded after 2 attempts" in attach.stderr
    assert "[r1 node0] RuntimeError: rank 1 failed on purpose at step 4" in attach.stderr
    assert "[r1 node0] ddptui: attempt 2 of 2 (after rank 1 failed on node0)" in attach.stdout
    assert "[r0 node0] done" in attach.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [a["status"] for a in summary["attempts"]] == ["failed", "succeeded"]
    assert summary["status"] == "succeeded"


def test_a_stop_during_the_restart_delay_restarts_nothing(
    cluster: TestCluster, tmp_path: Path
) -> None:
    job = {"script": "tests/data/tick.py", "args": ["400", "0.02", "3"], "nproc_per_node": 2,
           "master_port": 29783, "restarts": 2, "restart_delay": 60}  # fmt: skip
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1])
    cli = Cli(inv, tmp_path / "run")
    run_id = cli.run_id()
    wait_for(lambda: "ddptui: restarting in 60 s" in cli.stderr, 90, "the restart's delay")
    cli.proc.send_signal(signal.SIGINT)
    assert cli.wait(30) == 1, cli.stderr  # the last attempt failed; the stop ended the wait
    summary = cli.summary()
    assert [a["status"] for a in summary["attempts"]] == ["failed"]
    assert summary["failing_rank"] == 3
    assert not any("attempt 2 of 3" in p.read_text() for p in cli.run_dir.glob("*.log"))
    assert_nothing_left(cluster, run_id, timeout=5)
    wait_for(lambda: not supervisors(run_id), 20, "every supervisor to leave")


def detached_with_a_spare(
    cluster: TestCluster, tmp_path: Path, data_home: dict[str, str], port: int
) -> tuple[str, Path]:
    """A detached 2-host run with spare node2 standing by, node1 to be cut: its id and the
    file job.notify writes its words in."""
    notified = tmp_path / "notified"
    job = {**TRAIN, "args": ["--epochs", "4", "--step-time", "0.1"], "master_port": port,
           "restarts": 1, "restart_delay": 0.5, "link_timeout": 6, "stop_grace": 2,
           "notify": {"command": f'echo "$DDPTUI_EVENT|$DDPTUI_MESSAGE" >> {notified}',
                      "events": ["lost", "restarted", "succeeded"]}}  # fmt: skip
    spare = {"host": cluster.hosts[2].addr, "name": "node2", "spare": True}
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1, spare])
    cli = Cli(inv, tmp_path / "run", flags=["--detach"], env=data_home)
    assert cli.wait(120) == 0, cli.stderr
    assert "spare node2 stands by" in cli.stderr
    run_id = cli.stdout.splitlines()[-1]
    wait_for(lambda: standbys(run_id), 30, "node2's standby")
    return run_id, notified


def test_a_detached_run_swaps_a_lost_host_for_a_hot_spare_with_nobody_attached(
    cluster: TestCluster, tmp_path: Path, data_home: dict[str, str]
) -> None:
    """node1 cut off: the hub makes spare node2's standby node 1, nobody attached, and the
    job succeeds on attempt 2 in node 1's ranks; the standby leaves, its part over."""
    run_id, notified = detached_with_a_spare(cluster, tmp_path, data_home, 29784)
    with cut_off(cluster, 1):
        assert_node1_ran_on_the_spare(cluster, run_id)
        words = notified.read_text()
        assert "lost|node2 takes node1's place as node 1 from attempt 2 (a hot spare)" in words
        assert "succeeded|every rank succeeded" in words
        assert_nothing_left(cluster, run_id, timeout=30)
        wait_for(lambda: not standbys(run_id), 20, "the standby to leave")
    wait_for(lambda: not supervisors(run_id), 40, "every supervisor to leave")
    attach = Cmd(["attach", run_id], tmp_path / "attach", data_home)  # it sees the swap
    assert attach.wait(120) == 0, attach.stderr
    assert "spare node2 stands by" not in attach.stderr  # the launch's word, not node 0's
    assert "node2 takes node1's place as node 1 from attempt 2 (a hot spare)" in attach.stderr
    assert "[r2 node2] ddptui: attempt 2 of 2 (after node1 was lost)" in attach.stdout
    assert "[r0 node0] done" in attach.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [a["status"] for a in summary["attempts"]] == ["failed", "succeeded"]
    assert summary["hosts"] == ["node0", "node2"]  # as the attach said them: the spare's
    assert summary["replaced"] == [{"node": 1, "host": "node1", "by": "node2", "attempt": 1}]


@pytest.mark.slow_e2e
def test_a_detached_run_whose_standby_died_waits_for_an_attach(
    cluster: TestCluster, tmp_path: Path, data_home: dict[str, str]
) -> None:
    """The standby killed: named, no longer counted; node1 lost, the hub waits, `runs` says
    so, and `attach` brings the spare (it needs a login)."""
    run_id, notified = detached_with_a_spare(cluster, tmp_path, data_home, 29785)
    for pid in standbys(run_id):
        os.kill(pid, signal.SIGKILL)
    named = lambda: notified.exists() and "no longer stands by" in notified.read_text()  # noqa: E731
    wait_for(named, 30, "the standby named")
    with cut_off(cluster, 1):
        # node 1 lost: every job stops, the hub waits for a launcher to bring a spare
        wait_for(lambda: len(supervisors(run_id)) == 2, 60, "the cut host's supervisor to leave")
        assert_nothing_left(cluster, run_id, timeout=30)
        listed = Cmd(["runs", "--json"], tmp_path / "runs", data_home)
        assert listed.wait(60) == 0, listed.stderr
        (row,) = json.loads(listed.stdout)["runs"]
        assert row["status"] == "running" and "node1" in row["detail"], row
        attach = Cmd(["attach", run_id], tmp_path / "attach", data_home)
        assert attach.wait(180) == 0, attach.stderr
        assert "spare node2 no longer stands by" in attach.stderr
        assert "node2 takes node1's place as node 1 from attempt 2" in attach.stderr
        assert "[r2 node2] ddptui: attempt 2 of 2 (after node1 was lost)" in attach.stdout
        assert "[r0 node0] done" in attach.stdout
        summary = json.loads((tmp_path / "run" / "summary.json").read_text())
        assert [a["status"] for a in summary["attempts"]] == ["failed", "succeeded"]
        assert_nothing_left(cluster, run_id, timeout=10)
    wait_for(lambda: not supervisors(run_id), 30, "every supervisor to leave")
