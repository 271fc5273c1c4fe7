"""The checks, host side: what this host offers the job, learned in one op of the agent.

It runs in the agent, on the job's own interpreter where there is one (else any python3, told
which one was missing): python3 >= 3.8, standard library only. nvidia-smi's output goes back
raw: the launcher parses it (remote/checks/probe.py), so one parser serves this probe and the live
monitor (remote/host/monitor.py) alike. torch is imported only where it could use a GPU (a CUDA
build on a host with nvidia-smi): the import costs seconds of CPU, and its version and CUDA
build are in torch/version.py anyway.
"""

from __future__ import annotations  # py3.8: annotations stay unevaluated

import contextlib
import hashlib
import os
import shutil
import socket
import subprocess
import sys

from . import health
from .netif import bind_error, free_port, route_ifname
from .protocol import file_sha256

TYPE_CHECKING = False  # typing costs milliseconds of import on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any

SMI_TIMEOUT = 20.0
GIT_TIMEOUT = 5.0  # a repository on a slow network filesystem: the rest of the probe goes on
DIRTY_FILES_HASHED = 200  # past this many changed files the count alone tells the trees apart


def facts(spec: dict[str, Any], missing_python: str | None = None) -> dict[str, Any]:
    """spec: {smi: {name: argv}, script, workdir, master_addr, master_port (master only)}.
    missing_python: the job's interpreter as tried (`~` expanded) when it was not there."""
    smi = shutil.which("nvidia-smi")
    # The queries run while the rest is gathered: nvidia-smi takes its time on a big host.
    running = {name: _start([smi, *argv]) for name, argv in spec["smi"].items()} if smi else {}
    workdir = workdir_info(spec.get("workdir"), spec["script"])
    box = spec.get("container")
    healthy = health.read(smi)  # its nvidia-smi runs while the queries above do
    said = {name: _finish(proc) for name, proc in running.items()} if smi else None
    return {
        "container": _container(box, spec, workdir) if box else None,
        "hostname": socket.gethostname(),
        "os": os_name(),
        "kernel": os.uname().release,
        "python": None if missing_python is not None else "{}.{}.{}".format(*sys.version_info[:3]),
        "python_exe": sys.executable,
        "python_tried": missing_python,
        "torch": None if missing_python is not None else torch_info(smi is not None),
        "workdir": workdir,
        "code": code_info(workdir),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "ifname": route_ifname(spec["master_addr"]),
        "port": port_info(spec["master_port"]) if spec.get("master_port") else None,
        "smi": said,
        "leases": _leases(said, spec.get("lease")),
        "health": healthy,
        "py_spy": {"path": find_py_spy(), "ptrace": ptrace_rights()},
        "checkpoint": _checkpoint(spec.get("checkpoint"), spec.get("workdir")),
    }


def _checkpoint(spec: Any, workdir: str | None) -> Any:
    """job.checkpoint as this host sees it, and whether node 0's mark is there."""
    if not spec:
        return None
    from . import checkpoints

    try:
        return checkpoints.look(spec, workdir)
    except (OSError, ValueError) as exc:
        return {"dir": spec.get("dir"), "error": str(exc)}


def _container(box: dict[str, Any], spec: dict[str, Any], workdir: dict[str, Any]) -> Any:
    """The runtime, the image, its GPU plumbing, leftovers and a dry run with the job's flags
    (remote/host/container.py); torch is the image's, not this host's."""
    from . import container

    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "shim.py"), encoding="utf-8") as f:
        shim = f.read()
    return container.check(box, spec.get("run_id") or "check", spec.get("node", 0),
                           workdir.get("path"), shim, spec.get("env") or {})  # fmt: skip


def visible_gpus(req: dict[str, Any]) -> dict[str, Any]:
    """For nproc_per_node: auto without the checks: CUDA_VISIBLE_DEVICES and `nvidia-smi -L`,
    and the GPUs' leases where asked (`lease`: the node's pins and variable)."""
    smi = shutil.which("nvidia-smi")
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if smi is None:
        return {"cuda_visible_devices": cvd, "list": None, "leases": None}
    asked = req.get("smi") or {"list": ["-L"]}
    said = {name: _finish(_start([smi, *argv])) for name, argv in asked.items()}
    return {"cuda_visible_devices": cvd, "list": said.get("list"),
            "leases": _leases(said, req.get("lease"))}  # fmt: skip


def _leases(said: dict[str, Any] | None, want: dict[str, Any] | None) -> dict[str, Any] | None:
    """Each GPU's lease and the queue (remote/host/leaseop.py), from the answers nvidia-smi
    gave already; None where none was asked for, or nvidia-smi did not answer."""
    listed, apps = (said or {}).get("list"), (said or {}).get("apps")
    if want is None or not listed or not apps or listed["code"] or apps["code"]:
        return None
    from . import leaseop

    found: dict[str, Any] = leaseop.for_probe(listed["out"], apps["out"], want)
    return found


def os_name() -> str:
    try:
        with open("/etc/os-release", encoding="utf-8") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return f"{os.uname().sysname} {os.uname().release}"


def torch_info(has_smi: bool) -> dict[str, Any]:
    try:
        found = find_torch()
    except (ImportError, ValueError) as exc:
        return {"error": f"cannot look for torch: {exc}"}
    if found is None or not found.origin:
        return {"error": "not installed"}
    where = os.path.dirname(found.origin)
    info: dict[str, Any] = {
        "path": where,
        "version": None,
        "cuda": None,  # the CUDA torch was built for; None: a CPU (or ROCm) build
        "cuda_available": False,
        "nccl": None,
    }
    try:
        with open(os.path.join(where, "version.py"), encoding="utf-8") as f:
            version = version_file(f.read())
    except (OSError, ValueError):  # an odd install: ask torch itself
        _import_torch(info)
        return info
    info["version"], info["cuda"] = version.get("__version__"), version.get("cuda")
    if info["cuda"] and has_smi:  # only a CUDA build on a GPU host can use a GPU
        _import_torch(info)
    return info


def version_file(text: str) -> dict[str, str | None]:
    """__version__ and cuda of a torch/version.py; ValueError without __version__."""
    import re  # the agent has it already (json's)

    from .container import VERSION_LINE  # the dry run's script reads it so too

    found = {m.group(1): m.group(3) for m in re.finditer(VERSION_LINE, text, re.M)}
    if not found.get("__version__"):
        raise ValueError("no __version__ in torch/version.py")
    return found


def find_torch() -> Any:
    """torch's module spec as the job's interpreter finds it, or None. The agent runs without
    its site (`python -S`: a venv's .pth files cost every command tens of ms): torch is looked
    for in the site directories the job's site would add, then, not found, after site itself
    has run (a .pth of an editable install may be what finds it)."""
    import importlib.machinery
    import importlib.util

    found = importlib.util.find_spec("torch")
    if found is not None or not sys.flags.no_site:
        return found
    found = importlib.machinery.PathFinder.find_spec("torch", site_dirs())
    if found is not None:
        return found
    import site

    site.main()
    return importlib.util.find_spec("torch")


def site_dirs() -> list[str]:
    """The directories site would put on sys.path (user site, site-packages, and the paths
    their .pth files name), without running the .pth files' code."""
    import site

    prefixes, user = [sys.prefix], True
    exe_dir = os.path.dirname(os.path.abspath(sys.executable))
    for cfg in (os.path.join(exe_dir, "pyvenv.cfg"), os.path.join(exe_dir, "..", "pyvenv.cfg")):
        if os.path.isfile(cfg):  # a venv: site makes it the prefix (python < 3.11 only under -S)
            with open(cfg, encoding="utf-8", errors="replace") as f:
                keys = dict(line.split("=", 1) for line in f if "=" in line)
            system = {k.strip().lower(): v.strip().lower() for k, v in keys.items()}
            user = system.get("include-system-site-packages") == "true"
            venv = os.path.normpath(os.path.dirname(cfg))
            prefixes = [venv, *prefixes] if user else [venv]
            break
    user = user and bool(site.check_enableusersite())  # under -S site has not asked yet
    dirs = ([site.getusersitepackages()] if user else []) + list(site.getsitepackages(prefixes))
    return dirs + [p for d in dirs for p in _pth_paths(d)]


def _pth_paths(where: str) -> list[str]:
    try:
        names = sorted(n for n in os.listdir(where) if n.endswith(".pth"))
    except OSError:
        return []
    found = []
    for name in names:
        try:
            with open(os.path.join(where, name), encoding="utf-8", errors="replace") as f:
                lines = [line.strip() for line in f]
        except OSError:
            continue
        for line in lines:
            if line and not line.startswith(("#", "import ", "import\t")):
                path = os.path.join(where, line)
                if os.path.isdir(path):
                    found.append(path)
    return found


def _import_torch(info: dict[str, Any]) -> None:
    try:
        import torch

        info["version"] = torch.__version__
        info["cuda"] = torch.version.cuda
        info["cuda_available"] = bool(torch.cuda.is_available())
        if info["cuda"]:
            nccl = torch.cuda.nccl.version()
            info["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    except Exception as exc:  # a broken install says why; the checks report it
        info["error"] = f"import torch failed: {type(exc).__name__}: {exc}"


def workdir_info(workdir: str | None, script: str) -> dict[str, Any]:
    path = os.path.expanduser(workdir) if workdir else os.getcwd()
    info: dict[str, Any] = {"path": path, "exists": os.path.isdir(path)}
    if info["exists"]:
        info["free_bytes"] = shutil.disk_usage(path).free
        info["script"] = os.path.join(path, os.path.expanduser(script))
        info["script_found"] = os.path.isfile(info["script"])
    return info


def code_info(workdir: dict[str, Any]) -> dict[str, Any]:
    """The job's code, fingerprinted: the script's sha256 and, where workdir is in a git work
    tree, its commit and whether tracked files differ from it (with a hash of those files)."""
    info: dict[str, Any] = {}
    if workdir.get("script_found"):
        with contextlib.suppress(OSError):
            info["script_sha256"] = file_sha256(workdir["script"])
    git = shutil.which("git")
    if git and workdir.get("exists"):
        info["git"] = git_info(git, workdir["path"])
    return info


def git_info(git: str, path: str) -> dict[str, Any] | None:
    """None outside a work tree. --no-optional-locks: a status must not take the index lock a
    user's own git may hold; core.fsmonitor off: a repository's config runs no program here."""
    base = [git, "--no-optional-locks", "-c", "core.fsmonitor=false", "-C", path]
    try:
        head = (_git([*base, "rev-parse", "--show-toplevel", "HEAD"]) or "").strip().split("\n")
        if len(head) != 2:
            return None
        top, commit = head
        status = _git([*base, "status", "--porcelain", "-z", "--untracked-files=no"])
    except subprocess.TimeoutExpired:
        return {"error": f"git took over {GIT_TIMEOUT:g} s"}
    if status is None:
        return {"commit": commit, "error": "git status failed"}
    changed = _changed(status)
    info: dict[str, Any] = {"commit": commit, "dirty": len(changed)}
    if changed:
        info["dirty_sha256"] = _changes_sha256(top, changed)
    return info


def _git(argv: list[str]) -> str | None:
    try:
        res = subprocess.run(argv, capture_output=True, timeout=GIT_TIMEOUT, check=False)
    except OSError:
        return None
    return res.stdout.decode("utf-8", "replace") if res.returncode == 0 else None


def _changed(porcelain: str) -> list[str]:
    """Paths of `status --porcelain -z`: `XY path`; a rename or copy is followed by its old path."""
    entries, paths = iter(porcelain.split("\0")), set()
    for entry in entries:
        if len(entry) > 3:
            paths.add(entry[3:])
            if entry[0] in "RC":
                paths.add(next(entries, ""))
    return sorted(p for p in paths if p)


def _changes_sha256(top: str, changed: list[str]) -> str | None:
    """What the changed tracked files hold: two trees dirty in different ways differ."""
    if len(changed) > DIRTY_FILES_HASHED:
        return None
    digest = hashlib.sha256()
    for rel in changed:
        try:
            content = file_sha256(os.path.join(top, rel))
        except OSError:
            content = "-"  # deleted (or a rename's old name)
        digest.update(f"{rel}\0{content}\0".encode())
    return digest.hexdigest()


def port_info(port: int | str) -> dict[str, Any]:
    """Whether the master's rendezvous port can be bound, the way torchrun's store binds it;
    `auto`: one free now, from outside the ephemeral range (job.master_port: auto)."""
    if port == "auto":
        return {"port": free_port(), "free": True, "auto": True}
    try:
        why = bind_error(int(port))
    except ValueError as exc:
        why = str(exc)
    if why:
        return {"port": port, "free": False, "error": why}
    return {"port": int(port), "free": True, "auto": False}


def find_py_spy() -> str | None:
    """py-spy (every rank's stack) on PATH, or beside this interpreter (a venv's bin)."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return shutil.which("py-spy") or (beside if os.access(beside, os.X_OK) else None)


CAP_SYS_PTRACE = 19


def ptrace_rights() -> str | None:
    """What lets py-spy read another process of this user here; None when nothing does."""
    scope = _read("/proc/sys/kernel/yama/ptrace_scope")
    if scope == "3":
        return None  # no process may be traced, not even by root
    caps = next((ln.split()[1] for ln in _lines("/proc/self/status") if ln[:7] == "CapEff:"), "0")
    if int(caps, 16) >> CAP_SYS_PTRACE & 1:
        return "root" if os.geteuid() == 0 else "CAP_SYS_PTRACE"
    return "ptrace_scope 0" if scope in (None, "0") else None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return None


def _lines(path: str) -> list[str]:
    return (_read(path) or "").splitlines()


def _start(argv: list[str]) -> Any:
    try:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        return exc


def _finish(proc: Any) -> dict[str, Any]:
    if isinstance(proc, OSError):
        return {"code": 126, "out": "", "err": f"cannot run nvidia-smi: {proc.strerror}"}
    try:
        out, err = proc.communicate(timeout=SMI_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"code": None, "out": "", "err": f"no answer in {SMI_TIMEOUT:g} s"}
    text = {"out": out.decode("utf-8", "replace"), "err": err.decode("utf-8", "replace")}
    return {"code": proc.returncode, **text}
