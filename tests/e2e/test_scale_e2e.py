"""128 test hosts written as one range: `check` passes, a light job runs on all of them and
ends, a failure on one node stops all 128 and is named, and nothing is left anywhere.

Not in the default run (`-m scale`, scripts/scale_test.sh): 128 sshds and their logins take
minutes on a small machine. Builds its own cluster under DDPTUI_TESTHOSTS's prefix, so run it
alone (the 4-host session cluster holds the same prefix's lock).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PREFIX, SUBNET
from e2etools import Cli, Cmd, assert_nothing_left
from testhosts import FIRST_HOST_OCTET, TestCluster

pytestmark = [pytest.mark.e2e, pytest.mark.scale]
HOSTS = 128
SCRIPT = Path(__file__).parents[1] / "data" / "light_job.py"


@pytest.fixture(scope="module")
def big(
    request: pytest.FixtureRequest,
    require_testhosts: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[TestCluster]:
    if "scale" not in request.config.getoption("markexpr", ""):  # `-m e2e` alone: not these
        pytest.skip("the 128-host tests run with -m scale (scripts/scale_test.sh)")
    root = tmp_path_factory.mktemp("scalehosts")
    with TestCluster(HOSTS, root=root, prefix=PREFIX, subnet=SUBNET, lock_timeout=30) as c:
        yield c


def write_inventory(c: TestCluster, path: Path, **env: str) -> Path:
    """Every host in one entry: `host: "10.x.y.[11-138]"`, `name: node[0-127]`."""
    last = FIRST_HOST_OCTET + HOSTS - 1
    entry = {"host": f"{SUBNET}.[{FIRST_HOST_OCTET}-{last}]", "name": f"node[0-{HOSTS - 1}]"}
    job = {"script": str(SCRIPT), "launcher": "env", "stop_grace": 2, "master_port": 29641}
    return c.write_inventory(path, job, hosts=[entry], env=env)


def test_check_passes_on_128_hosts(big: TestCluster, tmp_path: Path) -> None:
    cmd = Cmd(["check", "-i", str(write_inventory(big, tmp_path / "inv.yaml")), "--json"],
              tmp_path / "check")  # fmt: skip
    assert cmd.wait(600) == 0, cmd.stderr[-2000:]
    hosts = json.loads(cmd.stdout)["hosts"]
    assert [h["host"] for h in hosts] == [f"node{k}" for k in range(HOSTS)]


def test_a_light_job_runs_on_all_128_and_ends(big: TestCluster, tmp_path: Path) -> None:
    inv = write_inventory(big, tmp_path / "inv.yaml")
    cli = Cli(inv, tmp_path / "run", flags=["--skip-checks"])
    assert cli.wait(600) == 0, cli.stderr[-2000:]
    for k in range(HOSTS):
        assert f"hello from node {k} of {HOSTS} ({big.hosts[0].addr})" in cli.stdout
    assert cli.summary()["status"] == "succeeded"
    assert_nothing_left(big, cli.run_id())


def test_a_failure_on_one_node_stops_all_128(big: TestCluster, tmp_path: Path) -> None:
    inv = write_inventory(big, tmp_path / "inv.yaml", FAIL_NODE="77", FAIL_AFTER="3", STAY="600")
    cli = Cli(inv, tmp_path / "run", flags=["--skip-checks"])
    assert cli.wait(600) == 1, cli.stderr[-2000:]
    summary = cli.summary()
    assert (summary["status"], summary["failing_host"]) == ("failed", "node77")
    assert "node77" in cli.stderr
    assert_nothing_left(big, cli.run_id(), timeout=60)
