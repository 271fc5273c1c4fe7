"""Hangs the run finds on its own, on real sshd test hosts with real torchrun and gloo, detached
and with nobody attached: node 0's supervisor samples every rank (CPU, I/O, py-spy stacks) once
the job falls silent, names the rank that hangs and acts on it (job.on_hang)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from e2etools import Cli, Cmd, assert_nothing_left, wait_for
from testhosts import TestCluster

pytestmark = pytest.mark.e2e

DATA = Path(__file__).parents[1] / "data"
NAMED_WITHIN_S = 120.0  # of the last progress, with the default settings
HANG_AFTER_S = 40.0


@pytest.fixture
def data_home(tmp_path: Path) -> dict[str, str]:
    return {"XDG_DATA_HOME": str(tmp_path / "data")}


def test_a_detached_run_names_a_hang_and_restarts_with_nobody_attached(
    cluster: TestCluster, tmp_path: Path, data_home: dict[str, str]
) -> None:
    """Rank 3 (node1) sleeps before an all_reduce on attempt 0; attempt 1 runs through."""
    notified = tmp_path / "notified"
    line = '"$DDPTUI_EVENT|$DDPTUI_MESSAGE"'
    job = {
        "script": str(DATA / "hang_once.py"), "nproc_per_node": 2, "master_port": 29791,
        "restarts": 1, "restart_delay": 0.5,
        "notify": {"command": f"echo {line} >> {notified}", "events": ["hang", "succeeded"]},
        "nccl": {"flight_recorder": True},  # each rank serves its pipe as NCCL would
        # named in about three quarters of it: 30 s, not the default's 60
        # (scripts/bench_watch.py measures those); the rule is the same
        "hang_after": HANG_AFTER_S,
    }  # fmt: skip
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1])
    cli = Cli(inv, tmp_path / "run", flags=["--detach"], env=data_home)
    assert cli.wait(120) == 0, cli.stderr
    run_id = cli.stdout.splitlines()[-1]
    t0 = time.monotonic()

    def told() -> list[str] | None:  # hung, restarted, succeeded: alone
        words = notified.read_text().splitlines() if notified.exists() else []
        return words if any(w.startswith("succeeded|") for w in words) else None

    words = wait_for(told, 300, "the run to succeed")
    took = time.monotonic() - t0
    assert_nothing_left(cluster, run_id)
    hang = next(w for w in words if w.startswith("hang|"))
    assert "rank 3 on node1 stuck in load_batch (hang_once.py:" in hang, words
    assert "ranks 0,1,2 wait in all_reduce" in hang
    assert "the attempt ends" in hang
    assert "flight recorder: 4 trace(s) kept in " in hang
    assert "its verdict: rank(s) 3 missing from a collective" in hang
    assert words[-1] == "succeeded|every rank succeeded"

    kept = cluster.hosts[0].home / f".local/state/ddptui/runs/{run_id}/n0/hang-0.json"
    found = json.loads(kept.read_text())
    assert found["culprits"] == [3] and found["ranks"]["3"]["host"] == "node1"
    assert found["ranks"]["3"]["frames"][0][0] == "load_batch"
    flight = found["flight_recorder"]
    assert flight["ranks"] == [0, 1, 2, 3] and flight["missing_ranks"] == [3], flight
    assert "missing ranks: {3}" in (kept.parent / "flight-0" / "analysis.txt").read_text()
    # a job.hang_after set bounds it: named within it of the job's last line (its silence;
    # the rule's nominal three quarters, plus the watch's poll and the stacks' reading)
    assert found["silent_s"] <= HANG_AFTER_S
    print(f"hang named {found['silent_s']} s after the last line; the run took {took:.0f} s")

    attach = Cmd(["attach", run_id], tmp_path / "attach", data_home)
    assert attach.wait(60) == 0, attach.stderr
    assert "hang: hung " in attach.stderr and "rank 3 on node1 stuck" in attach.stderr
    assert "run succeeded after 2 attempts" in attach.stderr
    assert "[r3 node1] rank 3 done" in attach.stdout
    # the attach copied the hang node 0 kept into its own run directory, and said where
    said = "the hang's stacks and verdict, copied here: "
    copied = Path(next(ln for ln in attach.stderr.splitlines() if said in ln).split(said)[1])
    assert copied.name == "hang-0.json" and json.loads(copied.read_text()) == found
    traces = sorted(p.name for p in (copied.parent / "flight-0").iterdir())
    assert traces == ["analysis.txt"] + [f"nccl_trace_rank_{r}.json" for r in range(4)]


@pytest.mark.slow_hangs
@pytest.mark.timeout(900)
def test_jobs_silent_but_alive_for_minutes_are_never_called_hung(
    cluster: TestCluster, tmp_path: Path, data_home: dict[str, str]
) -> None:
    """A first step loading data, a checkpoint, an evaluation: 90 s of silence each."""
    notified = tmp_path / "notified"
    job = {
        "script": str(DATA / "silent_alive.py"), "nproc_per_node": 2, "master_port": 29792,
        "notify": {"command": f'echo "$DDPTUI_EVENT|$DDPTUI_MESSAGE" >> {notified}',
                   "events": ["hang", "succeeded", "failed"]},
    }  # fmt: skip
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1])
    cli = Cli(inv, tmp_path / "run", flags=["--detach"], env=data_home)
    assert cli.wait(120) == 0, cli.stderr
    run_id = cli.stdout.splitlines()[-1]
    words = wait_for(lambda: notified.exists() and notified.read_text().splitlines(), 600,
                     "the run to end")  # fmt: skip
    assert words == ["succeeded|every rank succeeded"]
    assert_nothing_left(cluster, run_id)
    node0 = cluster.hosts[0].home / f".local/state/ddptui/runs/{run_id}/n0"
    assert not list(node0.glob("hang-*.json"))


# (hosts, nproc_per_node, the job's env, the straggler's word): a rank sleeping on its input
# 0.3 s longer in steps of a second (every rank asleep all along: only the stacks tell), a rank
# computing 30 % more, and a balanced job running past the window
STRAGGLERS = {
    "rank2-input-0.3s-of-1s": ([0, 1, 2, 3], 1, {"WORK": "0", "DEVICE_MS": "1000",
                               "STRAGGLER": "2", "INPUT_MS": "300"}, "rank 2 on node2"),
    "rank3-computes-30pc-more": ([0, 1], 2, {"STRAGGLER": "3"}, "rank 3 on node1"),
    "balanced": ([0, 1], 2, {}, None),
}  # fmt: skip


@pytest.mark.slow_hangs
@pytest.mark.parametrize("case", STRAGGLERS)
def test_a_straggler_is_named_with_its_cost_and_none_on_a_balanced_job(
    cluster: TestCluster, tmp_path: Path, data_home: dict[str, str], case: str
) -> None:
    hosts, nproc, env, straggler = STRAGGLERS[case]
    notified, first_step = tmp_path / "notified", tmp_path / "first-step"
    env = {"SECONDS_": "150", "FIRST_STEP_FILE": str(first_step), **env}
    job = {
        "script": str(DATA / "straggler.py"), "nproc_per_node": nproc, "master_port": 29793,
        "notify": {"command": f'echo "$(date +%s)|$DDPTUI_EVENT|$DDPTUI_MESSAGE" >> {notified}',
                   "events": ["straggler", "hang", "succeeded", "failed"]},
    }  # fmt: skip
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=hosts, env=env)
    cli = Cli(inv, tmp_path / "run", flags=["--detach"], env=data_home)
    assert cli.wait(120) == 0, cli.stderr
    run_id = cli.stdout.splitlines()[-1]

    def ended() -> list[str] | None:
        words = notified.read_text().splitlines() if notified.exists() else []
        return words if any("|succeeded|" in w or "|failed|" in w for w in words) else None

    said = [w.split("|", 1) for w in wait_for(ended, 400, "the run to end")]
    words = [w for _, w in said]
    assert words[-1] == "succeeded|every rank succeeded", words
    named = [(float(at), w) for at, w in said if w.startswith("straggler|")]
    assert_nothing_left(cluster, run_id)
    if straggler is None:
        assert named == []
        return
    at, first = named[0]
    assert first.startswith(f"straggler|{straggler} is a straggler"), words
    slower = float(first.split("runs about ")[1].split(" %")[0])
    assert 15 <= slower <= 50, first  # 30 % by construction
    took = at - float(first_step.read_text())
    assert took <= NAMED_WITHIN_S, first
    print(f"{took:.0f} s after the first step: {first}")


@pytest.mark.slow_hangs
@pytest.mark.timeout(900)
def test_job_on_straggler_replace_gives_the_stragglers_node_rank_to_a_spare(
    cluster: TestCluster, tmp_path: Path
) -> None:
    """Rank 3 (node1) 30 % slower, a spare (node2) and a restart left: the attempt ends as the
    straggler is named, and node2 takes node 1's place (attempt 1 still runs rank 3 slower: it
    is named again, with no spare left to take it). Rank 3 takes 4 s to leave when stopped:
    the bad host's end is read before the spare takes its place, never called lost (it failed
    1 of 2 runs so, when the spare's checks were quicker than node1's stop)."""
    job = {
        "script": str(DATA / "straggler.py"), "nproc_per_node": 2, "master_port": 29794,
        "restarts": 1, "restart_delay": 0.5, "on_straggler": "replace",
    }  # fmt: skip
    spare = {"host": cluster.hosts[2].addr, "name": "node2", "spare": True}
    env = {"SECONDS_": "150", "STRAGGLER": "3", "TERM_S": "4"}
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=[0, 1, spare], env=env)
    cli = Cli(inv, tmp_path / "run")
    run_id = cli.run_id()
    assert cli.wait(600) == 0, cli.stderr
    assert "rank 3 on node1 is a straggler" in cli.stderr
    assert "a spare takes its place now" in cli.stderr
    assert "node2 takes node1's place as node 1 from attempt 2" in cli.stderr
    first, second = cli.summary()["attempts"]
    assert (first["status"], first["failure"]["host"]) == ("failed", "node1")
    assert "straggler" in first["failure"]["message"]
    assert "node1: failed (lost" not in cli.stderr
    assert second["status"] == "succeeded"
    assert_nothing_left(cluster, run_id, timeout=30)
