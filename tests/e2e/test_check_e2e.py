"""Checks before launch against the ssh test hosts, each with its recorded nvidia-smi stand-in.

node0: 8 H100s, GPUs 2 and 5 busy; node1: 4 A100s 40GB; node2: no nvidia-smi (a CPU host);
node3: nvidia-smi whose driver is not loaded. Every host runs the same venv (CPU torch).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from probetools import preflight
from testhosts import REPO, TestCluster

from ddptui.remote import inventory
from ddptui.remote.agents import monitor
from ddptui.remote.events import Event, GpuStats, HostChecked
from ddptui.remote.run.runner import Run

JOB = {"script": "examples/train.py", "master_port": 29631}

pytestmark = pytest.mark.e2e


def ddptui(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "ddptui.tui.cli", "--headless", *args]
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=180)


def check(inv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return ddptui("check", "-i", str(inv), *args)


def test_table_and_exit_code(gpu_cluster: TestCluster, tmp_path: Path) -> None:
    inv = gpu_cluster.write_inventory(tmp_path / "inv.yaml", JOB, hosts=(0, 1, 2, 3))
    res = check(inv)
    assert res.returncode == 1, res.stderr
    rows = {line.split()[0]: line for line in res.stdout.splitlines() if line.startswith("node")}
    assert set(rows) == {"node0", "node1", "node2", "node3"}
    for name, row in rows.items():
        assert f" {name} " in row  # the hostname column: the host's own hostname
    assert "8× NVIDIA H100 80GB HBM3 (2 busy)" in rows["node0"]  # noqa: RUF001
    assert "550.54.15 / 12.4" in rows["node0"] and "eth0, port 29631 free" in rows["node0"]
    assert "4× NVIDIA A100-SXM4-40GB" in rows["node1"]  # noqa: RUF001
    assert "535.104.05 / 12.2" in rows["node1"]
    assert "none (CPU host)" in rows["node2"] and rows["node2"].rstrip().endswith(" ok")
    assert "nvidia-smi failed" in rows["node3"] and rows["node3"].rstrip().endswith("FAILED")
    lines = res.stdout.splitlines()
    assert (
        "FAIL node3 gpu: nvidia-smi failed (exit 9): NVIDIA-SMI has failed because it couldn't "
        "communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is "
        "installed and running." in lines
    )
    assert (
        "warn node0 gpu-busy: GPU 2 in use by pid 48211 /usr/bin/python3 (70.1 GiB); "
        "GPU 5 in use by pid 48290 python (39.7 GiB)" in lines
    )
    assert (
        "warn same-driver: driver differs across hosts: 550.54.15 on node0; 535.104.05 on node1"
        in lines
    )
    assert lines[-1].startswith("4 hosts: checks failed on 1, ")


def test_json_with_an_unreachable_host(gpu_cluster: TestCluster, tmp_path: Path) -> None:
    lost = {"host": gpu_cluster.unused_addr, "name": "lost"}
    inv = gpu_cluster.write_inventory(tmp_path / "inv.yaml", JOB, hosts=(0, 1, 2, 3, lost))
    res = check(inv, "--json")
    assert res.returncode == 3, res.stderr  # a host could not be reached, as launch says
    report = json.loads(res.stdout)
    assert report["ok"] is False
    hosts = {h["host"]: h for h in report["hosts"]}
    assert [h["node_rank"] for h in report["hosts"]] == [0, 1, 2, 3, 4]
    h100 = hosts["node0"]
    assert h100["facts"]["hostname"] == "node0" and h100["facts"]["ifname"] == "eth0"
    assert h100["facts"]["port_free"] is True and hosts["node1"]["facts"]["port"] is None
    assert h100["facts"]["connect_s"] > 0
    assert [g["index"] for g in h100["gpus"] if g["processes"]] == [2, 5]
    assert h100["gpus"][2]["processes"] == [
        {"pid": 48211, "memory_mib": 71746, "name": "/usr/bin/python3", "user": ""}
    ]  # user: known to the live figures (remote/agents/monitor.py), not to the check
    assert len(hosts["node1"]["gpus"]) == 4 and hosts["node1"]["facts"]["driver"] == "535.104.05"
    assert hosts["node2"]["facts"]["nvidia_smi"] == "missing" and hosts["node2"]["gpus"] == []
    assert hosts["node3"]["facts"]["nvidia_smi"] == "error"
    assert hosts["lost"]["facts"]["reachable"] is False
    failures = {(f["host"], f["check"]) for f in report["findings"] if f["level"] == "failure"}
    assert failures == {("node3", "gpu"), ("lost", "ssh")}
    for h in ("node0", "node1", "node2", "node3"):
        assert hosts[h]["facts"]["torch"] == hosts["node0"]["facts"]["torch"]


def test_healthy_hosts_pass_with_warnings(gpu_cluster: TestCluster, tmp_path: Path) -> None:
    inv = gpu_cluster.write_inventory(tmp_path / "inv.yaml", JOB, hosts=(0, 1, 2))
    res = check(inv)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "FAIL" not in res.stdout and "warn node0 gpu-busy" in res.stdout
    assert res.stdout.splitlines()[-1].startswith("3 hosts: checks passed, ")


def test_a_checkpoint_directory_not_shared_with_node_0_is_named(
    gpu_cluster: TestCluster, tmp_path: Path
) -> None:
    """job.checkpoint under each host's own home: node1 and the spare node2 cannot see what
    node 0 saves (a warning naming each, with its path); on storage all share, none, and node
    0's mark is gone after."""
    spare = {"host": gpu_cluster.hosts[2].addr, "name": "node2", "spare": True}
    for folder, unshared in (("~/ckpt", {"node1", "node2"}), (str(tmp_path / "ckpt"), set())):
        path = gpu_cluster.write_inventory(
            tmp_path / "inv.yaml", {**JOB, "checkpoint": folder}, hosts=(0, 1, spare)
        )
        _, done = preflight(inventory.load(path))
        said = {f.host: f for f in done.findings if f.check == "checkpoint"}
        assert set(said) == {"node0", "node1", "node2"}, done.findings
        warned = {h for h, f in said.items() if f.level == "warning"}
        assert warned == unshared, said
        for name in unshared:
            home = gpu_cluster.hosts[int(name[-1])].home
            assert said[name].message.startswith(f"job.checkpoint {home}/ckpt is not where node 0")
        assert said["node0"].level == "ok", said["node0"]
    assert list(tmp_path.glob(".ddptui-shared-*")) == []


def test_auto_counts_each_hosts_gpus(gpu_cluster: TestCluster, tmp_path: Path) -> None:
    cpu = {"host": gpu_cluster.hosts[2].addr, "name": "node2", "gpus": 2}
    job = {**JOB, "nproc_per_node": "auto"}
    path = gpu_cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=(0, 1, cpu, 3))
    inv = inventory.load(path)
    pre, done = preflight(inv)
    assert not done.ok  # node3's driver
    assert pre.nprocs() == [8, 4, 2, 1]


def test_launch_refuses_on_a_failed_check(gpu_cluster: TestCluster, tmp_path: Path) -> None:
    inv = gpu_cluster.write_inventory(tmp_path / "inv.yaml", JOB, hosts=(2, 3))
    res = ddptui("launch", "-i", str(inv), "--run-dir", str(tmp_path / "run"))
    assert res.returncode == 1
    err = res.stderr
    assert "ddptui: FAIL node3 gpu: nvidia-smi failed (exit 9): NVIDIA-SMI has failed" in err
    assert "not starting: checks failed on 1 host(s)" in err
    assert ": running" not in err and res.stdout == ""
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["status"], summary["failing_host"]) == ("failed", "node3")
    assert summary["failure"]["message"].startswith("check failed (gpu): nvidia-smi failed")


def test_skip_checks_launches_anyway(gpu_cluster: TestCluster, tmp_path: Path) -> None:
    job = {"script": "tests/data/print_env.py", "launcher": "env", "master_port": 29632}
    inv = gpu_cluster.write_inventory(tmp_path / "inv.yaml", job, hosts=(2, 3))
    res = ddptui("launch", "--skip-checks", "-i", str(inv), "--run-dir", str(tmp_path / "run"))
    assert res.returncode == 0, res.stderr
    assert "ddptui: checks" not in res.stderr and "FAIL" not in res.stderr
    assert "[node3] {" in res.stdout  # the job ran on the host whose check would fail


def test_auto_launch_on_cpu_hosts_uses_their_gpus_entry(tmp_path: Path) -> None:
    # Two local nodes: torchrun on a test host spends over a minute in DNS timeouts (its netns
    # resolves nothing). Each node starts `auto` processes; the workers need no torch to say
    # who they are.
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        json.dumps(
            {
                "defaults": {"transport": "local", "workdir": str(REPO)},
                "hosts": [
                    {"host": "localhost", "name": "a", "gpus": 2, "env": {"DDPTUI_SHOW": "RANK"}},
                    {"host": "localhost", "name": "b", "gpus": 1, "env": {"DDPTUI_SHOW": "RANK"}},
                ],
                "job": {
                    "script": "tests/data/print_env.py",
                    "nproc_per_node": "auto",
                    "master_port": 29633,
                },
            }
        )
    )
    res = ddptui("launch", "-i", str(inv), "--run-dir", str(tmp_path / "run"))
    assert res.returncode == 0, res.stderr
    assert "nproc_per_node auto: 2 on a, 1 on b (world size 3)" in res.stderr
    seen = sorted(
        (line.split()[1].rstrip("]"), json.loads(line.split("] ", 1)[1])["env"]["RANK"])
        for line in res.stdout.splitlines()
        if '"RANK"' in line
    )
    assert seen == [("a", "0"), ("a", "1"), ("b", "2")]


def test_live_gpu_refresh_while_the_job_runs(
    gpu_cluster: TestCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(monitor, "INTERVAL", 0.2)
    flag = tmp_path / "enough"
    (tmp_path / "wait.py").write_text(
        f"import os, time\nwhile not os.path.exists({str(flag)!r}):\n    time.sleep(0.05)\n"
    )
    job = {"script": "wait.py", "launcher": "env", "master_port": 29634}
    path = gpu_cluster.write_inventory(
        tmp_path / "inv.yaml", job, hosts=(1, 2), workdir=str(tmp_path)
    )
    seen: list[Event] = []

    def emit(event: Event) -> None:
        seen.append(event)
        if sum(isinstance(e, GpuStats) for e in seen) >= 3:
            flag.touch()  # the job may end now

    fin = asyncio.run(Run(inventory.load(path), emit, run_dir=tmp_path / "run").execute())
    assert fin.status == "succeeded"
    stats = [e for e in seen if isinstance(e, GpuStats)]
    assert {s.host for s in stats} == {"node1"}  # the CPU host is not asked
    assert [g.name for g in stats[0].gpus] == ["NVIDIA A100-SXM4-40GB"] * 4
    kinds = [type(e).__name__ for e in seen]
    between = kinds[kinds.index("ChecksDone") + 1 : -1]
    assert kinds.count("GpuStats") == between.count("GpuStats")  # while the job runs only
    assert kinds[-1] == "RunFinished" and "NodeStarted" in between
    checked = [e for e in seen if isinstance(e, HostChecked)]
    assert sorted((c.host, c.facts["gpu_count"]) for c in checked) == [("node1", 4), ("node2", 0)]
