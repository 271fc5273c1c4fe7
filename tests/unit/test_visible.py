"""`nproc_per_node: auto` counts what the job will see: CUDA_VISIBLE_DEVICES (the host's, or the
inventory's env, which wins) and MIG devices, read as CUDA reads them (remote/checks/visible.py).
The MIG machine is written from nvidia-smi's documented format, not captured on a GPU."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import nvidia_smi
import pytest
from nvidia_smi import A100, A100_MIG, DRIVER_ERROR, H100_BUSY
from probetools import levels, local_inventory, preflight, run_probe, with_agent, with_gpus

from ddptui.remote.agents.fleet import Fleet
from ddptui.remote.checks import probe, visible
from ddptui.remote.checks.preflight import Preflight
from ddptui.remote.inventory import Inventory
from ddptui.tui.headless.check import print_table


def gpus_of(machine: str) -> list[visible.Gpu]:
    return visible.parse_list((nvidia_smi.DATA / machine / "list.txt").read_text())


H100S, MIG = gpus_of(H100_BUSY), gpus_of(A100_MIG)
MIG0 = "MIG-7e0c8f5b-ae2d-5b5e-9a0c-5e6c1c1a2f3b"


def test_the_list_holds_every_gpu_and_its_mig_devices() -> None:
    assert [(g.index, g.uuid[:13], g.migs) for g in H100S[:2]] == [
        (0, "GPU-6513270e-", ()),
        (1, "GPU-d23f0824-", ()),
    ]
    assert len(H100S) == 8
    assert [len(g.migs) for g in MIG] == [3, 0] and MIG[0].migs[0] == MIG0
    assert visible.devices(MIG) == [*MIG[0].migs, MIG[1].uuid]


@pytest.mark.parametrize(
    ("value", "count", "message"),
    [
        (None, 8, None),
        ("0,1", 2, "2 of 8 GPUs visible (CUDA_VISIBLE_DEVICES=0,1)"),
        ("7, 3", 2, "2 of 8 GPUs visible (CUDA_VISIBLE_DEVICES=7, 3)"),
        ("", 0, "no GPU visible (CUDA_VISIBLE_DEVICES is empty)"),
        (
            "GPU-6513270e,GPU-d23f",
            2,
            "2 of 8 GPUs visible (CUDA_VISIBLE_DEVICES=GPU-6513270e,GPU-d23f)",
        ),
    ],
)
def test_what_cuda_visible_devices_leaves(value: str | None, count: int, message: str) -> None:
    seen = visible.visible(H100S, value)
    assert (seen.count, seen.message, seen.dropped) == (count, message, False)


@pytest.mark.parametrize(
    ("value", "count", "why"),
    [
        ("0,9,1", 1, "CUDA ignores '9' and what follows: no such device here"),
        ("-1", 0, "CUDA ignores '-1' and what follows"),
        ("0,GPU-6513270e", 1, "CUDA ignores 'GPU-6513270e'"),  # one kind per list
        ("GPU-", 0, "CUDA ignores 'GPU-'"),  # a prefix of every UUID names none
        ("1,1", 0, "a device named twice leaves none"),
    ],
)
def test_entries_cuda_drops(value: str, count: int, why: str) -> None:
    seen = visible.visible(H100S, value)
    assert seen.count == count and seen.dropped
    assert seen.message is not None and why in seen.message


def test_a_process_sees_one_mig_device_and_then_no_whole_gpu() -> None:
    seen = visible.visible(MIG, None)
    assert seen.count == 1
    assert seen.message == (
        f"1 of 4 GPUs and MIG devices visible (a CUDA process sees one MIG device, {MIG0})"
    )
    assert visible.visible(MIG, "MIG-b2d94c61").count == 1
    whole = visible.visible(MIG, "GPU-c84a0d93")  # the GPU not in MIG mode
    assert whole.count == 1 and "one MIG device" not in (whole.message or "")
    assert visible.visible(MIG, "3").message == "1 of 4 GPUs and MIG devices visible " + (
        "(CUDA_VISIBLE_DEVICES=3)"
    )


# -- through the probe ----------------------------------------------------------------------


def test_the_hosts_variable_limits_auto(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with_gpus(monkeypatch, tmp_path, H100_BUSY)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    inv = local_inventory(tmp_path, job="  nproc_per_node: auto\n")
    checked = run_probe(inv)
    assert checked.facts["gpu_count"] == 8 and checked.facts["visible_gpus"] == 2
    assert levels(checked)["gpu-visible"] == "ok"
    assert preflight(inv)[0].nprocs() == [2, 2]


def test_the_inventorys_env_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with_gpus(monkeypatch, tmp_path, H100_BUSY)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    inv = local_inventory(
        tmp_path, host="  env: {CUDA_VISIBLE_DEVICES: '4,5,6'}\n", job="  nproc_per_node: auto\n"
    )
    checked = run_probe(inv)
    assert checked.facts["visible_gpus"] == 3
    assert checked.facts["visible_note"] == (
        "3 of 8 GPUs visible (CUDA_VISIBLE_DEVICES=4,5,6 in the inventory's env)"
    )


def test_no_gpu_left_is_a_warning(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with_gpus(monkeypatch, tmp_path, A100)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    checked = run_probe(local_inventory(tmp_path))
    assert levels(checked)["gpu-visible"] == "warning"


def test_mig_through_the_probe_and_the_table(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with_gpus(monkeypatch, tmp_path, A100_MIG)
    inv = local_inventory(tmp_path, job="  nproc_per_node: auto\n")
    pre, done = preflight(inv)
    assert pre.nprocs() == [1, 1]
    checked = run_probe(inv)
    assert checked.facts["gpu_count"] == 2 and checked.facts["visible_gpus"] == 1
    print_table([checked], done, out := io.StringIO())
    assert "2× NVIDIA A100-SXM4-40GB (1 visible)" in out.getvalue()  # noqa: RUF001
    # both local nodes see the same: one line for both
    assert "ok node[0-1] gpu-visible: 1 of 4 GPUs and MIG devices visible" in out.getvalue()


# -- auto without the checks -------------------------------------------------------------------


def count(inv: Inventory) -> int | None:
    return asyncio.run(with_agent(inv, 0, lambda a: probe.count_visible(a, inv.job)))


def test_count_without_the_checks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    inv = local_inventory(tmp_path)
    assert count(inv) is None  # no nvidia-smi
    with_gpus(monkeypatch, tmp_path, H100_BUSY)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert count(inv) == 6  # GPUs 2 and 5 run other work (busy_gpus: refuse)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert count(inv) == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    assert count(inv) == 1  # busy: none free, so the one it sees (its launch is refused)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert count(inv) == 0


def test_count_with_a_broken_driver(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with_gpus(monkeypatch, tmp_path, DRIVER_ERROR)
    assert count(local_inventory(tmp_path)) is None


def test_auto_with_skip_checks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with_gpus(monkeypatch, tmp_path, H100_BUSY)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    inv = local_inventory(tmp_path, job="  nproc_per_node: auto\n")

    async def counted() -> list[int]:
        fleet = Fleet(inv.hosts)
        pre = Preflight(inv, fleet, lambda e: None, checks=False)
        try:
            assert await pre.run()
            return pre.nprocs()
        finally:
            await fleet.close()

    assert asyncio.run(counted()) == [2, 2]  # GPU 2 runs other work: not one it may take
