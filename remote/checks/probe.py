"""Checks before launch, launcher side: one op of each host's agent learns everything (its
`probe`, remote/host/probe.py, on the job's interpreter, or any python3 when that is missing, so
the rest is still learned and the missing one is named); `parse()` turns the answer into a
HostChecked, and remote/checks/judge.py judges. The nvidia-smi queries and their parser are
remote/smi.py's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ddptui.remote.agents import ops
from ddptui.remote.agents.transport import HostError
from ddptui.remote.checks import checkpoint, judge, visible
from ddptui.remote.events import Gpu, HostChecked
from ddptui.remote.inventory import Host, Job
from ddptui.remote.smi import (
    SMI_RUNS,
    GpuRow,
    attach_processes,
    cuda_version,
    parse_gpus,
    smi_error,
)

if TYPE_CHECKING:
    from ddptui.remote.agents.agent import Agent

PROBE_TIMEOUT = 90.0  # importing torch and waking 8 GPUs can take a while on a busy host
REFRESH_TIMEOUT = 10.0
FACTS_MAX = 64 << 10  # characters of any one text a host's answer may carry


def spec(
    job: Job,
    master_addr: str,
    workdir: str | None,
    is_master: bool,
    host: Host | None = None,
    run_id: str | None = None,
    warm: str | dict[str, Any] | None = None,
    ckpt: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What the host's probe is asked (remote/host/probe.py: facts). A host whose job runs in a
    container gets that checked too, by a dry run with the job's flags (run_id names it).
    warm: the run whose start follows if the checks pass: the host's supervisor boots meanwhile;
    or that node's early spec (protocol.EARLY): it is prepared meanwhile, all but its job.
    ckpt: job.checkpoint's look (remote/checks/checkpoint.py)."""
    asked: dict[str, Any] = {
        "smi": {name: list(args) for name, args in SMI_RUNS.items()},
        "script": job.script,
        "workdir": workdir,
        "master_addr": master_addr,
        "master_port": job.master_port if is_master else None,
        "warm": warm,
        "checkpoint": ckpt,
    }
    if host is not None and host.container is not None:
        asked.update(container=host.container.spec(), node=host.node_rank, run_id=run_id,
                     env=host.env)  # fmt: skip
    return asked


async def probe(
    agent: Agent,
    job: Job,
    master_addr: str,
    *,
    workdir: str | None,
    connect_s: float | None,
    run_id: str | None = None,
    warm: str | dict[str, Any] | None = None,
    ckpt: dict[str, Any] | None = None,
) -> HostChecked:
    """Probe one host whose agent is up: one op, one answer (warm, ckpt: see spec)."""
    t = agent.transport
    host = t.host
    asked = spec(job, master_addr, workdir, host.node_rank == 0, host, run_id, warm, ckpt)
    try:
        found = await ops.probe(agent, asked, PROBE_TIMEOUT)
    except HostError as exc:
        facts = _base(host, connect_s, master_addr, t.address)
        return checked(host, {**facts, "probe_error": exc.reason})
    return parse(
        host,
        found,
        connect_s=connect_s,
        master_addr=master_addr,
        address=t.address,
        ssh_notices=t.notices,  # said of the login (host keys): warnings of the host
        run_id=run_id,
    )


def broken(host: Host, reason: str, code: int | None) -> HostChecked:
    """Logged into, but ddptui's agent did not start there (no python: exit 127)."""
    facts = {"reachable": True, "python_path": host.python, "agent_started": False}
    return checked(host, {**facts, "probe_error": reason, "probe_exit": code})


def unreachable(host: Host, reason: str) -> HostChecked:
    return checked(host, {"reachable": False, "error": reason, "python_path": host.python})


def checked(host: Host, facts: dict[str, Any], gpus: Sequence[Gpu] = ()) -> HostChecked:
    findings = judge.host_findings(host.name, facts, gpus)
    return HostChecked(host.name, host.node_rank, facts, tuple(gpus), findings)


def parse(
    host: Host,
    found: dict[str, Any],
    *,
    connect_s: float | None,
    master_addr: str,
    address: str | None = None,
    ssh_notices: Sequence[str] = (),
    run_id: str | None = None,
) -> HostChecked:
    """The host's answer → its facts, GPUs and findings. address: where the launcher learned
    the peers reach this host (remote/agents/fleet.py). The answer is data from a host: a field of
    the wrong shape is a probe error, never a crash."""
    facts = _base(host, connect_s, master_addr, address)
    if ssh_notices:
        facts["ssh_notices"] = list(ssh_notices)
    try:
        facts.update(_facts(found))
        if found.get("container") is not None:
            facts.update(container=found["container"], run_id=run_id)
        gpus = _gpu_facts(host, found, facts)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        facts["probe_error"] = f"the probe's answer is not understood: {exc!r}"[:FACTS_MAX]
        return checked(host, facts)
    facts["gpu_count"] = len(gpus)
    return checked(host, facts, gpus)


def _gpu_facts(host: Host, found: dict[str, Any], facts: dict[str, Any]) -> tuple[Gpu, ...]:
    smi = found.get("smi")
    if smi is None:
        facts["nvidia_smi"] = "missing"
        return ()
    if error := smi_error(smi["gpus"]):
        facts.update(nvidia_smi="error", gpu_error=error[:FACTS_MAX])
        return ()
    rows = parse_gpus(smi["gpus"]["out"])
    gpus = attach_processes(rows, smi["apps"]["out"] if smi["apps"]["code"] == 0 else "")
    drivers = {r.driver for r in rows if r.driver}
    facts.update(
        nvidia_smi="ok",
        driver=", ".join(sorted(drivers)) or None,
        cuda=cuda_version(smi["summary"]["out"]),
        **_visible(host, rows, smi.get("list"), found),
    )
    return gpus


def _visible(
    host: Host, rows: Sequence[GpuRow], listed: dict[str, Any] | None, found: dict[str, Any]
) -> dict[str, Any]:
    """The GPUs the job will see: CUDA_VISIBLE_DEVICES from the inventory's env, else the
    host's, read against `nvidia-smi -L` (else the query's rows: no MIG known)."""
    gpus = visible.parse_list(listed["out"]) if listed and listed.get("code") == 0 else []
    gpus = gpus or [visible.Gpu(r.gpu.index, r.uuid or "") for r in rows]
    seen = _job_sees(host, gpus, found.get("cuda_visible_devices"))
    return {
        "visible_gpus": seen.count,
        "visible_note": seen.message,
        "visible_dropped": seen.dropped,
    }


def _job_sees(host: Host, gpus: Sequence[visible.Gpu], hosts_value: str | None) -> visible.Visible:
    """The job's CUDA_VISIBLE_DEVICES: the inventory's env wins over the host's own."""
    if visible.VAR in host.env:
        return visible.visible(gpus, host.env[visible.VAR], "the inventory's env")
    return visible.visible(gpus, hosts_value)


def _base(
    host: Host, connect_s: float | None, master_addr: str, address: str | None = None
) -> dict[str, Any]:
    return {
        "reachable": True,
        "connect_s": None if connect_s is None else round(connect_s, 3),
        "python_path": host.python,
        "master_addr": master_addr,
        "address": address,
    }


def _facts(found: dict[str, Any]) -> dict[str, Any]:
    torch = found.get("torch") or {}
    wd = found.get("workdir") or {}
    port = found.get("port") or {}
    free = wd.get("free_bytes")
    return {
        "hostname": found.get("hostname"),
        "os": found.get("os"),
        "kernel": found.get("kernel"),
        "python": found.get("python"),
        "python_exe": found.get("python_exe"),
        "python_tried": found.get("python_tried"),
        "torch": torch.get("version"),
        "torch_path": torch.get("path"),
        "torch_cuda": torch.get("cuda"),
        "cuda_available": torch.get("cuda_available"),
        "nccl": torch.get("nccl"),
        "torch_error": torch.get("error"),
        "workdir": wd.get("path"),
        "workdir_exists": wd.get("exists"),
        "disk": None if free is None else round(free / 2**30, 1),  # GiB free in workdir
        "script": wd.get("script"),
        "script_found": wd.get("script_found"),
        "ifname": found.get("ifname"),
        "port": port.get("port"),
        "port_free": port.get("free"),
        "port_error": port.get("error"),
        "port_auto": bool(port.get("auto")),
        **_py_spy(found),
        **_code(found),
        "health": _health(found.get("health")),
        **checkpoint.facts(found.get("checkpoint")),
    }


def _health(found: Any) -> dict[str, Any] | None:
    """The host's health (remote/host/health.py), as judge.py reads it: issues of the wrong
    shape are dropped, texts bounded."""
    if not isinstance(found, dict):
        return None
    issues = [
        {
            "level": "failure" if i.get("level") == "failure" else "warning",
            "source": str(i.get("source"))[:40],
            "gpu": i["gpu"] if isinstance(i.get("gpu"), int) else None,
            "bus_id": str(i["bus_id"])[:40] if i.get("bus_id") else None,
            "what": str(i.get("what"))[:FACTS_MAX],
        }
        for i in found.get("issues") or ()
        if isinstance(i, dict)
    ]
    gpus = found.get("gpus")
    return {
        "gpus": gpus if isinstance(gpus, int) else None,
        "issues": issues,
        "kernel_log": found.get("kernel_log") and str(found["kernel_log"])[:FACTS_MAX],
        "kernel_log_error": found.get("kernel_log_error")
        and str(found["kernel_log_error"])[:FACTS_MAX],
        "ib_ports": len(found.get("ib") or ()),
    }


def _py_spy(found: dict[str, Any]) -> dict[str, Any]:
    """py-spy's path and the ptrace rights, where the probe looked (older ones did not)."""
    if "py_spy" not in found:
        return {}
    spy = found["py_spy"] or {}
    return {"py_spy": spy.get("path"), "ptrace": spy.get("ptrace")}


def _code(found: dict[str, Any]) -> dict[str, Any]:
    """The job's code on this host (remote/checks/judge.py compares it across hosts)."""
    if "code" not in found:
        return {}
    code = found["code"] or {}
    git = code.get("git") or {}
    facts = {
        "script_sha256": code.get("script_sha256"),
        "git_commit": git.get("commit"),
        "git_dirty": git.get("dirty"),  # tracked files that differ from the commit
        "git_dirty_sha256": git.get("dirty_sha256"),
        "git_error": git.get("error"),
    }
    facts["code"] = judge.fingerprint(facts)
    return facts


# -- `auto` without the checks ----------------------------------------------------------------


async def count_visible(agent: Agent) -> visible.Visible | None:
    """The devices a job on this host would see; None without a working nvidia-smi."""
    try:
        found = await ops.count(agent, REFRESH_TIMEOUT)
    except HostError:
        return None
    if found.listed is None:
        return None
    gpus = visible.parse_list(found.listed)
    return _job_sees(agent.transport.host, gpus, found.cuda_visible_devices)
