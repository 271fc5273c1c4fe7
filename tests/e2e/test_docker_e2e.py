"""Jobs in docker containers: docker's host network is its daemon's own namespace,
so two nodes on this machine (`transport: local`) with a dockerd of the tests' own that leaves
iptables alone. A job runs to its end in its containers; Ctrl-C ends it and leaves none."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import containerhosts
import pytest
from e2etools import Cli, wait_for
from testhosts import REPO, pids_with_env

from ddptui.remote.host import container

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def docker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The test image's name in a dockerd of the tests' own; DOCKER_HOST set for the launcher."""
    if os.geteuid() != 0 or containerhosts.docker_missing():
        if os.environ.get("CI"):
            raise RuntimeError("docker tests need root and dockerd")
        pytest.skip("needs root and dockerd")
    proc = containerhosts.start_dockerd(tmp_path_factory.mktemp("dockerd") / "dockerd.log")
    try:
        image = containerhosts.ensure_docker_image(sys.executable)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("DOCKER_HOST", containerhosts.DOCKER_HOST)
            yield image
    finally:
        proc.terminate()
        proc.wait(30)


def inventory(tmp: Path, image: str, job: dict[str, object]) -> Path:
    venv = str(Path(sys.executable).parent.parent)
    box = {"runtime": "docker", "image": image, "python": sys.executable, "mounts": [venv],
           "ulimits": {}}  # fmt: skip
    doc = {
        "defaults": {"transport": "local", "workdir": str(REPO), "python": sys.executable,
                     "container": box},
        "hosts": [{"host": "localhost", "name": "node0"}, {"host": "localhost", "name": "node1"}],
        "job": {"nproc_per_node": 1, "stop_grace": 2, **job},
    }  # fmt: skip
    path = tmp / "inv.yaml"
    path.write_text(json.dumps(doc))
    return path


def containers_left(run_id: str) -> list[str]:
    listing = container.sweep_commands("docker", run_id) or []
    return subprocess.run(listing, capture_output=True, text=True).stdout.split()


def test_a_job_in_docker_containers_then_nothing_left(docker: str, tmp_path: Path) -> None:
    job = {"script": "tests/data/tick.py", "args": ["10", "0.05"], "master_port": 29811}
    cli = Cli(inventory(tmp_path, docker, job), tmp_path / "run")
    assert cli.wait(240) == 0, cli.stderr
    for r in (0, 1):
        log = (cli.run_dir / f"rank-{r}.log").read_text().splitlines()
        assert [ln for ln in log if ln.startswith(f"tick {r}")] == [
            f"tick {r} {i}" for i in range(10)
        ]
    run_id = cli.run_id()
    assert_nothing_left_here(run_id)


def test_ctrl_c_leaves_no_docker_container(docker: str, tmp_path: Path) -> None:
    job = {"script": "tests/data/tick.py", "args": ["100000", "0.1"], "master_port": 29812}
    cli = Cli(inventory(tmp_path, docker, job), tmp_path / "run")
    run_id = cli.run_id()
    wait_for(lambda: "[r1 node1] tick 1 " in cli.stdout, 120, "rank 1 to tick in its container")
    assert containers_left(run_id)
    cli.proc.send_signal(signal.SIGINT)
    assert cli.wait(120) == 130, cli.stderr
    assert_nothing_left_here(run_id)


def assert_nothing_left_here(run_id: str) -> None:
    wait_for(lambda: not containers_left(run_id), 30, "the run's containers to go")
    wait_for(lambda: not pids_with_env("DDPTUI_RUN_ID", run_id), 30, "the run's processes")
