"""Podman on the test hosts, and the host side of containers on them: the command
line remote/host/container.py builds runs over ssh, its checks answer, and a killed client
leaves no container. (The supervisor's use of it is tested with the agent.)"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from e2etools import wait_for
from testhosts import REPO, TestCluster

from ddptui.remote.host import container

pytestmark = pytest.mark.e2e
SHIM = (REPO / "remote" / "host" / "shim.py").read_text()
# The hosts' root login, no GPU, no InfiniBand: what here() says on a test host.
HOST = {"uid": 0, "gid": 0, "login": "root", "rootless": False, "gpus": False,
        "gpu_via": "env", "devices": [], "cuda_visible_devices": None}  # fmt: skip


def spec(cluster: TestCluster, **keys: Any) -> dict[str, Any]:
    return {**cluster.container_defaults(), "pull": "never", "ipc": "host", **keys}


def on_host(cluster: TestCluster, i: int, code: str, timeout: float = 120) -> Any:
    """Run host-side python on host i (its venv; the repository is on the shared disk)."""
    script = f"import json, sys; sys.path.insert(0, {str(REPO)!r})\n{code}"
    res = cluster.ssh(i, shlex.join([sys.executable, "-c", script]), timeout=timeout)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def check(cluster: TestCluster, i: int, s: dict[str, Any]) -> dict[str, Any]:
    code = (
        "from ddptui.remote.host import container\n"
        f"print(json.dumps(container.check({s!r}, 'e2e', {i}, {str(REPO)!r}, {SHIM!r})))"
    )
    facts: dict[str, Any] = on_host(cluster, i, code)
    return facts


def test_a_container_is_on_its_hosts_network_and_in_its_storage_alone(podman: TestCluster) -> None:
    def podman_run(*flags: str, code: str) -> list[str]:
        venv = Path(podman.python).parent.parent  # the image holds its base interpreter
        mount = f"{venv}:{venv}"
        image = str(podman.image)
        return [
            "podman",
            "run",
            *flags,
            "--network",
            "host",
            "-v",
            mount,
            image,
            podman.python,
            "-c",
            code,
        ]

    hostname = podman_run("--rm", code="import socket; print(socket.gethostname())")
    res = podman.ssh(1, shlex.join(hostname))
    assert (res.returncode, res.stdout) == (0, "node1\n"), res.stderr
    images = [podman.ssh(i, "podman images -q").stdout.split() for i in (0, 1)]
    assert images[0] == images[1] and images[0]  # one shared store
    sleeper = podman.ssh(0, shlex.join(podman_run("-d", code="import time; time.sleep(60)")))
    try:
        assert podman.ssh(0, "podman ps -q --no-trunc").stdout.split() == [sleeper.stdout.strip()]
        assert podman.ssh(1, "podman ps -aq").stdout.split() == []  # host 1's own storage
    finally:
        podman.ssh(0, "podman rm -f -t 0 " + sleeper.stdout.strip())


def test_checks_find_the_image_and_the_job_python_inside(podman: TestCluster) -> None:
    facts = [check(podman, i, spec(podman)) for i in (0, 1)]
    assert facts[0]["image_id"] == facts[1]["image_id"]
    run = facts[0]["dry_run"]
    import torch

    assert (run["torch"], run["cuda"], run["uid"]) == (torch.__version__, None, 0)
    assert facts[0]["runtime_version"] and facts[0]["leftovers"] == []


def test_checks_refuse_a_missing_image_and_name_a_container_that_did_not_start(
    podman: TestCluster,
) -> None:
    missing = check(podman, 0, spec(podman, image="nvcr.io/nvidia/pytorch:24.05-py3"))
    assert missing["image_error"] == (
        "image nvcr.io/nvidia/pytorch:24.05-py3 not on this host (pull: never)"
    )
    # `--ulimit memlock=-1` fails on this machine (no CAP_SYS_RESOURCE): runc says so
    limited = check(podman, 0, spec(podman, ulimits={"memlock": "-1:-1"}))
    assert limited["dry_run_error"].startswith(
        "the container did not start: podman could not run the container's command"
    )
    assert "rlimit" in limited["dry_run_error"]


def test_a_killed_client_leaves_no_container(podman: TestCluster, tmp_path: Path) -> None:
    """The supervisor SIGKILLed (here: its ssh): the container's stdin closes, the shim ends
    the job, and --rm removes the container."""
    run_id = f"e2e{os.getpid()}"
    (tmp_path / container.SHIM).write_text(SHIM)
    job = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(300)"]
    argv, _ = container.command(
        spec(podman), job, {"DDPTUI_RUN_ID": run_id}, run_id, 0, str(REPO), str(tmp_path), host=HOST
    )
    ssh = ["ssh", "-F", str(podman.ssh_config), "node0", shlex.join(argv)]
    client = subprocess.Popen(ssh, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert client.stdout is not None and client.stdout.readline() == b"up\n"
    assert (tmp_path / container.READY).exists()
    assert podman.ssh(0, "podman ps -q --filter label=ddptui.run=" + run_id).stdout.strip()
    start = time.monotonic()
    client.send_signal(signal.SIGKILL)
    client.wait()
    wait_for(lambda: not podman.pids_with_env("DDPTUI_RUN_ID", run_id), 15, "the job to end")
    listing = shlex.join(container.sweep_commands("podman", run_id) or [])
    wait_for(lambda: not podman.ssh(0, listing).stdout.split(), 15, "the container to go")
    assert time.monotonic() - start < 10  # TERM ends it: no grace needed
