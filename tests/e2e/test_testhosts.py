"""The ssh test hosts themselves: reachable, named, tooled, observable, and cleaned up."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import testhosts
from testhosts import TestCluster, pids_with_env, teardown_all

REPO = Path(__file__).resolve().parents[2]
# A second cluster next to the session's one needs its own names and subnet.
OTHER_PREFIX, OTHER_SUBNET = "ddptt", "10.213.8"


def _wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.e2e
def test_ssh_reaches_each_host_by_name(cluster: TestCluster) -> None:
    for host in cluster.hosts:
        result = cluster.ssh(host.index, "hostname")
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == host.name


@pytest.mark.e2e
def test_hosts_reach_each_other_over_tcp(cluster: TestCluster) -> None:
    server = (
        "import socket; s = socket.create_server(('{addr}', 5555)); print('ready', flush=True);"
        " c, _ = s.accept(); print(c.recv(100).decode(), flush=True)"
    )
    h0, h1 = cluster.hosts[0], cluster.hosts[1]
    argv = ["ip", "netns", "exec", h0.netns, sys.executable, "-c", server.format(addr=h0.addr)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as listener:
        assert listener.stdout is not None
        assert listener.stdout.readline().strip() == "ready"
        client = f"import socket; socket.create_connection(('{h0.addr}', 5555)).sendall(b'hi')"
        result = cluster.ssh(h1.index, f'python3 -c "{client}"')
        assert result.returncode == 0, result.stderr
        assert listener.stdout.readline().strip() == "hi"
        assert listener.wait(5) == 0


@pytest.mark.e2e
def test_host_tool_is_first_on_path(cluster: TestCluster) -> None:
    cluster.put_tool(2, "nvidia-smi", "#!/bin/sh\necho fake-smi on $(hostname)\n")
    assert cluster.ssh(2, "nvidia-smi").stdout.strip() == "fake-smi on node2"
    assert cluster.ssh(1, "command -v nvidia-smi").returncode != 0
    result = cluster.ssh(0, "command -v python3")
    assert result.stdout.strip() == str(Path(cluster.python).parent / "python3")


@pytest.mark.e2e
def test_pids_with_env_finds_remote_process_until_killed(cluster: TestCluster) -> None:
    tag = uuid.uuid4().hex
    started = cluster.ssh(3, f"DDPT_TEST_TAG={tag} setsid sleep 60 </dev/null >/dev/null 2>&1 &")
    assert started.returncode == 0, started.stderr
    assert _wait_for(lambda: len(cluster.pids_with_env("DDPT_TEST_TAG", tag)) == 1)
    [pid] = cluster.pids_with_env("DDPT_TEST_TAG", tag)
    assert cluster.pids_with_env("DDPT_TEST_TAG", tag + "x") == []
    os.kill(pid, 9)
    assert _wait_for(lambda: cluster.pids_with_env("DDPT_TEST_TAG", tag) == [])


@pytest.mark.e2e
def test_pdsh_runs_on_all_hosts(cluster: TestCluster) -> None:
    hosts = f"node[0-{len(cluster.hosts) - 1}]"
    result = subprocess.run(
        ["pdsh", "-w", hosts, "hostname"],
        env=cluster.pdsh_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    expected = {f"{h.name}: {h.name}" for h in cluster.hosts}
    assert set(result.stdout.splitlines()) == expected


@pytest.mark.e2e
def test_stopped_sshd_refuses_then_restarts(cluster: TestCluster) -> None:
    cluster.stop_sshd(1)
    try:
        result = cluster.ssh(1, "true")
        assert result.returncode == 255
        assert "Connection refused" in result.stderr
    finally:
        cluster.start_sshd(1)
    assert cluster.ssh(1, "hostname").stdout.strip() == "node1"


@pytest.mark.e2e
def test_unused_addr_is_unreachable(cluster: TestCluster) -> None:
    with pytest.raises(OSError):
        socket.create_connection((cluster.unused_addr, 22), timeout=5)


@pytest.mark.e2e
def test_inventory_defaults(cluster: TestCluster) -> None:
    defaults = cluster.inventory_defaults()
    assert defaults["user"] == "root" and defaults["port"] == 22
    assert Path(str(defaults["identity_file"])).is_file()
    assert Path(str(defaults["known_hosts"])).read_text().count("ssh-ed25519") == 4


def _leftovers(prefix: str) -> list[str]:
    netns = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    links = os.listdir("/sys/class/net")
    return [name for name in netns + links if name.startswith(prefix)]


@pytest.mark.e2e
def test_crash_leftovers_are_cleaned_and_teardown_leaves_nothing(
    require_testhosts: None, tmp_path: Path
) -> None:
    # `up` from the CLI leaves a running cluster behind, just like a crashed test run.
    script = REPO / "scripts" / "testhosts.py"
    up = [sys.executable, str(script), "up", "2", "--root", str(tmp_path / "old")]
    up += ["--prefix", OTHER_PREFIX, "--subnet", OTHER_SUBNET]
    subprocess.run(up, check=True, capture_output=True, timeout=60)
    old_pids = [int(p.read_text()) for p in (tmp_path / "old").glob("hosts/*/sshd.pid")]
    assert len(old_pids) == 2

    with TestCluster(2, root=tmp_path / "new", prefix=OTHER_PREFIX, subnet=OTHER_SUBNET) as other:
        assert all(not Path(f"/proc/{pid}/ns/net").exists() for pid in old_pids)
        assert other.ssh(1, "hostname").stdout.strip() == "node1"
        other.ssh(0, "DDPT_TEST_TAG=left setsid sleep 60 </dev/null >/dev/null 2>&1 &")
        assert _wait_for(lambda: pids_with_env("DDPT_TEST_TAG", "left") != [])
    assert _leftovers(OTHER_PREFIX) == []
    assert pids_with_env("DDPT_TEST_TAG", "left") == []
    teardown_all(OTHER_PREFIX)  # idempotent


def test_missing_root_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(testhosts, "SSHD", "/nonexistent/sshd")
    with pytest.raises(RuntimeError, match=r"root privileges.*/nonexistent/sshd"):
        testhosts.check_prerequisites()
