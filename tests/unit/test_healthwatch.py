"""The run's watch of a host's health (remote/host/healthwatch.py): the stand-in nvidia-smi
(tests/data/nvidia-smi) and kernel log (tests/data/kernel-log) change under it mid-attempt, as a
GPU failing during a run would show."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any

import nvidia_smi
from nvidia_smi import H100_BUSY
from smi_faults import FaultySmi

from ddptui.remote.host import healthwatch

LOGS = Path(__file__).parents[1] / "data" / "kernel-log"


class Host:
    """A GPU host as a run sees it: a machine's recording that can be changed, a kernel log."""

    def __init__(self, tmp_path: Path, machine: str = H100_BUSY) -> None:
        self.data = tmp_path / "machine"
        shutil.copytree(nvidia_smi.DATA / machine, self.data)
        self.kmsg = tmp_path / "kmsg"
        self.kmsg.write_text("")
        self.ib = tmp_path / "ib"
        smi = tmp_path / "bin" / "nvidia-smi"
        smi.parent.mkdir()
        smi.write_text(
            f"#!/bin/sh\ndata={self.data}\n" + (nvidia_smi.DATA / "stand-in.sh").read_text()
        )
        smi.chmod(0o755)
        self.watch = healthwatch.HealthWatch(
            str(smi), str(self.kmsg), None, str(self.ib), timeout=1.0
        )

    def sick(self, recording: str) -> None:
        for f in (nvidia_smi.DATA / "health" / recording).iterdir():
            shutil.copy(f, self.data / f.name)

    def port(self, dev: str, state: str, downed: int) -> None:
        where = self.ib / dev / "ports" / "1"
        (where / "counters").mkdir(parents=True, exist_ok=True)
        (where / "state").write_text(state + "\n")
        (where / "counters" / "link_downed").write_text(f"{downed}\n")


def said(found: list[Any]) -> list[str]:
    return [healthwatch.describe("node1", i) for i in found]


def test_a_healthy_host_says_nothing(tmp_path: Path) -> None:
    host = Host(tmp_path)
    host.watch.begin()
    assert host.watch.poll() == ([], [])


def test_errors_counted_during_the_attempt_fail_it_not_those_before(tmp_path: Path) -> None:
    """ECC counts and Xids there as the attempt began are its norm; what rises acts."""
    host = Host(tmp_path)
    host.sick("ecc")
    host.kmsg.write_text((LOGS / "kmsg.txt").read_text())
    host.watch.begin()
    assert host.watch.poll() == ([], [])
    ecc = (host.data / "health.csv").read_text().replace(", 2, 0,", ", 3, 0,")
    (host.data / "health.csv").write_text(ecc)
    with host.kmsg.open("a") as f:
        f.write("2,1200,99000000,-;NVRM: Xid (PCI:0000:2a:00): 94, pid=1, name=python3, "
                "Contained: SM (0x1). RST: No, D-RST: No\n")  # fmt: skip
    failures, warnings = host.watch.poll()
    assert said(failures) == [
        "GPU 3 (00000000:5D:00.0) on node1: 3 uncorrectable ECC errors",
        "GPU 1 (00000000:2A:00.0) on node1: Xid 94: Contained: SM (0x1). RST: No. D-RST: No",
    ] or said(failures)[0].startswith("GPU 3")
    assert [i["kind"] for i in failures] == ["ecc", "xid 94"]
    assert warnings == []


def test_an_xid_again_fails_and_a_warning_is_told_once(tmp_path: Path) -> None:
    host = Host(tmp_path)
    host.watch.begin()
    host.kmsg.write_text((LOGS / "kmsg.txt").read_text())  # 13 warns, 79 fails, 45 is nothing
    failures, warnings = host.watch.poll()
    assert said(failures) == [
        "GPU 2 (00000000:3A:00.0) on node1: Xid 79: GPU has fallen off the bus."
    ]
    assert [i["kind"] for i in warnings] == ["xid 13"]
    assert host.watch.poll() == ([], [])


def test_a_gpu_that_cannot_be_read_fails_at_every_read(tmp_path: Path) -> None:
    host = Host(tmp_path)
    host.sick("lost")
    host.watch.begin()  # lost already: not the norm
    failures, _ = host.watch.poll()
    assert said(failures) == [
        "GPU 3 (00000000:5D:00.0) on node1: cannot be read: nvidia-smi answers ERR!",
        "GPU 6 (00000000:BA:00.0) on node1: cannot be read: nvidia-smi answers [GPU is lost]",
    ]
    assert len(host.watch.poll()[0]) == 2


def test_a_hung_nvidia_smi_fails(tmp_path: Path) -> None:
    host = Host(tmp_path)
    host.watch.begin()
    (host.data / "hang").write_text("")
    failures, _ = host.watch.poll()
    assert said(failures) == ["node1: GPUs cannot be read: nvidia-smi did not answer in 1 s"]


def test_slowdown_is_a_warning(tmp_path: Path) -> None:
    host = Host(tmp_path)
    host.watch.begin()
    host.sick("slowdown")
    failures, warnings = host.watch.poll()
    assert failures == [] and [i["gpu"] for i in warnings] == [5]


def test_an_infiniband_port_leaving_active_or_flapping_fails(tmp_path: Path) -> None:
    host = Host(tmp_path)
    host.port("mlx5_0", "4: ACTIVE", 0)
    host.port("mlx5_1", "4: ACTIVE", 2)
    host.port("mlx5_2", "1: DOWN", 0)  # down before the attempt: left alone
    host.watch.begin()
    assert host.watch.poll() == ([], [])
    host.port("mlx5_0", "1: DOWN", 1)
    host.port("mlx5_1", "4: ACTIVE", 3)
    failures, _ = host.watch.poll()
    assert said(failures) == [
        "node1: mlx5_0 port 1 left ACTIVE: 1: DOWN",
        "node1: mlx5_0 port 1: link_downed rose from 0 to 1",
        "node1: mlx5_1 port 1: link_downed rose from 2 to 3",
    ]


def test_a_host_with_nothing_to_watch(tmp_path: Path) -> None:
    assert not healthwatch.worth_watching(None, str(tmp_path / "no-ib"))
    assert healthwatch.worth_watching("/usr/bin/nvidia-smi", str(tmp_path / "no-ib"))


def test_the_journal_is_read_from_the_attempts_start(tmp_path: Path) -> None:
    """journalctl is asked `--since @START`, not for the whole boot every 4 s: an old Xid of the
    boot is never read again, one logged since is, and no line since is no reason to read
    /dev/kmsg instead (its counts would come and go)."""
    host = Host(tmp_path)
    boot, since = tmp_path / "boot.txt", tmp_path / "since.txt"
    boot.write_text("kernel: NVRM: Xid (PCI:0000:3a:00): 79, pid=1, GPU has fallen off the bus.\n")
    since.write_text("")  # nothing new is an answer: /dev/kmsg (with its Xids) is not read
    host.kmsg.write_text((LOGS / "kmsg.txt").read_text())
    journalctl = tmp_path / "bin" / "journalctl"
    journalctl.write_text(
        f'#!/bin/sh\ncase "$*" in *"--since @"*) cat {since} ;; *) cat {boot} ;; esac\n'
    )
    journalctl.chmod(0o755)
    smi, kmsg, _, ib, timeout = host.watch.args
    watch = healthwatch.HealthWatch(smi, kmsg, str(journalctl), ib, timeout)
    watch.begin()
    assert watch.poll() == ([], [])
    with since.open("a") as f:  # the boot's Xid again, on the same GPU, and another
        f.write("kernel: NVRM: Xid (PCI:0000:3a:00): 79, pid=2, GPU has fallen off the bus.\n")
        f.write("kernel: NVRM: Xid (PCI:0000:2a:00): 48, pid=1, DBE (double bit error).\n")
    assert said(watch.poll()[0]) == [
        "GPU 2 (00000000:3A:00.0) on node1: Xid 79: GPU has fallen off the bus.",
        "GPU 1 (00000000:2A:00.0) on node1: Xid 48: DBE (double bit error).",
    ]


# -- a read that went wrong once is not a failed GPU (issue 42) ------------------------------


def faulty(tmp_path: Path, fault: str) -> tuple[healthwatch.HealthWatch, FaultySmi]:
    smi = FaultySmi(tmp_path / "bin", H100_BUSY, fault)
    watch = healthwatch.HealthWatch(
        str(smi.path), str(tmp_path / "kmsg"), None, str(tmp_path / "ib")
    )
    (tmp_path / "kmsg").write_text("")
    watch.begin()
    smi.arm()
    return watch, smi


def test_a_read_killed_from_outside_is_read_again(tmp_path: Path) -> None:
    """SIGTERM to the watch's nvidia-smi (it sends none: its own bound kills with SIGKILL) is
    not the GPUs' doing: read again at once, and the GPUs answer."""
    watch, smi = faulty(tmp_path, "killed")

    def kill_it() -> None:
        deadline = time.monotonic() + 10
        while not smi.pid.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(int(smi.pid.read_text()), signal.SIGTERM)

    killer = threading.Thread(target=kill_it)
    killer.start()
    assert watch.poll() == ([], [])
    killer.join()
    assert not smi.armed.exists()  # the read that went wrong was the watch's


def test_a_short_row_once_is_read_again(tmp_path: Path) -> None:
    watch, smi = faulty(tmp_path, "short")
    assert watch.poll() == ([], [])
    assert not smi.armed.exists()


def test_a_journal_that_fails_once_is_not_replaced_by_the_ring_buffer(tmp_path: Path) -> None:
    """The attempt began with the journal: its Xids since the boot were never the reference.
    A journal read that fails (killed, past its time) is no reason to read /dev/kmsg, whose
    old Xid 79 would read as new."""
    host = Host(tmp_path)
    host.kmsg.write_text((LOGS / "kmsg.txt").read_text())  # an Xid 79 from before the attempt
    journalctl = tmp_path / "bin" / "journalctl"
    journalctl.write_text(f"#!/bin/sh\n[ -f {tmp_path}/down ] && exit 1\necho kernel: ok\n")
    journalctl.chmod(0o755)
    smi, kmsg, _, ib, timeout = host.watch.args
    watch = healthwatch.HealthWatch(smi, kmsg, str(journalctl), ib, timeout)
    watch.begin()
    (tmp_path / "down").write_text("")
    assert watch.poll() == ([], [])
