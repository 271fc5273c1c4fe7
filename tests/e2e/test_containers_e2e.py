"""Jobs in containers through ddptui itself, on podman test hosts (runc, an image
imported from a tarball, no registry): torchrun across 3 hosts, each node in one attached
container; a failing node named; Ctrl-C; the launcher SIGKILLed; a missing image refused by the
checks; every rank's stack read from inside its container. Nothing is left after any of them."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from e2etools import Cli, Cmd, assert_nothing_left, wait_for
from testhosts import TestCluster

from ddptui.remote.host import container

pytestmark = pytest.mark.e2e
HOSTS = (0, 1, 2)


def inventory(
    c: TestCluster, path: Path, job: dict[str, Any], hosts: tuple[int, ...] = HOSTS, **box: Any
) -> Path:
    """The hosts' inventory, every host's job in a container (the test image)."""
    return c.write_inventory(path, job, hosts=hosts, container={**c.container_defaults(), **box})


def ticks(n: int, every: float, port: int, **more: Any) -> dict[str, Any]:
    return {"script": "tests/data/tick.py", "args": [str(n), str(every)], "nproc_per_node": 1,
            "master_port": port, "stop_grace": 2, **more}  # fmt: skip


def containers_left(c: TestCluster, run_id: str) -> list[str]:
    listing = shlex.join(container.sweep_commands("podman", run_id) or [])
    return [cid for i in HOSTS for cid in c.ssh(i, listing).stdout.split()]


def nothing_left(c: TestCluster, run_id: str, timeout: float = 30) -> None:
    assert_nothing_left(c, run_id, timeout)
    wait_for(lambda: not containers_left(c, run_id), timeout, "the run's containers to go")


def test_torchrun_across_three_hosts_in_containers(podman: TestCluster, tmp_path: Path) -> None:
    inv = inventory(podman, tmp_path / "inv.yaml", ticks(20, 0.05, 29801))
    cli = Cli(inv, tmp_path / "run")
    assert cli.wait(240) == 0, cli.stderr
    for r in range(3):
        log = (cli.run_dir / f"rank-{r}.log").read_text().splitlines()
        assert [line for line in log if line.startswith(f"tick {r} ")] == [
            f"tick {r} {i}" for i in range(20)
        ]
    checks = [json.loads(e) for e in cli.events() if '"HostChecked"' in e]
    run = checks[0]["facts"]["container"]["dry_run"]  # the image's own python and torch
    assert run["torch"] and run["python"]
    nothing_left(podman, cli.run_id())


def test_a_failing_node_is_named_and_the_containers_go(podman: TestCluster, tmp_path: Path) -> None:
    job = ticks(200, 0.05, 29802)
    job["args"] = [*job["args"], "1"]  # rank 1 raises at its middle line
    inv = inventory(podman, tmp_path / "inv.yaml", job)
    cli = Cli(inv, tmp_path / "run")
    assert cli.wait(240) == 1, cli.stderr
    summary = cli.summary()
    assert (summary["failing_rank"], summary["failing_host"]) == (1, "node1")
    nothing_left(podman, cli.run_id())


@pytest.mark.parametrize("how", ["ctrl-c", "sigkill"])
def test_the_launcher_gone_leaves_no_container(
    podman: TestCluster, tmp_path: Path, how: str
) -> None:
    """Ctrl-C: exit 130 and every container gone. SIGKILL: the supervisors' lease ends the job
    within link_timeout, the shim's stdin closes, --rm removes the container."""
    inv = inventory(podman, tmp_path / "inv.yaml", ticks(100_000, 0.1, 29803, link_timeout=10))
    cli = Cli(inv, tmp_path / "run")
    run_id = cli.run_id()
    wait_for(lambda: "[r2 node2] tick 2 " in cli.stdout, 120, "rank 2 to tick in its container")
    assert containers_left(podman, run_id)
    killed = time.monotonic()
    cli.proc.send_signal(signal.SIGINT if how == "ctrl-c" else signal.SIGKILL)
    code = cli.wait(120)
    assert code == (130 if how == "ctrl-c" else -signal.SIGKILL), cli.stderr
    nothing_left(podman, run_id, timeout=10 + 2 + 20)
    assert time.monotonic() - killed < 10 + 2 + 20


def test_a_missing_image_is_refused_by_the_checks(podman: TestCluster, tmp_path: Path) -> None:
    inv = inventory(podman, tmp_path / "inv.yaml", ticks(5, 0.01, 29804), image="nope/none:1")
    cli = Cli(inv, tmp_path / "run")
    assert cli.wait(120) == 1, cli.stderr
    # one line for every host it is missing on
    assert "FAIL node[0-2] image: image nope/none:1 not on this host (pull: never)" in cli.stderr
    assert '"NodeStarted"' not in (cli.run_dir / "events.jsonl").read_text()


def test_stacks_read_every_rank_inside_its_container(podman: TestCluster, tmp_path: Path) -> None:
    job = {"script": "tests/data/stall.py", "nproc_per_node": 2, "master_port": 29805,
           "stop_grace": 2}  # fmt: skip
    inv = inventory(podman, tmp_path / "inv.yaml", job, hosts=(0, 1))
    launch = subprocess.run(
        [sys.executable, "-m", "ddptui.tui.cli", "--headless", "launch", "-i", str(inv), "--detach",
         "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert launch.returncode == 0, launch.stderr
    run_id = launch.stdout.split()[-1]
    attach = Cmd(["attach", str(tmp_path / "run")], tmp_path / "attach")
    try:
        done = "all_reduce done"
        wait_for(lambda: attach.stdout.count(done) == 4, 120, "every rank to reach its stall")
        stacks = Cmd(["stacks", str(tmp_path / "run"), "--json"], tmp_path / "stacks")
        assert stacks.wait(120) == 0, stacks.stderr
        groups = json.loads(stacks.stdout)["groups"]
        assert [g["ranks"] for g in groups] == [[3], [0, 1, 2]]
        assert groups[0]["frames"][0]["function"] == "load_batch"  # read from its container
    finally:
        stop = Cmd(["stop", run_id], tmp_path / "stop")
        assert stop.wait(120) == 0, stop.stderr
        attach.wait(60)
    nothing_left(podman, run_id)
