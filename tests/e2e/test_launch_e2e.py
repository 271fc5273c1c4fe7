"""`ddptui --headless launch` against real sshd test hosts, with real torchrun and gloo.

Covers the engine issue's reliability list: success, a failing rank, Ctrl-C, SIGKILL of ddptui,
unreachable hosts, quoting, two runs side by side, and no process left over.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from e2etools import Cli, assert_nothing_left, wait_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testhosts import TestCluster

from ddptui.remote import inventory
from ddptui.remote.events import Event, NodeStarted, RunFinished
from ddptui.remote.run.runner import Run

pytestmark = pytest.mark.e2e

TRAIN = {"script": "examples/train.py", "nproc_per_node": 2, "master_port": 29611}
LONG = ["--epochs", "1000", "--step-time", "0.1"]  # runs until stopped


def test_three_hosts_train_and_leave_nothing(cluster: TestCluster, tmp_path: Path) -> None:
    inv = cluster.write_inventory(tmp_path / "inv.yaml", {**TRAIN, "args": ["--epochs", "1"]})
    cli = Cli(inv, tmp_path / "run")
    assert cli.wait() == 0, cli.stderr
    out = cli.stdout
    for r in range(6):  # every rank ran on the host its node rank says, and is tagged so
        assert f"[r{r} node{r // 2}] rank {r}/6 on node{r // 2} (node {r // 2}" in out
        assert f"rank {r}/6 on node{r // 2}" in (cli.run_dir / f"rank-{r}.log").read_text()
    assert "[r0 node0] done" in out
    summary = cli.summary()
    assert (summary["status"], summary["exit_code"], summary["world_size"]) == ("succeeded", 0, 6)
    assert summary["hosts"] == ["node0", "node1", "node2"]
    assert_nothing_left(cluster, summary["run_id"])


def test_failing_rank_is_named_and_stops_every_host(cluster: TestCluster, tmp_path: Path) -> None:
    inv = cluster.write_inventory(tmp_path / "inv.yaml", {**TRAIN, "args": LONG})
    cli = Cli(inv, tmp_path / "run", "--fail-rank", "4", "--fail-step", "20")
    run_id = cli.run_id()
    assert cli.wait() == 1, cli.stderr
    summary = cli.summary()
    assert summary["status"] == "failed"
    assert (summary["failing_rank"], summary["failing_host"]) == (4, "node2")
    failure = summary["failure"]
    assert failure["exit_code"] == 1
    assert failure["message"] == "RuntimeError: rank 4 failed on purpose at step 20"
    assert any("raise RuntimeError" in line for line in failure["traceback"])
    assert "run failed: rank 4 on node2 (exit code 1): RuntimeError: rank 4" in cli.stderr
    # From the traceback reaching ddptui to every host stopped: seconds, not gloo's 30 min.
    assert summary["finished_at"] - failure["seen_at"] < 60
    assert_nothing_left(cluster, run_id)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "sigkill"])
def test_interrupt_or_death_of_ddptui_stops_every_host(
    cluster: TestCluster, tmp_path: Path, sig: signal.Signals
) -> None:
    job = {**TRAIN, "args": LONG, "link_timeout": 6}
    inv = cluster.write_inventory(tmp_path / "inv.yaml", job)
    cli = Cli(inv, tmp_path / "run")
    run_id = cli.run_id()
    cli.wait_ranks(6)
    assert len(cluster.pids_with_env("DDPTUI_RUN_ID", run_id)) >= 9  # 3 torchruns, 6 ranks
    cli.proc.send_signal(sig)
    code = cli.wait(60)
    took = assert_nothing_left(cluster, run_id, timeout=30)
    if sig == signal.SIGINT:
        assert took < 15
        assert code == 130
        assert cli.summary()["status"] == "stopped"
    else:  # nobody told the hosts: each supervisor's lease ran out (6 s), then TERM
        assert code == -signal.SIGKILL
        assert took < 6 + 5 + 8


async def run_events(inv_path: Path, run_dir: Path, **kw: Any) -> tuple[RunFinished, list[Event]]:
    events: list[Event] = []
    run = Run(inventory.load(inv_path), events.append, run_dir=run_dir, **kw)
    return await run.execute(), events


def _bad_key(cluster: TestCluster, tmp: Path) -> dict[str, object]:
    key = tmp / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return {"identity_file": str(key)}


def _wrong_host_key(cluster: TestCluster, tmp: Path) -> dict[str, object]:
    lines = cluster.known_hosts.read_text().splitlines()
    keys = [line.split(None, 1)[1] for line in lines]
    swapped = [
        f"{line.split(None, 1)[0]} {keys[(i + 1) % len(keys)]}" for i, line in enumerate(lines)
    ]  # every host presents another host's key
    (tmp / "known_hosts").write_text("\n".join(swapped) + "\n")
    return {"known_hosts": str(tmp / "known_hosts")}


@pytest.mark.parametrize(
    ("make_defaults", "words"),
    [
        (_bad_key, "authentication refused for root@{addr}:22"),
        (_wrong_host_key, "host key not verified for root@{addr}:22"),
    ],
    ids=["auth-refused", "host-key-mismatch"],
)
async def test_login_failures_name_host_and_reason(
    cluster: TestCluster, tmp_path: Path, make_defaults: Any, words: str
) -> None:
    inv = cluster.write_inventory(
        tmp_path / "inv.yaml", TRAIN, hosts=[0], **make_defaults(cluster, tmp_path)
    )
    fin, events = await run_events(inv, tmp_path / "run")
    assert (fin.status, fin.exit_code) == ("unreachable", 3)
    assert fin.failure is not None and fin.failure.host == "node0"
    assert words.format(addr=cluster.hosts[0].addr) in fin.failure.message
    assert not [e for e in events if isinstance(e, NodeStarted)]


async def test_all_or_nothing_when_a_host_is_down(cluster: TestCluster, tmp_path: Path) -> None:
    unplugged = {"host": cluster.unused_addr, "name": "unplugged"}
    inv = cluster.write_inventory(tmp_path / "inv.yaml", TRAIN, hosts=[0, 3, unplugged])
    cluster.stop_sshd(3)
    try:
        fin, events = await run_events(inv, tmp_path / "run")
    finally:
        cluster.start_sshd(3)
    reasons = {f.host: f.message for f in fin.failures}
    assert f"connection refused by root@{cluster.hosts[3].addr}:22" in reasons["node3"]
    assert cluster.unused_addr in reasons["unplugged"]
    assert "node0" not in reasons
    assert fin.exit_code == 3
    assert not [e for e in events if isinstance(e, NodeStarted)]  # nothing started anywhere


def test_cli_reports_unreachable_host_without_traceback(
    cluster: TestCluster, tmp_path: Path
) -> None:
    inv = cluster.write_inventory(tmp_path / "inv.yaml", TRAIN, hosts=[{"host": "no-such-host"}])
    cli = Cli(inv, tmp_path / "run")
    assert cli.wait(60) == 3
    assert "no-such-host: unreachable (cannot resolve host name 'no-such-host')" in cli.stderr
    assert "Traceback" not in cli.stderr


NASTY = [
    'it\'s "quoted"',
    "$(touch /tmp/ddptui-pwned) `touch /tmp/ddptui-pwned`",
    "a\nnew line; echo $HOME && exit 1 | cat",
    "ünïcödé ✓ 日本",
    " leading and trailing spaces ",
    "",
    "\\ back\\slash '\"'\"'",
]


def show_env(cluster: TestCluster, tmp: Path, value: str) -> dict[str, Any]:
    """Run a tiny job on one SSH host with `value` in its env and args; return what it saw."""
    job = {"script": "tests/data/print_env.py", "launcher": "env", "args": [value]}
    inv = cluster.write_inventory(
        tmp / "inv.yaml", job, hosts=[1], env={"DDPTUI_SHOW": "V", "V": value}
    )
    fin, events = asyncio.run(run_events(inv, tmp / "run"))
    assert fin.exit_code == 0, fin
    lines = [line for e in events if getattr(e, "stream", "") == "stdout" for _, line in e.lines]  # type: ignore[attr-defined]
    return dict(json.loads(lines[-1]))


def test_nasty_values_arrive_exactly(cluster: TestCluster, tmp_path: Path) -> None:
    for i, value in enumerate(NASTY):
        (tmp_path / str(i)).mkdir()
        seen = show_env(cluster, tmp_path / str(i), value)
        assert seen == {"argv": [value], "env": {"V": value}}
    assert not Path("/tmp/ddptui-pwned").exists()


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(value=st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\0\r")))
def test_any_env_value_arrives_byte_for_byte(
    cluster: TestCluster, tmp_path_factory: pytest.TempPathFactory, value: str
) -> None:
    seen = show_env(cluster, tmp_path_factory.mktemp("env"), value)
    assert seen == {"argv": [value], "env": {"V": value}}


async def test_two_runs_on_the_same_hosts_keep_apart(cluster: TestCluster, tmp_path: Path) -> None:
    long_inv = cluster.write_inventory(
        tmp_path / "a.yaml", {**TRAIN, "nproc_per_node": 1, "args": LONG}, hosts=[0, 1]
    )
    other_inv = cluster.write_inventory(
        tmp_path / "b.yaml",
        {
            **TRAIN,
            "nproc_per_node": 1,
            "master_port": 29622,
            "args": LONG,  # B must outlive A's stop, however long that takes
        },
        hosts=[0, 1],
    )
    a = Run(inventory.load(long_inv), lambda e: None, run_dir=tmp_path / "a")
    b = Run(inventory.load(other_inv), lambda e: None, run_dir=tmp_path / "b")
    task_a = asyncio.create_task(a.execute())
    task_b = asyncio.create_task(b.execute())
    await asyncio.to_thread(  # both running, then stop only the first
        wait_for,
        lambda: all(cluster.pids_with_env("DDPTUI_RUN_ID", r.run_id) for r in (a, b)),
        120,
        "both runs to start",
    )
    a.stop()
    fin_a = await task_a
    assert fin_a.status == "stopped"
    assert not cluster.pids_with_env("DDPTUI_RUN_ID", a.run_id)
    assert cluster.pids_with_env("DDPTUI_RUN_ID", b.run_id), "stopping A touched B"
    b.stop()
    assert (await task_b).status == "stopped"
    assert not cluster.pids_with_env("DDPTUI_RUN_ID", b.run_id)
