"""Judging the facts: each host alone (recorded nvidia-smi output), then hosts together."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import nvidia_smi
import pytest
from nvidia_smi import A100, DRIVER_ERROR, H100_BUSY, H200, H200_BUSY

from ddptui.remote import inventory
from ddptui.remote.checks import judge as checks
from ddptui.remote.checks import probe
from ddptui.remote.events import Finding, HostChecked
from ddptui.tui.headless import check as check_report

TORCH = {"version": "2.3.1+cu121", "cuda": "12.1", "cuda_available": True, "nccl": "2.20.5"}


def found(machine: str | None = None, **over: Any) -> dict[str, Any]:
    """What a healthy host's probe answers, with `machine`'s recorded nvidia-smi."""
    out: dict[str, Any] = {
        "hostname": "gpu-a",
        "os": "Ubuntu 22.04.4 LTS",
        "kernel": "5.15.0-105-generic",
        "python": "3.10.12",
        "python_exe": "/opt/venv/bin/python3",
        "torch": {"path": "/opt/venv/lib/python3.10/site-packages/torch", **TORCH},
        "workdir": {
            "path": "/home/me/job",
            "exists": True,
            "free_bytes": 412 * 2**30,
            "script": "/home/me/job/train.py",
            "script_found": True,
        },
        "ifname": "ens5",
        "port": None,
        "smi": None,
    }
    if machine:
        out["smi"] = {name: nvidia_smi.run(machine, a) for name, a in probe.SMI_RUNS.items()}
    out.update(over)
    return out


HOSTS = inventory.parse(
    "hosts:\n"
    + "".join(f"  - host: 10.0.0.{11 + i}\n    name: n{i}\n" for i in range(4))
    + "job:\n  script: train.py\n  nproc_per_node: auto\n",
    Path("inv.yaml"),
).hosts


def checked(k: int, facts: dict[str, Any], connect_s: float = 0.25) -> HostChecked:
    return probe.parse(HOSTS[k], facts, connect_s=connect_s, master_addr="10.0.0.11")


def not_ok(h: HostChecked) -> list[tuple[str, str]]:
    return [(f.level, f.check) for f in h.findings if f.level != "ok"]


def message(h: HostChecked, check: str) -> str:
    return next(f.message for f in h.findings if f.check == check)


# -- one host ---------------------------------------------------------------------------------


def test_healthy_a100_host() -> None:
    h = checked(1, found(A100))
    assert not_ok(h) == []
    assert message(h, "ssh") == "connected in 0.25 s"
    assert message(h, "gpu") == "4× NVIDIA A100-SXM4-40GB, driver 535.104.05, CUDA 12.2"  # noqa: RUF001
    assert message(h, "torch") == "torch 2.3.1+cu121, CUDA 12.1, NCCL 2.20.5"
    assert message(h, "route") == "ens5 routes to the master 10.0.0.11"
    assert message(h, "disk") == "412 GiB free in /home/me/job"


def test_busy_gpus_are_a_warning_naming_gpu_and_pid() -> None:
    h = checked(0, found(H100_BUSY, port={"port": 29500, "free": True}))
    assert not_ok(h) == [("warning", "gpu-busy")]
    assert message(h, "gpu-busy") == (
        "GPU 2 in use by pid 48211 /usr/bin/python3 (70.1 GiB); "
        "GPU 5 in use by pid 48290 python (39.7 GiB)"
    )
    assert message(h, "port") == "port 29500 is free"


def test_h200_recorded_on_a_gpu() -> None:
    h = checked(1, found(H200))
    assert not_ok(h) == []
    assert message(h, "gpu") == "1× NVIDIA H200, driver 580.159.04, CUDA 13.0"  # noqa: RUF001
    busy = checked(1, found(H200_BUSY))
    assert not_ok(busy) == [("warning", "gpu-busy")]
    assert message(busy, "gpu-busy") == "GPU 0 in use by pid 498 python3 (24.9 GiB)"


def test_memory_used_without_visible_processes_is_busy() -> None:
    smi = found(A100)["smi"]
    smi["gpus"]["out"] = smi["gpus"]["out"].replace(", 40960, 4, 0,", ", 40960, 30000, 97,", 1)
    h = checked(1, found(smi=smi))
    assert message(h, "gpu-busy") == "GPU 0 has 29.3 GiB in use by processes not visible here"


def test_driver_error_fails_with_nvidia_smis_message() -> None:
    h = checked(3, found(DRIVER_ERROR))
    assert not_ok(h) == [("failure", "gpu")]
    assert h.facts["gpu_count"] == 0 and h.facts["nvidia_smi"] == "error"
    assert "NVIDIA-SMI has failed because it couldn't communicate" in message(h, "gpu")


def test_no_nvidia_smi_is_a_cpu_host() -> None:
    h = checked(2, found(torch={"version": "2.3.1+cpu", "cuda": None, "cuda_available": False}))
    assert not_ok(h) == [] and h.gpus == ()
    assert message(h, "gpu") == "no nvidia-smi: a CPU host"


def test_cpu_torch_on_a_gpu_host_is_a_warning() -> None:
    cpu_torch = {"version": "2.13.0+cpu", "cuda": None, "cuda_available": False}
    h = checked(1, found(A100, torch=cpu_torch))
    assert not_ok(h) == [("warning", "cuda")]
    assert "CPU build" in message(h, "cuda")


def test_cuda_torch_that_cannot_use_the_gpus_fails() -> None:
    h = checked(
        1,
        found(
            A100, torch={**TORCH, "version": "2.6.0+cu126", "cuda": "12.6", "cuda_available": False}
        ),
    )
    assert not_ok(h) == [("failure", "cuda")]
    assert "driver 535.104.05 (CUDA 12.2)" in message(h, "cuda")


@pytest.mark.parametrize(
    ("over", "check", "text"),
    [
        ({"python": None, "torch": None}, "python", "no python at python3 on this host"),
        ({"torch": {"error": "not installed"}}, "torch", "torch is not installed (for "),
        (
            {"torch": {**TORCH, "error": "import torch failed: OSError: libcudnn.so.9"}},
            "torch",
            "import torch failed: OSError: libcudnn.so.9 (for /opt/venv/bin/python3)",
        ),
        ({"workdir": {"path": "/nope", "exists": False}}, "workdir", "/nope does not exist"),
        (
            {"workdir": {**found()["workdir"], "script_found": False}},
            "script",
            "the script /home/me/job/train.py is not there",
        ),
        ({"ifname": None}, "route", "no route to the master 10.0.0.11"),
        (
            {"port": {"port": 29500, "free": False, "error": "Address already in use"}},
            "port",
            "port 29500 is in use on the master (Address already in use)",
        ),
    ],
)
def test_each_failure(over: dict[str, Any], check: str, text: str) -> None:
    h = checked(0, found(**over))
    assert not_ok(h) == [("failure", check)]
    assert text in message(h, check)


def test_low_disk_is_a_warning() -> None:
    h = checked(1, found(workdir={**found()["workdir"], "free_bytes": 2**30}))
    assert not_ok(h) == [("warning", "disk")]


def test_unreachable_host_is_one_failure() -> None:
    h = probe.unreachable(HOSTS[2], "timed out connecting to 10.0.0.13:22 after 10 s")
    assert [(f.level, f.check, f.message) for f in h.findings] == [
        ("failure", "ssh", "timed out connecting to 10.0.0.13:22 after 10 s")
    ]


# -- across hosts -----------------------------------------------------------------------------


def cluster_of_four() -> list[HostChecked]:
    return [
        checked(0, found(H100_BUSY)),
        checked(1, found(A100)),
        checked(2, found()),
        checked(3, found(DRIVER_ERROR)),
    ]


def test_differences_are_warnings_naming_hosts_and_values() -> None:
    found_across = {f.check: f for f in checks.across(cluster_of_four())}
    assert found_across["same-driver"].message == (
        "driver differs across hosts: 550.54.15 on n0; 535.104.05 on n1"
    )
    assert found_across["same-cuda"].message == (
        "CUDA (driver) differs across hosts: 12.4 on n0; 12.2 on n1"
    )
    assert found_across["same-gpu"].message == (
        "GPU model differs across hosts: NVIDIA H100 80GB HBM3 on n0; "
        "NVIDIA A100-SXM4-40GB on n1; no GPU on n2"
    )
    assert found_across["same-torch"] == Finding(
        "ok", "same-torch", "torch 2.3.1+cu121 on every host"
    )
    assert {f.level for f in found_across.values()} == {"ok", "warning"}


def test_torch_difference() -> None:
    other = {**found()["torch"], "version": "2.2.0+cu118", "cuda": "11.8"}
    hosts = [checked(0, found(A100)), checked(1, found(A100)), checked(2, found(A100, torch=other))]
    [torch] = [f for f in checks.across(hosts) if f.check == "same-torch"]
    assert torch.level == "warning"
    assert torch.message == "torch differs across hosts: 2.3.1+cu121 on n0, n1; 2.2.0+cu118 on n2"


def test_cpu_only_cluster_compares_no_gpus() -> None:
    hosts = [checked(0, found()), checked(1, found())]
    assert [f.check for f in checks.across(hosts)] == ["same-torch"]


def test_one_gpu_host_is_not_the_same_everywhere() -> None:
    hosts = [checked(0, found(A100)), checked(1, found())]
    assert {f.check: f.level for f in checks.across(hosts)} == {
        "same-torch": "ok",
        "same-gpu": "warning",  # A100 on n0, no GPU on n1; driver and CUDA: nothing to compare
    }


def test_done_collects_every_finding_in_host_order() -> None:
    hosts = cluster_of_four()
    done = checks.done(list(reversed(hosts)))
    assert not done.ok
    assert [f.host for f in done.findings if f.host][:2] == ["n0", "n0"]
    assert [f for f in done.findings if f.level == "failure"] == [
        f for f in hosts[3].findings if f.level == "failure"
    ]
    assert done.findings[-4:] == checks.across(hosts)
    assert checks.done(hosts[:3]).ok  # warnings only


# -- nproc_per_node: auto -----------------------------------------------------------------------


def test_auto_nprocs_from_gpus_found_else_inventory_gpus_else_one() -> None:
    text = (
        "hosts:\n  - host: a\n  - host: b\n  - host: c\n    gpus: 2\n  - host: d\n"
        "job:\n  script: t.py\n  nproc_per_node: auto\n"
    )
    inv = inventory.parse(text, Path("inv.yaml"))
    counts = {h.node_rank: h.facts["gpu_count"] for h in cluster_of_four()}
    assert counts == {0: 8, 1: 4, 2: 0, 3: 0}
    assert checks.nprocs(inv, counts) == [8, 4, 2, 1]
    fixed = inv.job.model_copy(update={"nproc_per_node": 3})
    assert checks.nprocs(inventory.Inventory(inv.path, inv.hosts, fixed), counts) == [3] * 4


# -- the report ---------------------------------------------------------------------------------


def test_table_one_row_per_host_then_findings() -> None:
    hosts = cluster_of_four()
    out = io.StringIO()
    check_report.print_table(hosts, checks.done(hosts), out)
    lines = out.getvalue().splitlines()
    rows = [line for line in lines if line.startswith("n")]
    assert [r.split()[0] for r in rows] == ["n0", "n1", "n2", "n3"]
    assert rows[0].split()[1:3] == ["0.25", "s"] and "(2 busy)" in rows[0]
    assert rows[2].rstrip().endswith(" ok") and rows[3].rstrip().endswith("FAILED")
    assert "FAIL n3 gpu: nvidia-smi failed (exit 9): NVIDIA-SMI has failed" in out.getvalue()
    assert lines[-1] == "4 hosts: checks failed on 1, 4 warnings"


def test_json_holds_every_fact() -> None:
    hosts = cluster_of_four()
    out = io.StringIO()
    check_report.print_json(hosts, checks.done(hosts), out)
    report = json.loads(out.getvalue())
    assert report["ok"] is False
    assert [h["facts"]["gpu_count"] for h in report["hosts"]] == [8, 4, 0, 0]
    assert report["hosts"][0]["gpus"][5]["processes"][0]["pid"] == 48290
    assert {f["check"] for f in report["findings"] if f["host"] is None} >= {"same-gpu"}


# -- the master's address ---------------------------------------------------------------------


def network(master: str, address: str | None, **over: Any) -> HostChecked:
    return probe.parse(HOSTS[1], found(**over), connect_s=0.1, master_addr=master, address=address)


def test_no_master_address_fails_the_route_check() -> None:
    h = network("", "10.0.0.12", ifname="lo")  # '' "routes" to lo: the bug behind MASTER_ADDR=''
    assert not_ok(h) == [("failure", "route")]
    assert message(h, "route") == "node 0's address is not known; set job.master_addr"


def test_loopback_master_fails_on_a_host_elsewhere() -> None:
    h = network("127.0.0.1", "10.0.0.12", ifname="lo")
    assert not_ok(h) == [("failure", "route")]
    assert message(h, "route").startswith(
        "the master address 127.0.0.1 is a loopback address: this host (10.0.0.12) cannot"
    )
    assert not_ok(network("127.0.0.1", "127.0.0.1", ifname="lo")) == []  # the same machine


def test_login_notices_are_warnings() -> None:
    text = "~/.ssh/config sets `UserKnownHostsFile none` for n1: ddptui still verifies ..."
    h = probe.parse(HOSTS[1], found(), connect_s=0.1, master_addr="10.0.0.11", ssh_notices=[text])
    assert not_ok(h) == [("warning", "ssh")]
    assert [f.message for f in h.findings if f.level == "warning"] == [text]


def test_a_spare_that_fails_a_check_is_named_and_never_stops_a_launch() -> None:
    spare = checks.as_spare(checked(3, found(ifname=None)))
    assert not_ok(spare) == [("warning", "route")]
    assert message(spare, "route") == "spare not usable: no route to the master 10.0.0.11"
    assert message(spare, "spare") == "a spare: out of the run until a host is lost"
    assert checks.done([checked(0, found()), spare]).ok


def test_a_master_port_picked_by_node_0_is_said_so() -> None:
    h = checked(0, found(port={"port": 41234, "free": True, "auto": True}))
    assert h.facts["port"] == 41234 and h.facts["port_auto"]
    assert message(h, "port") == "port 41234 is free (picked: job.master_port is auto)"
