"""The probe: nvidia-smi parsing (recorded real output), the one-command host probe run here
through the local transport, the GPU refresh, and the events' JSON round trip."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import json
import socket
import sys
import venv
from pathlib import Path
from typing import Any

import nvidia_smi
import pytest
from nvidia_smi import A100, DRIVER_ERROR, H100_BUSY, H200_BUSY
from probetools import levels, local_inventory, preflight, run_probe, with_gpus
from probetools import message as _message

from ddptui.remote import events, inventory
from ddptui.remote import smi as smi_parse
from ddptui.remote.agents.transport import HostError, LocalTransport
from ddptui.remote.checks import probe
from ddptui.remote.events import ChecksDone, Finding, Gpu, GpuProcess, GpuStats, HostChecked
from ddptui.remote.host import probe as host_probe
from ddptui.remote.run.checkup import check as run_checks
from ddptui.remote.run.runner import Run

REPO = Path(__file__).resolve().parents[2]


def smi(machine: str) -> dict[str, Any]:
    return {name: nvidia_smi.run(machine, args) for name, args in probe.SMI_RUNS.items()}


# -- nvidia-smi output ------------------------------------------------------------------------


def test_h100_rows_with_busy_gpus() -> None:
    runs = smi(H100_BUSY)
    rows = smi_parse.parse_gpus(runs["gpus"]["out"])
    gpus = smi_parse.attach_processes(rows, runs["apps"]["out"])
    assert [g.index for g in gpus] == list(range(8))
    assert {g.name for g in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert {g.memory_total_mib for g in gpus} == {81559}
    assert {r.driver for r in rows} == {"550.54.15"}
    assert gpus[2].memory_used_mib == 72255 and gpus[2].utilization_pct == 98
    assert gpus[2].temperature_c == 64
    assert gpus[2].processes == (GpuProcess(48211, 71746, "/usr/bin/python3"),)
    assert gpus[5].processes == (GpuProcess(48290, 40630, "python"),)
    assert [g.index for g in gpus if g.processes] == [2, 5]
    assert smi_parse.cuda_version(runs["summary"]["out"]) == "12.4"


def test_h200_captured_busy() -> None:
    runs = smi(H200_BUSY)  # one process holding 24 GiB and multiplying, on a lent H200
    rows = smi_parse.parse_gpus(runs["gpus"]["out"])
    [gpu] = smi_parse.attach_processes(rows, runs["apps"]["out"])
    assert (gpu.index, gpu.name, gpu.memory_total_mib) == (0, "NVIDIA H200", 143771)
    assert (gpu.memory_used_mib, gpu.utilization_pct, gpu.temperature_c) == (25459, 100, 61)
    assert gpu.processes == (GpuProcess(498, 25450, "python3"),)  # no path in this VM
    assert [r.driver for r in rows] == ["580.159.04"]
    assert smi_parse.cuda_version(runs["summary"]["out"]) == "13.0"


def test_a100_idle() -> None:
    runs = smi(A100)
    assert runs["apps"] == {"code": 0, "out": "", "err": ""}  # nothing runs: no lines at all
    rows = smi_parse.parse_gpus(runs["gpus"]["out"])
    gpus = smi_parse.attach_processes(rows, runs["apps"]["out"])
    assert [(g.name, g.memory_total_mib, g.memory_used_mib) for g in gpus] == [
        ("NVIDIA A100-SXM4-40GB", 40960, 4)
    ] * 4
    assert not any(g.processes for g in gpus)
    assert {r.driver for r in rows} == {"535.104.05"}
    assert smi_parse.cuda_version(runs["summary"]["out"]) == "12.2"


def test_driver_error_is_nvidia_smis_own_message() -> None:
    runs = smi(DRIVER_ERROR)
    assert runs["gpus"]["code"] == 9
    error = smi_parse.smi_error(runs["gpus"])
    assert error is not None
    assert error.startswith("nvidia-smi failed (exit 9): NVIDIA-SMI has failed because it ")
    assert "couldn't communicate with the NVIDIA driver" in error
    assert smi_parse.smi_error(smi(A100)["gpus"]) is None


def test_unknown_fields_are_none() -> None:
    text = (
        "0, GPU-aaaa, NVIDIA GH200 480GB, [N/A], [N/A], [Not Supported], [N/A], 560.35.03\n"
        "1, [N/A], Tesla T4, 15360, 3, [Unknown Error], 41, 560.35.03\n"
    )
    a, b = smi_parse.parse_gpus(text)
    assert (a.gpu.memory_total_mib, a.gpu.memory_used_mib) == (0, 0)
    assert (a.gpu.utilization_pct, a.gpu.temperature_c) == (None, None)
    assert (b.uuid, b.gpu.utilization_pct, b.gpu.temperature_c) == (None, None, 41)


def test_odd_lines_are_skipped() -> None:
    assert smi_parse.parse_gpus("WARNING: infoROM is corrupted at gpu 0000:18:00.0\n") == []
    assert smi_parse.parse_apps("No running processes found\n") == []
    apps = smi_parse.parse_apps("GPU-1, 77, [N/A], python, the trainer\nGPU-1, [N/A], 5, x\n")
    assert apps == [("GPU-1", GpuProcess(77, 0, "python, the trainer"))]


def test_cuda_version_from_query_output() -> None:
    assert (
        smi_parse.cuda_version(
            "Driver Version                            : 550.54.15\n"
            "CUDA Version                              : 12.4\n"
        )
        == "12.4"
    )
    assert smi_parse.cuda_version("no header here") is None


def test_stand_in_refuses_other_queries() -> None:
    res = nvidia_smi.run(A100, ("--query-gpu=name,pci.bus_id", smi_parse.CSV))
    assert res["code"] == 2 and "no recording" in res["err"]


# -- the probe op -----------------------------------------------------------------------------


def test_the_master_alone_checks_its_port() -> None:
    inv = inventory.load(REPO / "inventory.yaml")
    asked = probe.spec(inv.job, "10.0.0.1", "/w d", is_master=True)
    assert asked["master_port"] == 29500 and asked["workdir"] == "/w d"
    assert probe.spec(inv.job, "10.0.0.1", None, is_master=False)["master_port"] is None


def test_probe_a_gpu_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with_gpus(monkeypatch, tmp_path, H100_BUSY)
    checked = run_probe(local_inventory(tmp_path))
    f = checked.facts
    assert f["hostname"] == socket.gethostname()
    assert f["python"] == ".".join(map(str, sys.version_info[:3]))
    assert f["torch"] == importlib.metadata.version("torch")
    assert f["script"] == str(tmp_path / "train.py") and f["script_found"]
    assert f["ifname"] == "lo" and f["port_free"] is True
    assert (f["driver"], f["cuda"], f["gpu_count"]) == ("550.54.15", "12.4", 8)
    assert len(checked.gpus) == 8 and checked.gpus[2].processes
    assert f["disk"] > 0
    found = levels(checked)
    assert found["gpu"] == "ok" and found["gpu-busy"] == "warning"
    assert found["gpu-health"] == "ok"  # its recorded health: no error, no Xid in this log
    assert found["port"] == found["route"] == found["script"] == found["torch"] == "ok"
    json.dumps(f)  # facts stay plain JSON


def test_probe_a_cpu_host_checks_the_port_on_the_master_only(tmp_path: Path) -> None:
    inv = local_inventory(tmp_path)
    with socket.socket() as taken:
        taken.bind(("", inv.job.master_port))
        taken.listen()
        master, worker = run_probe(inv, 0), run_probe(inv, 1)
    assert master.facts["nvidia_smi"] == "missing" and master.gpus == ()
    assert levels(master)["gpu"] == "ok"
    assert levels(master)["port"] == "failure"
    assert f"port {inv.job.master_port} is in use" in _message(master, "port")
    assert "port" not in levels(worker) and worker.facts["port"] is None


def test_probe_a_driver_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with_gpus(monkeypatch, tmp_path, DRIVER_ERROR)
    checked = run_probe(local_inventory(tmp_path))
    assert checked.facts["nvidia_smi"] == "error" and checked.gpus == ()
    assert levels(checked)["gpu"] == "failure"
    assert "couldn't communicate with the NVIDIA driver" in _message(checked, "gpu")


def test_missing_interpreter_names_the_path_and_still_learns_the_rest(tmp_path: Path) -> None:
    inv = local_inventory(tmp_path, host="  python: /nowhere/bin/python3\n")
    checked = run_probe(inv)
    assert checked.facts["python"] is None and checked.facts["hostname"]
    assert levels(checked)["python"] == "failure"
    assert "/nowhere/bin/python3" in _message(checked, "python")


def test_no_python_at_all(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    only_sh = tmp_path / "only-sh"
    only_sh.mkdir()
    (only_sh / "sh").symlink_to("/bin/sh")
    monkeypatch.setenv("PATH", str(only_sh))
    checked = run_probe(local_inventory(tmp_path, host="  python: /nowhere/python3\n"))
    assert [(f.check, f.level) for f in checked.findings if f.level != "ok"] == [
        ("python", "failure")
    ]
    assert "tried /nowhere/python3, python3, python" in _message(checked, "python")


def test_missing_torch_names_the_interpreter(tmp_path: Path) -> None:
    venv.EnvBuilder(with_pip=False, symlinks=True).create(tmp_path / "bare")
    bare = tmp_path / "bare" / "bin" / "python"
    checked = run_probe(local_inventory(tmp_path, host=f"  python: {bare}\n"))
    assert checked.facts["torch"] is None
    assert levels(checked)["torch"] == "failure"
    assert _message(checked, "torch") == f"torch is not installed (for {bare})"


def test_missing_script_and_workdir(tmp_path: Path) -> None:
    inv = local_inventory(tmp_path, job="  args: []\n")
    inv = dataclasses.replace(inv, job=inv.job.model_copy(update={"script": "nope.py"}))
    assert levels(run_probe(inv))["script"] == "failure"
    gone = dataclasses.replace(inv.hosts[0], workdir=str(tmp_path / "gone"))
    inv = dataclasses.replace(inv, hosts=(gone, *inv.hosts[1:]))
    checked = run_probe(inv)
    assert levels(checked)["workdir"] == "failure" and "script" not in levels(checked)


def test_an_answer_of_the_wrong_shape_is_a_probe_failure_not_a_crash() -> None:
    host = inventory.load(REPO / "inventory.yaml").hosts[0]
    for answer in ({"smi": "not a mapping"}, {"torch": ["a", "list"]}, {"workdir": 7}):
        checked = probe.parse(host, answer, connect_s=0.1, master_addr="127.0.0.1")
        assert [(f.check, f.level) for f in checked.findings if f.level != "ok"] == [
            ("probe", "failure")
        ], answer
        assert _message(checked, "probe").startswith("the probe's answer is not understood")


# -- the run's use of the checks ----------------------------------------------------------------


def test_a_failed_check_refuses_the_launch(tmp_path: Path) -> None:
    inv = local_inventory(tmp_path)
    inv = dataclasses.replace(inv, job=inv.job.model_copy(update={"script": "nope.py"}))
    seen: list[events.Event] = []
    fin = asyncio.run(Run(inv, seen.append, run_dir=tmp_path / "run").execute())
    assert (fin.status, fin.exit_code) == ("failed", 1)
    assert fin.failure is not None and fin.failure.message.startswith("check failed (script): ")
    kinds = [type(e).__name__ for e in seen]
    assert kinds.count("HostChecked") == 2 and "ChecksDone" in kinds
    assert "NodeStarted" not in kinds and not any(
        isinstance(e, events.HostState) and e.state == "running" for e in seen
    )
    assert any(isinstance(e, events.Notice) and "checks failed" in e.text for e in seen)


def test_auto_uses_the_gpus_found(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with_gpus(monkeypatch, tmp_path, A100)
    inv = local_inventory(tmp_path, job="  nproc_per_node: auto\n")
    assert Run(inv, lambda e: None).launch.nprocs() == [1, 1]  # before any probe: `gpus:` or 1
    pre, done = preflight(inv)
    assert done.ok
    assert pre.nprocs() == [4, 4]


class Unreachable(LocalTransport):
    async def connect(self) -> float:
        raise HostError(self.host.name, "timed out connecting to gone:22 after 10 s")


def test_check_goes_on_past_an_unreachable_master(tmp_path: Path) -> None:
    inv = local_inventory(tmp_path)
    transports = [Unreachable(inv.hosts[0]), LocalTransport(inv.hosts[1])]
    seen: list[events.Event] = []
    done = asyncio.run(run_checks(inv, seen.append, transports))
    assert not done.ok
    assert [(f.host, f.check) for f in done.findings if f.level == "failure"] == [("node0", "ssh")]
    checked = {e.host: e for e in seen if isinstance(e, HostChecked)}
    assert checked["node0"].facts["reachable"] is False
    assert checked["node1"].facts["hostname"] == socket.gethostname()


# -- events -----------------------------------------------------------------------------------


def test_check_events_survive_json() -> None:
    gpu = Gpu(3, "NVIDIA H100 80GB HBM3", 81559, 72255, None, 64, (GpuProcess(1, 2, "py"),))
    finding = Finding("warning", "gpu-busy", "GPU 3 in use", "node0")
    facts = {"hostname": "n0", "gpu_count": 1, "torch": None, "disk": 1.5, "ok": True}
    for event in (
        HostChecked("node0", 0, facts, (gpu, dataclasses.replace(gpu, index=4)), (finding,)),
        ChecksDone(False, (finding, Finding("failure", "same-torch", "differs"))),
        GpuStats("node0", 0, (gpu,)),
        HostChecked("node1", 1, {"reachable": False}),
    ):
        assert events.from_json(event.to_json()) == event


def test_a_prepared_node_is_the_one_its_start_asks_for(tmp_path: Path) -> None:
    """The early spec a probe carries (a supervisor prepared meanwhile) is the start's own: else
    every host would boot a fresh one at the start."""
    from ddptui.remote.host import protocol

    run = Run(local_inventory(tmp_path), lambda e: None)
    for k, node in enumerate(run.launch.plan(run.launch.nprocs()).nodes):
        assert run.preflight.early(k) == protocol.early(run.launch.spec(node, "10.0.0.1"))
    assert (
        probe.spec(run.inv.job, "10.0.0.1", None, True, warm=run.preflight.early(1))["warm"]["node"]
        == 1
    )


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (  # 2.x: annotated, after `from typing import Optional` (which is never run)
            "from typing import Optional\n__version__ = '2.4.0+cu121'\ndebug = False\n"
            "cuda: Optional[str] = '12.1'\nhip: Optional[str] = None\n",
            {"__version__": "2.4.0+cu121", "cuda": "12.1"},
        ),
        ('__version__ = "1.13.1+cpu"\ncuda = None\n', {"__version__": "1.13.1+cpu", "cuda": None}),
    ],
)
def test_torch_version_file_is_read_not_run(text: str, want: dict[str, str | None]) -> None:
    assert host_probe.version_file(text) == want


def test_a_version_file_without_a_version_is_an_odd_install() -> None:
    with pytest.raises(ValueError):
        host_probe.version_file("import torch\n__version__ = torch.version()\n")
