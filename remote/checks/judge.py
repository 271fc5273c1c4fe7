"""Judging the probe's facts: each host on its own, then the hosts against each other. Pure.

A failure blocks a launch (the job would not start, or would hang); a warning does not (a busy
GPU, a torch that differs between hosts: worth knowing, sometimes intended). The facts are the
dict remote/checks/probe.py builds; the `check` ids are what front-ends group and filter by.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ddptui.remote.checks import checkpoint, container
from ddptui.remote.checks.finding import Add, collect
from ddptui.remote.events import ChecksDone, Finding, Gpu, HostChecked
from ddptui.remote.inventory import Inventory
from ddptui.remote.stalls.stacks import PTRACE_NEEDED

BUSY_MIB = 1024  # memory in use with no process in sight: a job of another container or user
LOW_DISK_GIB = 5.0


def host_findings(name: str, facts: Mapping[str, Any], gpus: Sequence[Gpu]) -> tuple[Finding, ...]:
    """Everything one host's probe says, worded for the person about to launch."""
    found, add = collect(name)
    if not facts.get("reachable", True):
        add("failure", "ssh", facts.get("error") or "unreachable")
        return tuple(found)
    took = facts.get("connect_s")
    add("ok", "ssh", "connected" if took is None else f"connected in {took:.2f} s")
    for text in facts.get("ssh_notices") or ():
        add("warning", "ssh", text)
    if facts.get("probe_error"):
        check = "python" if facts.get("probe_exit") == 127 else "probe"
        if check == "probe" and facts.get("agent_started") is False:
            check = "start"  # logged in, but the login shell or python did not get going
        add("failure", check, facts["probe_error"])
        return tuple(found)
    _software(add, facts, gpus)
    _gpus(add, facts, gpus)
    _health(add, facts)
    _workdir(add, facts)
    _network(add, facts)
    _stacks(add, facts)
    checkpoint.judge(add, facts)
    if facts.get("container"):  # the job runs in a container (remote/host/container.py)
        container.judge(add, facts["container"], facts.get("run_id"))
    if facts.get("git_error"):
        why = f"git in {facts.get('workdir')}: {facts['git_error']}"
        add("warning", "code", f"{why}; the code's fingerprint is the script's hash alone")
    return tuple(found)


def _software(add: Add, f: Mapping[str, Any], gpus: Sequence[Gpu]) -> None:
    if f.get("python") is None:
        path, tried = f.get("python_path"), f.get("python_tried")
        where = f"{path} ({tried})" if tried and tried != path else path
        add("failure", "python", f"no python at {where} on this host")
        return
    add("ok", "python", f"python {f['python']} ({f.get('python_exe')})")
    if f.get("container"):
        return  # the job's python and torch are the image's: its dry run says (container.py)
    if f.get("torch") is None or f.get("torch_error"):
        why = f.get("torch_error") or "not installed"
        if why == "not installed":
            why = "torch is not installed"
        add("failure", "torch", f"{why} (for {f.get('python_exe')})")
        return
    cuda = f", CUDA {f['torch_cuda']}" if f.get("torch_cuda") else ""
    nccl = f", NCCL {f['nccl']}" if f.get("nccl") else ""
    add("ok", "torch", f"torch {f['torch']}{cuda}{nccl}")
    if not gpus:
        return
    if not f.get("torch_cuda"):
        add(
            "warning",
            "cuda",
            f"torch {f['torch']} is a CPU build: the job cannot use this host's {len(gpus)} GPUs",
        )
    elif not f.get("cuda_available"):
        add(
            "failure",
            "cuda",
            f"torch {f['torch']} (built for CUDA {f['torch_cuda']}) cannot use the GPUs: "
            f"torch.cuda.is_available() is False with driver {f.get('driver')} "
            f"(CUDA {f.get('cuda')})",
        )


def _gpus(add: Add, f: Mapping[str, Any], gpus: Sequence[Gpu]) -> None:
    state = f.get("nvidia_smi")
    if state == "missing":
        add("ok", "gpu", "no nvidia-smi: a CPU host")
        return
    if state == "error":
        add("failure", "gpu", f.get("gpu_error") or "nvidia-smi failed")
        return
    add("ok", "gpu", f"{gpu_summary(gpus)}, driver {f.get('driver')}, CUDA {f.get('cuda')}")
    if f.get("visible_note"):  # CUDA_VISIBLE_DEVICES, MIG: what the job sees, `auto` starts
        mistaken = f.get("visible_dropped") or (gpus and not f.get("visible_gpus"))
        add("warning" if mistaken else "ok", "gpu-visible", f["visible_note"])
    busy = [busy_text(g) for g in gpus if is_busy(g)]
    if busy:
        add("warning", "gpu-busy", "; ".join(busy))


def _health(add: Add, f: Mapping[str, Any]) -> None:
    """GPU and network health (remote/host/health.py): a failure is a sick or unreadable GPU,
    a warning a GPU held down or an InfiniBand port to look at."""
    health = f.get("health")
    if not health:
        return
    issues = health["issues"]
    if f.get("nvidia_smi") == "error":  # failed already, in nvidia-smi's own words
        issues = [i for i in issues if i["source"] != "nvidia-smi" or i["gpu"] is not None]
    for i in issues:
        add(i["level"], "ib" if i["source"] == "infiniband" else "gpu-health", health_text(i))
    if health["gpus"] and not any(i["source"] != "infiniband" for i in issues):
        log = health["kernel_log"]
        xids = f"no Xid in {log}" if log else f"Xids not read ({health['kernel_log_error']})"
        add(
            "ok",
            "gpu-health",
            f"no ECC error, row remap or slowdown on {health['gpus']} GPUs; {xids}",
        )
    if health["ib_ports"] and not any(i["source"] == "infiniband" for i in issues):
        add("ok", "ib", f"{health['ib_ports']} InfiniBand ports ACTIVE, no link down")


def health_text(issue: Mapping[str, Any]) -> str:
    """`GPU 3 (00000000:3B:00.0): Xid 79: GPU has fallen off the bus.`"""
    gpu, bus = issue["gpu"], issue["bus_id"]
    who = f"GPU {gpu}" if gpu is not None else f"GPU {bus}" if bus else ""
    if gpu is not None and bus:
        who += f" ({bus})"
    return f"{who}: {issue['what']}" if who else issue["what"]


def is_busy(gpu: Gpu) -> bool:
    return bool(gpu.processes) or gpu.memory_used_mib >= BUSY_MIB


def busy_text(gpu: Gpu) -> str:
    if not gpu.processes:
        used = _gib(gpu.memory_used_mib)
        return f"GPU {gpu.index} has {used} in use by processes not visible here"
    procs = ", ".join(f"pid {p.pid} {p.name} ({_gib(p.memory_mib)})".strip() for p in gpu.processes)
    return f"GPU {gpu.index} in use by {procs}"


def gpu_summary(gpus: Sequence[Gpu]) -> str:
    """`8× NVIDIA H100 80GB HBM3`; a host of mixed models lists each."""  # noqa: RUF002
    counts: dict[str, int] = {}
    for g in gpus:
        counts[g.name] = counts.get(g.name, 0) + 1
    return " + ".join(f"{n}× {name}" for name, n in counts.items()) or "no GPU"  # noqa: RUF001


def _gib(mib: int) -> str:
    return f"{mib / 1024:.1f} GiB"


def _workdir(add: Add, f: Mapping[str, Any]) -> None:
    if not f.get("workdir_exists"):
        add("failure", "workdir", f"the working directory {f.get('workdir')} does not exist")
        return
    if f.get("script_found"):
        add("ok", "script", f"{f.get('script')} found")
    else:
        add("failure", "script", f"the script {f.get('script')} is not there")
    disk = f.get("disk")
    if disk is not None and disk < LOW_DISK_GIB:
        add("warning", "disk", f"only {disk:g} GiB free in {f.get('workdir')}")
    elif disk is not None:
        add("ok", "disk", f"{disk:g} GiB free in {f.get('workdir')}")


def _network(add: Add, f: Mapping[str, Any]) -> None:
    master, own = f.get("master_addr") or "", f.get("address") or ""
    if not master:
        add("failure", "route", NO_MASTER)
    elif f.get("port") is None and is_loopback(master) and own and not is_loopback(own):
        # lo "routes" to it from anywhere; from here it is this host, not node 0
        add(
            "failure",
            "route",
            f"the master address {master} is a loopback address: this host ({own}) cannot "
            "reach node 0 there; set job.master_addr",
        )
    elif f.get("ifname"):
        add("ok", "route", f"{f['ifname']} routes to the master {master}")
    else:
        add("failure", "route", f"no route to the master {master}")
    if f.get("port") is None:
        return  # only the master's port matters
    if f.get("port_free"):
        picked = " (picked: job.master_port is auto)" if f.get("port_auto") else ""
        add("ok", "port", f"port {f['port']} is free{picked}")
    else:
        why = f" ({f['port_error']})" if f.get("port_error") else ""
        add("failure", "port", f"port {f['port']} is in use on the master{why}")


def _stacks(add: Add, f: Mapping[str, Any]) -> None:
    """py-spy, for every rank's stack (`d`, `ddptui stacks`, a hang): a warning, not a failure."""
    if f.get("python") is None or "py_spy" not in f:
        return
    if not f["py_spy"]:
        add(
            "warning",
            "py-spy",
            f"no py-spy for {f.get('python_exe')}: stacks of the ranks need it "
            "(pip install py-spy, in the train extra)",
        )
    elif not f.get("ptrace"):
        add("warning", "py-spy", f"py-spy cannot read the ranks here: {PTRACE_NEEDED}")
    else:
        add("ok", "py-spy", f"py-spy at {f['py_spy']} (ptrace allowed: {f['ptrace']})")


# -- across hosts ------------------------------------------------------------------------------


def _model_key(h: HostChecked) -> str | None:
    """The GPU models alone (counts may differ between hosts); None when unknown."""
    if h.facts.get("nvidia_smi") == "missing":
        return "no GPU"
    return " + ".join(sorted({g.name for g in h.gpus})) or None


SAME: tuple[tuple[str, str, Callable[[HostChecked], Any]], ...] = (
    ("same-torch", "torch", lambda h: h.facts.get("torch")),
    ("same-cuda", "CUDA (driver)", lambda h: h.facts.get("cuda")),
    ("same-driver", "driver", lambda h: h.facts.get("driver")),
    ("same-gpu", "GPU model", _model_key),
    ("same-image", "container image", lambda h: container.image_key(h.facts)),
)


def across(hosts: Sequence[HostChecked]) -> tuple[Finding, ...]:
    """torch, CUDA, driver, GPU model and the job's code the same everywhere; a difference is
    a warning."""
    probed = [h for h in _ordered(hosts) if h.facts.get("reachable", True)]
    probed = [h for h in probed if not h.facts.get("probe_error")]
    found = []
    for check, label, value in (*SAME, _same_code(probed)):
        groups: dict[str, list[str]] = {}
        for h in probed:
            v = value(h)
            if v is not None:
                groups.setdefault(str(v), []).append(h.host)
        if check == "same-gpu" and set(groups) <= {"no GPU"}:
            continue  # no GPU anywhere: nothing to compare
        if len(groups) > 1:
            values = "; ".join(f"{v} on {', '.join(names)}" for v, names in groups.items())
            hint = DIFFERS_HINT.get(check, "")
            found.append(Finding("warning", check, f"{label} differs across hosts: {values}{hint}"))
        elif len(groups) == 1 and len(probed) > 1:
            [(v, names)] = groups.items()
            if len(names) == len(probed):  # not when the others have none (CPU hosts)
                found.append(Finding("ok", check, f"{label} {v} on every host"))
    return tuple(found)


DIFFERS_HINT = {
    "same-code": " (job.sync pushes the local code to every host)",
    "same-image": " (a tag pulled at different times; pin a digest, image@sha256:...)",
}


def _same_code(probed: Sequence[HostChecked]) -> tuple[str, str, Callable[[HostChecked], Any]]:
    """The job's code: its git state where every host has one, else the script's hash alone
    (a host without git is not different code)."""
    with_git = all(h.facts.get("git_commit") for h in probed if h.facts.get("script_sha256"))
    label = "code (script hash, git commit)" if with_git else "code (script hash)"
    return ("same-code", label, lambda h: fingerprint(h.facts, git=with_git))


SHORT = 10  # hex digits shown of a hash: enough to tell a handful of versions apart


def fingerprint(facts: Mapping[str, Any], *, git: bool = True) -> str | None:
    """`sha 1a2b3c4d5e git 9f8e7d6c5b` (`+3 dirty 77aa...` when tracked files changed):
    None when the script was not found. git=False: the script's hash alone."""
    sha = facts.get("script_sha256")
    if not sha:
        return None
    text = f"sha {sha[:SHORT]}"
    commit = facts.get("git_commit")
    if git and commit:
        text += f" git {commit[:SHORT]}"
        if facts.get("git_dirty"):
            changes = facts.get("git_dirty_sha256")
            text += f"+{facts['git_dirty']} dirty" + (f" {changes[:8]}" if changes else "")
    return text


def as_spare(h: HostChecked) -> HostChecked:
    """A spare host's findings: what would fail a node only keeps the spare out (a warning:
    it is not used until that is fixed); it never stops a launch."""
    found = [Finding("ok", "spare", "a spare: out of the run until a host is lost", h.host)]
    for f in h.findings:
        if f.level == "failure":
            f = Finding("warning", f.check, f"spare not usable: {f.message}", f.host)
        found.append(f)
    return dataclasses.replace(h, findings=tuple(found))


def done(hosts: Sequence[HostChecked]) -> ChecksDone:
    """Every host's findings, in node order, then those across hosts."""
    findings = tuple(f for h in _ordered(hosts) for f in h.findings) + across(hosts)
    return ChecksDone(not any(f.level == "failure" for f in findings), findings)


def _ordered(hosts: Sequence[HostChecked]) -> list[HostChecked]:
    return sorted(hosts, key=lambda h: h.node_rank)


def nprocs(inv: Inventory, gpu_counts: Mapping[int, int]) -> list[int]:
    """Processes per host. `auto`: the GPUs found on the host, else its `gpus:`, else 1."""
    n = inv.job.nproc_per_node
    if isinstance(n, int):
        return [n] * len(inv.hosts)
    return [gpu_counts.get(h.node_rank) or h.gpus or 1 for h in inv.hosts]


# -- node 0's address ---------------------------------------------------------------------------

NO_MASTER = "node 0's address is not known; set job.master_addr"


def master_problem(master: str, addrs: Sequence[str]) -> str | None:
    """Why the other hosts cannot reach node 0 at `master`, if that is plain already: no
    address at all, or a loopback one while they are elsewhere. None: the route check decides."""
    if len(addrs) < 2:
        return None
    if not master:
        return NO_MASTER
    if is_loopback(master) and not all(is_loopback(a) for a in addrs[1:]):
        return (
            f"the master address {master} is a loopback address, which the other hosts "
            "cannot reach node 0 at; set job.master_addr"
        )
    return None


def is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr.split("%", 1)[0]).is_loopback
    except ValueError:
        return addr == "localhost"
