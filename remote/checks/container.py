"""A job in a container, launcher side: the host's container facts judged into findings. Pure.

The probe puts them under facts["container"]; remote/checks/judge.py calls `findings` for each host
and compares `image_key` across hosts, as it does the job's code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddptui.remote.checks.finding import Add, collect
from ddptui.remote.events import Finding

SHM_LOW = 1 << 30  # NCCL's shared-memory transport in a 64 MiB /dev/shm: "Bus error"
GPU_HELP = {
    "gpus": "install the NVIDIA Container Toolkit",
    "cdi": "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml",
    "env": "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml (or the toolkit's OCI hook)",
    "hook": "install enroot's nvidia hook and libnvidia-container",
    "nv": "apptainer --nv needs the driver's nvidia-smi and libraries on the host",
}
SHORT = 12  # hex digits of an image id shown


def findings(host: str, facts: Mapping[str, Any], run_id: str | None = None) -> list[Finding]:
    """judge()'s findings for one host."""
    found, add = collect(host)
    judge(add, facts, run_id)
    return found


def judge(add: Add, facts: Mapping[str, Any], run_id: str | None = None) -> None:
    """Everything one host says about running the job in its container. run_id: this run's
    (a container already named for it would make `run` fail)."""
    runtime, image = facts.get("runtime"), facts.get("image")
    if facts.get("runtime_error"):
        add("failure", "container", f"{runtime}: {facts['runtime_error']}")
        return
    add(
        "ok", "container", f"{runtime} {facts.get('runtime_version')} ({facts.get('runtime_path')})"
    )
    if facts.get("image_error"):
        add("failure", "image", facts["image_error"])
    else:
        pulled = f", pulled in {facts['pulled_s']:g} s" if facts.get("pulled_s") else ""
        add("ok", "image", f"{image} ({short_id(facts.get('image_id')) or 'no id'}{pulled})")
    _gpu(add, facts.get("gpu"))
    _leftovers(add, facts.get("leftovers") or [], run_id, facts.get("node"))
    _dry_run(add, facts)


def _gpu(add: Add, gpu: Mapping[str, Any] | None) -> None:
    if gpu is None:  # no GPU here, or gpus: none
        return
    if gpu.get("ok"):
        add("ok", "container-gpu", f"GPUs through {gpu['via']}: {gpu.get('detail')}")
    else:
        via = gpu.get("via") or ""
        help = GPU_HELP.get(via, "")
        add("failure", "container-gpu", f"the GPUs cannot reach the container: {gpu.get('detail')}"
            + (f" ({help})" if help else ""))  # fmt: skip


def _leftovers(add: Add, names: list[str], run_id: str | None, node: int | None) -> None:
    """The node's own name taken already fails its `run`; other nodes of this run may share
    the runtime (several nodes on one machine); other runs' containers are worth a word."""
    ours = [n for n in names if run_id and n == f"ddptui-{run_id}-n{node}"]
    others = [n for n in names if not (run_id and n.startswith(f"ddptui-{run_id}-"))]
    if ours:
        add("failure", "leftovers", f"containers of this run exist already: {', '.join(ours)}")
    if others:
        add("warning", "leftovers", f"{len(others)} ddptui container(s) of other runs here "
            f"(left behind, or a run still going): {', '.join(others[:8])}")  # fmt: skip


def _dry_run(add: Add, facts: Mapping[str, Any]) -> None:
    if facts.get("dry_run_error"):
        add(
            "failure",
            "container-run",
            f"a dry run of the container failed: {facts['dry_run_error']}",
        )
        return
    run = facts.get("dry_run")
    if not run:
        return
    took = f"started and answered in {run['seconds']:g} s" if "seconds" in run else ""
    if run.get("torch_error") or not run.get("torch"):
        why = run.get("torch_error") or "torch is not installed"
        add("failure", "container-torch", f"in the image, python {run.get('python')}: {why}")
    else:
        cuda = f", CUDA {run['cuda']}" if run.get("cuda") else " (CPU build)"
        nccl = f", NCCL {run['nccl']}" if run.get("nccl") else ""
        add("ok", "container-torch", f"in the image: python {run.get('python')}, torch "
            f"{run['torch']}{cuda}{nccl}; {took}")  # fmt: skip
        gpu = facts.get("gpu") or {}
        if gpu.get("ok") and run.get("cuda") and not run.get("gpus"):
            add("failure", "container-gpu", "torch in the container sees no GPU")
    shm = run.get("shm_bytes")
    if facts.get("ipc") == "private" and shm is not None:
        size = f"{shm / (1 << 20):.0f} MiB"
        if shm < SHM_LOW:
            add("warning", "shm", f"/dev/shm in the container is {size} (ipc: private): NCCL "
                "needs more (Bus error); set shm_size: 16g, or ipc: host")  # fmt: skip
        else:
            add("ok", "shm", f"/dev/shm in the container is {size}")


def image_key(facts: Mapping[str, Any]) -> str | None:
    """What hosts must agree on: the image and its id (None where not in a container)."""
    container = facts.get("container") or {}
    if not container.get("image_id"):
        return None
    return f"{container.get('image')} {short_id(container['image_id'])}"


def short_id(image_id: str | None) -> str | None:
    if not image_id:
        return None
    algo, _, digest = image_id.rpartition(":")
    return f"{algo or 'sha256'}:{digest[:SHORT]}"
