"""Judging a host's container facts (remote/host/container.py's check()) into findings."""

from __future__ import annotations

from typing import Any

import pytest

from ddptui.remote.checks import container as container_checks
from ddptui.remote.checks import judge as checks
from ddptui.remote.events import Finding, HostChecked

IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"
ID = "sha256:" + "ab12" * 16
HOOK = "/usr/bin/nvidia-container-runtime-hook"


def facts(**over: Any) -> dict[str, Any]:
    """check()'s answer on a healthy GPU host."""
    out: dict[str, Any] = {
        "runtime": "docker", "image": IMAGE, "ipc": "host",
        "runtime_path": "/usr/bin/docker", "runtime_version": "26.1.4",
        "image_id": ID, "gpu": {"via": "gpus", "ok": True, "detail": HOOK},
        "leftovers": [],
        "dry_run": {"python": "3.10.12", "uid": 1000, "shm_bytes": 64 << 20, "torch": "2.4.0a0",
                    "cuda": "12.4", "gpus": 8, "nccl": "2.21.5", "seconds": 2.5},
    }  # fmt: skip
    out.update(over)
    return out


def judged(**over: Any) -> dict[str, tuple[str, str]]:
    return {
        f.check: (f.level, f.message) for f in container_checks.findings("gpu-a", facts(**over))
    }


def test_a_healthy_host() -> None:
    found = container_checks.findings("gpu-a", facts())
    assert {f.host for f in found} == {"gpu-a"}
    assert [(f.level, f.check, f.message) for f in found] == [
        ("ok", "container", "docker 26.1.4 (/usr/bin/docker)"),
        ("ok", "image", f"{IMAGE} (sha256:ab12ab12ab12)"),
        ("ok", "container-gpu", f"GPUs through gpus: {HOOK}"),
        ("ok", "container-torch", "in the image: python 3.10.12, torch 2.4.0a0, CUDA 12.4, "
         "NCCL 2.21.5; started and answered in 2.5 s"),
    ]  # fmt: skip


def test_a_missing_image_fails_naming_host_and_image() -> None:
    why = f"image {IMAGE} not on this host (pull: never)"
    found = container_checks.findings("gpu-b", facts(image_error=why, dry_run=None))
    assert Finding("failure", "image", why, "gpu-b") in found


def test_no_runtime_stops_there() -> None:
    found = judged(runtime_error="permission denied while trying to connect to the Docker daemon")
    assert found == {
        "container": ("failure", "docker: permission denied while trying to connect to the "
                      "Docker daemon"),
    }  # fmt: skip


def test_gpu_plumbing_missing_says_what_to_install() -> None:
    gpu = {"via": "env", "ok": False, "detail": "no CDI spec or hook"}
    level, message = judged(runtime="podman", gpu=gpu)["container-gpu"]
    assert level == "failure" and "nvidia-ctk cdi generate" in message


def test_a_container_whose_torch_sees_no_gpu() -> None:
    run = {**facts()["dry_run"], "gpus": 0}
    assert judged(dry_run=run)["container-gpu"] == ("failure", "torch in the container sees no GPU")


def test_small_shm_with_private_ipc_warns() -> None:
    level, message = judged(ipc="private")["shm"]
    assert level == "warning" and "64 MiB" in message and "shm_size" in message
    run = {**facts()["dry_run"], "shm_bytes": 16 << 30}
    assert judged(ipc="private", dry_run=run)["shm"] == (
        "ok",
        "/dev/shm in the container is 16384 MiB",
    )
    assert "shm" not in judged()  # ipc: host: the host's own /dev/shm


def test_leftovers_of_this_node_fail_and_of_other_runs_warn() -> None:
    """Another node of this run may share the runtime (two nodes on one machine): its
    containers, the dry run's too, are not in the way; this node's own name is."""
    names = ["ddptui-r1-n0", "ddptui-r0-n0", "ddptui-r1-n1", "ddptui-r1-n1-check"]
    found = container_checks.findings("a", facts(leftovers=names, node=0), run_id="r1")
    assert [(f.level, f.check) for f in found if f.check == "leftovers"] == [
        ("failure", "leftovers"), ("warning", "leftovers"),
    ]  # fmt: skip
    [failed, warned] = [f for f in found if f.check == "leftovers"]
    assert "ddptui-r1-n0" in failed.message and "ddptui-r1-n1" not in failed.message
    assert "ddptui-r0-n0" in warned.message and "ddptui-r1" not in warned.message


@pytest.mark.parametrize(
    ("over", "words"),
    [
        ({"dry_run": None, "dry_run_error": "the container did not start: ..."}, "did not start"),
        ({"dry_run": {"python": "3.11.2", "torch_error": "ModuleNotFoundError: torch"}}, "torch"),
    ],
)
def test_a_dry_run_that_fails(over: dict[str, Any], words: str) -> None:
    failures = [f for f in container_checks.findings("a", facts(**over)) if f.level == "failure"]
    assert len(failures) == 1 and words in failures[0].message


def host(k: int, image_id: str | None) -> HostChecked:
    return HostChecked(f"n{k}", k, {"container": facts(image_id=image_id)})


def test_image_ids_that_differ_across_hosts_warn_like_code_drift() -> None:
    other = "sha256:" + "cd34" * 16
    found = {f.check: f for f in checks.across([host(0, ID), host(1, ID), host(2, other)])}
    assert found["same-image"] == Finding(
        "warning",
        "same-image",
        f"container image differs across hosts: {IMAGE} sha256:ab12ab12ab12 on n0, n1; "
        f"{IMAGE} sha256:cd34cd34cd34 on n2 (a tag pulled at different times; pin a digest, "
        "image@sha256:...)",
    )
    same = {f.check: f for f in checks.across([host(0, ID), host(1, ID)])}
    assert same["same-image"].level == "ok"
    assert "same-image" not in {f.check for f in checks.across([host(0, None), host(1, None)])}


def test_checks_judge_the_container_facts_of_a_host() -> None:
    found = checks.host_findings("n0", {"probe_error": None, "container": facts()}, ())
    assert "container-torch" in {f.check for f in found}
