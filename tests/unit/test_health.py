"""GPU and network health (remote/host/health.py) read from nvidia-smi stand-ins answering as
the recorded machines would (tests/data/nvidia-smi, sick ones under health/), stood-in kernel
logs (tests/data/kernel-log) and an InfiniBand sysfs tree, then judged by the checks."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import nvidia_smi
import pytest
from nvidia_smi import A100, DRIVER_ERROR, H100_BUSY, H200
from smi_faults import FaultySmi

from ddptui.remote.checks import judge as checks
from ddptui.remote.checks import probe
from ddptui.remote.host import health

LOGS = Path(__file__).parents[1] / "data" / "kernel-log"


def read(tmp_path: Path, machine: str | None, kmsg: Path | None = None, **kw: Any) -> Any:
    """health.read with `machine`'s stand-in, no journalctl, kmsg (none: unreadable)."""
    smi = str(nvidia_smi.install(tmp_path / "bin", machine)) if machine else None
    where = str(kmsg or tmp_path / "no-kmsg")
    return health.read(smi, kmsg=where, journalctl=None, ib_root=str(tmp_path / "ib"), **kw)


def issues(found: dict[str, Any]) -> list[tuple[str, int | None, str | None, str]]:
    return [(i["level"], i["gpu"], i["bus_id"], i["what"]) for i in found["issues"]]


@pytest.mark.parametrize("machine", [H100_BUSY, A100, H200])
def test_recorded_machines_are_healthy(tmp_path: Path, machine: str) -> None:
    """A100 (driver 535) answers only the old clocks_throttle_reasons names: asked next."""
    found = read(tmp_path, machine)
    assert found["issues"] == [] and found["gpus"] in (8, 4, 1)


def test_an_uncorrectable_ecc_error_fails_its_gpu(tmp_path: Path) -> None:
    assert issues(read(tmp_path, "health/ecc")) == [
        ("failure", 3, "00000000:5D:00.0", "2 uncorrectable ECC errors"),
        ("warning", 6, "00000000:BA:00.0", "12 correctable ECC errors"),
    ]


def test_a_failed_row_remap_fails_its_gpu(tmp_path: Path) -> None:
    assert issues(read(tmp_path, "health/remap-failed")) == [
        ("failure", 1, "00000000:0F:00.0", "row remapping failed"),
        ("failure", 1, "00000000:0F:00.0", "remapped rows pending (the GPU needs a reset)"),
    ]


def test_hardware_slowdown_is_a_warning(tmp_path: Path) -> None:
    assert issues(read(tmp_path, "health/slowdown")) == [
        (
            "warning",
            5,
            "00000000:AB:00.0",
            "clocks held down: hardware slowdown, power brake slowdown",
        )
    ]


def test_a_gpu_answering_err_or_lost_fails(tmp_path: Path) -> None:
    assert issues(read(tmp_path, "health/lost")) == [
        ("failure", 3, "00000000:5D:00.0", "cannot be read: nvidia-smi answers ERR!"),
        ("failure", 6, "00000000:BA:00.0", "cannot be read: nvidia-smi answers [GPU is lost]"),
    ]


def test_a_hanging_nvidia_smi_fails_closed_in_time(tmp_path: Path) -> None:
    began = time.monotonic()
    found = read(tmp_path, "health/hang", timeout=0.5)
    assert time.monotonic() - began < 5  # killed with what it started, not waited for
    assert found["gpus"] is None
    assert issues(found) == [
        ("failure", None, None, "GPUs cannot be read: nvidia-smi did not answer in 0.5 s")
    ]


def test_a_failing_nvidia_smi_fails_closed(tmp_path: Path) -> None:
    [(level, gpu, bus, what)] = issues(read(tmp_path, DRIVER_ERROR))
    assert (level, gpu, bus) == ("failure", None, None)
    assert what.startswith("GPUs cannot be read: nvidia-smi failed (exit 9): NVIDIA-SMI has failed")
    [(level, gpu, bus, what)] = issues(read(tmp_path, "health/off-the-bus"))
    assert (level, gpu, bus) == ("failure", None, "0000:3A:00.0")  # named by nvidia-smi itself
    assert "exit 15" in what


@pytest.mark.parametrize("log", ["kmsg.txt", "xid-journal.txt"])
def test_xids_from_the_kernel_log(tmp_path: Path, log: str) -> None:
    """Xid 79 fails GPU 2 (its bus id matched to nvidia-smi's), 13 warns, 45 (cleanup) is
    nothing; /dev/kmsg's record heads and KEY=value lines are read past."""
    found = read(tmp_path, H100_BUSY, LOGS / log)
    assert found["kernel_log"] == str(LOGS / log)
    assert issues(found) == [
        ("warning", 0, "00000000:18:00.0",
         "Xid 13: Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address"),
        ("failure", 2, "00000000:3A:00.0", "Xid 79: GPU has fallen off the bus."),
    ]  # fmt: skip


def test_journalctl_comes_first_and_an_unreadable_log_is_said(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    nvidia_smi.install(bin_dir, H100_BUSY)
    journalctl = bin_dir / "journalctl"
    journalctl.write_text(f"#!/bin/sh\ncat {LOGS / 'xid-journal.txt'}\n")
    journalctl.chmod(0o755)
    where, lines, why = health.kernel_log(str(tmp_path / "none"), str(journalctl))
    assert (where, why) == ("journalctl -k", None) and len(lines) == 3
    journalctl.write_text("#!/bin/sh\necho 'No journal files were opened: Permission denied' >&2\n")
    where, lines, why = health.kernel_log(str(tmp_path / "none"), str(journalctl))
    assert where is None and lines == []
    assert why == (
        "journalctl -k: No journal files were opened: Permission denied; "
        f"{tmp_path / 'none'}: No such file or directory"
    )


def test_infiniband_ports(tmp_path: Path) -> None:
    for dev, port, state, downed in [
        ("mlx5_0", "1", "4: ACTIVE", "0"),
        ("mlx5_1", "1", "1: DOWN", "0"),
        ("mlx5_2", "1", "4: ACTIVE", "3"),
    ]:
        where = tmp_path / "ib" / dev / "ports" / port
        (where / "counters").mkdir(parents=True)
        (where / "state").write_text(state + "\n")
        (where / "counters" / "link_downed").write_text(downed + "\n")
    found = read(tmp_path, None)
    assert found["gpus"] is None and found["kernel_log"] is None  # no GPU: no Xid looked for
    assert [p["state"] for p in found["ib"]] == ["4: ACTIVE", "1: DOWN", "4: ACTIVE"]
    assert issues(found) == [
        ("warning", None, None, "mlx5_1 port 1 is 1: DOWN"),
        ("warning", None, None, "mlx5_2 port 1: link_downed 3"),
    ]


# -- what `check` says -----------------------------------------------------------------------------


def findings(found: dict[str, Any], nvidia_smi: str = "ok") -> list[tuple[str, str, str]]:
    facts = {"health": probe._health(found), "nvidia_smi": nvidia_smi}
    add: list[tuple[str, str, str]] = []
    checks._health(lambda level, check, text: add.append((level, check, text)), facts)
    return add


def test_check_names_the_gpu_its_bus_and_the_xid(tmp_path: Path) -> None:
    found = read(tmp_path, "health/ecc", LOGS / "kmsg.txt")
    assert findings(found) == [
        ("failure", "gpu-health", "GPU 3 (00000000:5D:00.0): 2 uncorrectable ECC errors"),
        ("warning", "gpu-health", "GPU 6 (00000000:BA:00.0): 12 correctable ECC errors"),
        ("warning", "gpu-health", "GPU 0 (00000000:18:00.0): Xid 13: Graphics SM Warp Exception on "
         "(GPC 0, TPC 1, SM 0): Out Of Range Address"),
        ("failure", "gpu-health", "GPU 2 (00000000:3A:00.0): Xid 79: GPU has fallen off the bus."),
    ]  # fmt: skip


def test_check_of_a_healthy_host_says_what_was_read(tmp_path: Path) -> None:
    assert findings(read(tmp_path, A100)) == [
        ("ok", "gpu-health", "no ECC error, row remap or slowdown on 4 GPUs; Xids not read "
         f"({tmp_path / 'no-kmsg'}: No such file or directory)"),
    ]  # fmt: skip


def test_a_driver_error_fails_once(tmp_path: Path) -> None:
    """nvidia-smi's failure is the `gpu` check's already: not said twice."""
    assert findings(read(tmp_path, DRIVER_ERROR), nvidia_smi="error") == []


# -- a failed read is confirmed before it fails a GPU (issue 42) -------------------------------


def faulty_read(tmp_path: Path, fault: str, times: int) -> tuple[dict[str, Any], FaultySmi]:
    """health.read with the H100 recording, its first `times` health reads going wrong."""
    smi = FaultySmi(tmp_path / "bin", H100_BUSY, fault)
    smi.arm(times)
    found = health.read(str(smi.path), kmsg=str(tmp_path / "no-kmsg"), journalctl=None,
                        ib_root=str(tmp_path / "ib"))  # fmt: skip
    return found, smi


@pytest.mark.parametrize("fault", ["short", "failed"])
def test_a_read_gone_wrong_once_is_read_again_and_passes(tmp_path: Path, fault: str) -> None:
    found, smi = faulty_read(tmp_path, fault, 1)
    assert (found["issues"], found["gpus"], smi.asked()) == ([], 8, 2)


def test_a_short_row_twice_in_a_row_fails_with_both_reads_as_evidence(tmp_path: Path) -> None:
    found, smi = faulty_read(tmp_path, "short", 2)
    assert smi.asked() == 2
    [issue] = found["issues"]
    assert (issue["level"], issue["gpu"], issue["what"]) == (
        "failure", 0, "cannot be read: nvidia-smi answers a short row")  # fmt: skip
    assert issue["evidence"] == [
        f"nvidia-smi read {n}: exit 0; stdout '0, 00000000:18:00.0, 0\\n'; stderr ''"
        for n in (1, 2)
    ]


def test_a_failing_read_twice_in_a_row_fails_naming_its_gpu(tmp_path: Path) -> None:
    found, smi = faulty_read(tmp_path, "failed", 2)
    [issue] = found["issues"]
    assert issue["what"] == (
        "GPUs cannot be read: nvidia-smi failed (exit 15): Unable to determine the device "
        "handle for GPU0000:3A:00.0: Unknown Error"
    )
    assert issue["bus_id"] == "0000:3A:00.0" and smi.asked() == 2
    assert [e.split(";")[0] for e in issue["evidence"]] == [
        "nvidia-smi read 1: exit 15", "nvidia-smi read 2: exit 15"]  # fmt: skip


def test_a_gpus_own_word_fails_at_once_with_its_row(tmp_path: Path) -> None:
    """`ERR!` is the GPU's answer, not a read gone wrong: no second read."""
    smi = FaultySmi(tmp_path / "bin", str(nvidia_smi.DATA / "health" / "lost"))
    found = health.read(str(smi.path), kmsg=str(tmp_path / "no-kmsg"), journalctl=None,
                        ib_root=str(tmp_path / "ib"))  # fmt: skip
    assert smi.asked() == 1
    err = found["issues"][0]
    assert err["what"] == "cannot be read: nvidia-smi answers ERR!"
    [evidence] = err["evidence"]
    assert evidence.startswith("nvidia-smi read 1: exit 0; stderr ''; row '3, 00000000:5D:00.0, ")


def test_a_hang_fails_at_once_within_its_bound(tmp_path: Path) -> None:
    found = read(tmp_path, "health/hang", timeout=0.5)
    [issue] = found["issues"]
    assert issue["evidence"] == ["nvidia-smi read 1: no answer in 0.5 s (killed); stdout ''; "
                                 "stderr ''"]  # fmt: skip


def test_an_xid_carries_the_kernels_line(tmp_path: Path) -> None:
    found = read(tmp_path, H100_BUSY, LOGS / "kmsg.txt")
    [xid79] = [i for i in found["issues"] if i["kind"] == "xid 79"]
    [line] = xid79["evidence"]
    assert line.startswith("kernel log 'NVRM: Xid (PCI:0000:3a:00): 79, ")
