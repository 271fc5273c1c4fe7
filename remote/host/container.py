"""A node's job in a container, host side: the runtime's command line, the sweep, the checks.

Runs on the hosts (python3 >= 3.8, standard library only). The supervisor wraps the node's argv
with `command()`; inside, remote/host/shim.py starts the job and ends it when its stdin closes.

- docker and podman: one attached container per node, `run -i --rm --init`, named and labelled
  with the run, on the host's network. Never `exec` into a long-lived container: exec neither
  forwards signals nor dies with its client. The job's environment goes by `-e`: the tags by
  value (rootless podman's pause process inherits the client's environment, and a tag sweep
  would kill every container of that user), every other variable by its name alone, its value in
  the client's environment: a value on the command line (an API token) is in `ps` for every
  user of the host.
- apptainer and enroot have no daemon: the job is an ordinary child of the supervisor.

`spec` is the inventory's merged `container:` (remote/inventory/model.py, Container.spec()).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
import time

from .protocol import DAEMONS

TYPE_CHECKING = False  # typing costs import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any, Mapping

LABEL = "ddptui.run"
TAGS = ("DDPTUI_RUN_ID", "DDPTUI_NODE")  # the supervisor's tags (remote/host/procs.py)
SHIM = "ddptui_shim.py"  # written into the run's private directory, run by the image's python
READY = "container.started"  # the shim makes it once the job has started: a later exit is the job's
INFINIBAND = "/dev/infiniband"  # passed by default where the host has it (NCCL over IB)
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
HOOK_DIRS = ("/usr/share/containers/oci/hooks.d", "/etc/containers/oci/hooks.d")
ENROOT_HOOK = "/etc/enroot/hooks.d/98-nvidia.sh"
NO_GPU = "void"  # NVIDIA_VISIBLE_DEVICES: the nvidia runtime acts as plain runc (no GPU)
MARK = "DDPTUI-CONTAINER "
CMD_TIMEOUT = 30.0
DRY_RUN_TIMEOUT = 180.0  # a cold image's first start unpacks its layers
PULL_TIMEOUT = 1800.0
OUTPUT_KEPT = 1 << 16  # bytes of a dry run's output kept

# What `run` itself exits with when the container did not start (docker and podman alike).
NOT_STARTED = {
    125: "{runtime} itself failed",
    126: "{runtime} could not run the container's command",
    127: "the container's command was not found (is {python} in the image?)",
}


def name(run_id: str, node: int, suffix: str = "") -> str:
    """The container's name: ddptui-<run>-n<k> (the checks' dry run adds -check)."""
    return "ddptui-{}-n{}{}".format(run_id, node, suffix)


# -- the command line ---------------------------------------------------------------------------


def here(spec: dict[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What the command line depends on in this host: the login, the GPUs' plumbing, the
    default devices. The checks report the same facts; tests hand `command()` their own."""
    environ = os.environ if environ is None else environ
    runtime = spec["runtime"]
    return {
        "uid": os.getuid(),
        "gid": os.getgid(),
        "login": _login(environ),
        "rootless": os.getuid() != 0,  # podman's case (a rootless docker is not told apart)
        "gpus": _has_gpus(),
        "gpu_via": gpu_via(runtime),
        "devices": [INFINIBAND] if os.path.exists(INFINIBAND) else [],
        "cuda_visible_devices": environ.get("CUDA_VISIBLE_DEVICES"),
    }


def _login(environ):
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return environ.get("USER") or environ.get("LOGNAME")


def command(
    spec, argv, env, run_id, node, workdir, private, grace=5.0, shared=(), host=None, suffix="",
    environ=None,
) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    """(argv, its environment): what runs `argv` (the node's command) in a container, through
    the shim. environ: the host's (default os.environ), which the runtime's client keeps.

    env: the job's own variables (the spec's env, the tags, PYTHONPATH ...), never the host's
    environment: a container starts from its image's. workdir (None: the login's home),
    private (the run's private directory, which holds the shim) and `shared` (more directories:
    the node's scratch dir) are mounted at the same paths; the job runs in workdir. grace: the
    shim's seconds between TERM and KILL. host: here()'s facts (tests pass their own).
    """
    host = here(spec) if host is None else host
    workdir = workdir or os.path.expanduser("~")
    runtime, env = spec["runtime"], dict(env)
    gpus = _gpu_list(spec, env, host)
    if gpus is not None:  # the runtime exposes those GPUs, numbered from 0 inside
        env.pop("CUDA_VISIBLE_DEVICES", None)
        if runtime == "apptainer" and gpus != "all":  # --nv exposes all: CUDA selects, as here
            env["CUDA_VISIBLE_DEVICES"] = gpus
    if spec.get("user", "login") == "login" and host.get("login"):
        env.setdefault("USER", host["login"])  # getpass (torch's caches) without a passwd entry
        env.setdefault("LOGNAME", host["login"])
    mounts = _same_paths(workdir, private, *shared) + [_mount(m) for m in spec.get("mounts", ())]
    shim = [  # -S: the shim needs the standard library alone, not the image's site (faster)
        spec.get("python") or "python3", "-S", os.path.join(private, SHIM),
        "--cwd", workdir, "--ready", os.path.join(private, READY), "--grace", str(grace),
        "--", *argv,
    ]  # fmt: skip
    _gpu_env(runtime, gpus, host.get("gpu_via"), env)
    build = {"docker": _daemon, "podman": _daemon, "apptainer": _apptainer, "enroot": _enroot}
    flags = build[runtime](spec, mounts, gpus, host, name(run_id, node, suffix), run_id)
    client, passed = client_env(environ), _passing(runtime, env, environ)
    client.update(passed.pop(None, {}))
    flags += [word for k in sorted(passed) for word in (_ENV_FLAG[runtime], passed[k])]
    return [*flags, *spec.get("args", ()), spec["image"], *shim], client


_ENV_FLAG = {"docker": "-e", "podman": "-e", "enroot": "--env"}


def _passing(runtime, env, environ):
    """How each of the job's variables reaches the container: {name: flag word}, and under
    None what the client's environment carries for it. By name alone, its value in the client's
    environment (out of `ps`), unless it is a tag or the client has a value of its own for it;
    apptainer takes APPTAINERENV_<name> from the client's environment, whatever it is."""
    environ = os.environ if environ is None else environ
    if runtime == "apptainer":
        return {None: {"APPTAINERENV_" + k: v for k, v in env.items()}}
    out: dict[str | None, Any] = {}
    carried = {}
    for k, v in env.items():
        if k in TAGS or environ.get(k, v) != v:
            out[k] = "{}={}".format(k, v)
        else:
            out[k], carried[k] = k, v
    out[None] = carried
    return out


def _daemon(spec, mounts, gpus, host, cname, run_id):
    runtime = spec["runtime"]
    out = [runtime, "run", "-i", "--rm", "--init", "--name", cname]
    out += ["--label", "{}={}".format(LABEL, run_id), "--network", "host"]
    out += ["--pull", spec.get("pull", "never")]
    # The supervisor spools the output: the runtime's own log (docker's json-file, podman's
    # k8s-file) would copy every byte of it to disk again, unbounded, for the whole run.
    out += ["--log-driver", "none"]
    if spec.get("user", "login") == "login":
        if runtime == "podman" and host.get("rootless"):
            out += ["--userns", "keep-id"]  # the login's own uid inside, as on the host
        else:
            out += ["--user", "{}:{}".format(host["uid"], host["gid"])]
    out += ["--ipc", spec.get("ipc", "host")]
    if spec.get("shm_size"):
        out += ["--shm-size", str(spec["shm_size"])]
    out += _gpu_flags(runtime, gpus, host.get("gpu_via"))
    out += _env("--ulimit", spec.get("ulimits", {}))
    devices = spec.get("devices")
    out += _each("--device", host.get("devices", ()) if devices is None else devices)
    return out + _each("--cap-add", spec.get("cap_add", ())) + _each("-v", mounts)


def _apptainer(spec, mounts, gpus, host, cname, run_id):
    out = ["apptainer", "exec", "--cleanenv"]
    if gpus is not None:
        out.append("--nv")  # every GPU; CUDA_VISIBLE_DEVICES (kept) selects, as on the host
    if spec.get("ipc") == "private":
        out.append("--ipc")
    if spec.get("cap_add"):
        out += ["--add-caps", ",".join(spec["cap_add"])]
    return out + _each("--bind", mounts)


def _enroot(spec, mounts, gpus, host, cname, run_id):
    return ["enroot", "start", *_each("--mount", mounts)]


def _each(flag, items):
    return [word for item in items for word in (flag, item)]


def _env(flag, env):
    return _each(flag, ["{}={}".format(k, v) for k, v in sorted(env.items())])


def _mount(spec):
    """`path` is `path:path` (docker's `-v path` alone would be an empty anonymous volume);
    `~` is the login's home here."""
    source, sep, rest = spec.partition(":")
    source = os.path.expanduser(source)
    return "{}:{}".format(source, rest if sep else source)


def _same_paths(*paths):
    return ["{0}:{0}".format(p) for p in dict.fromkeys(paths) if p]


def _gpu_list(spec, env, host):
    """The GPUs to expose: "all", "0,1" (CUDA_VISIBLE_DEVICES' items as given: indexes,
    UUIDs, MIG), or None for none."""
    gpus = spec.get("gpus", "auto")
    if gpus == "none" or (gpus == "auto" and not host.get("gpus")):
        return None
    if gpus == "all":
        return "all"
    visible = env.get("CUDA_VISIBLE_DEVICES", host.get("cuda_visible_devices"))
    if visible is None:
        return "all"
    items = [v.strip() for v in visible.split(",") if v.strip()]
    if not items or items[0].startswith("-"):  # "" or "-1": CUDA sees no GPU
        return None
    return ",".join(items)


def _gpu_flags(runtime, gpus, via):
    """--gpus (docker with the NVIDIA toolkit), a CDI device (podman, where a CDI spec is
    generated), else none: NVIDIA_VISIBLE_DEVICES says (_gpu_env)."""
    if via == "gpus" and gpus is not None:
        # docker reads --gpus as CSV: a list of devices must be quoted inside the value
        return ["--gpus", "all" if gpus == "all" else '"device={}"'.format(gpus)]
    if via == "cdi" and gpus is not None:
        return [f for g in gpus.split(",") for f in ("--device", "nvidia.com/gpu=" + g)]
    return []


def _gpu_env(runtime, gpus, via, env):
    """NVIDIA_VISIBLE_DEVICES where no flag exposes the GPUs (the nvidia runtime, its OCI hook,
    enroot's): images such as NGC's set it to all, so none must be said too."""
    flagged = runtime in DAEMONS and gpus is not None and via in ("gpus", "cdi")
    if runtime == "enroot" or (runtime in DAEMONS and not flagged):
        env["NVIDIA_VISIBLE_DEVICES"] = NO_GPU if gpus is None else gpus


def gpu_via(runtime):
    """How this host's runtime exposes GPUs: "gpus", "cdi", "env" (docker, podman), "nv"
    (apptainer), "hook" (enroot)."""
    if runtime == "apptainer":
        return "nv"
    if runtime == "enroot":
        return "hook"
    if runtime == "podman" and _cdi_specs():
        return "cdi"
    return "gpus" if runtime == "docker" else "env"


def _cdi_specs():
    """CDI spec files that define NVIDIA GPUs (nvidia-ctk cdi generate writes them)."""
    return [
        path
        for where in CDI_DIRS
        for path in _listing(where)
        if path.endswith((".yaml", ".yml", ".json")) and b"nvidia.com/gpu" in _head(path)
    ]


def _has_gpus():
    return os.path.exists("/dev/nvidia0") or shutil.which("nvidia-smi") is not None


def client_env(environ=None):
    """The runtime client's own environment: the host's without the supervisor's tags (rootless
    podman's pause process keeps the first client's environment for good)."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if k not in TAGS}


# -- after the run ------------------------------------------------------------------------------


def start_failure(spec: dict[str, Any], code: int, stderr: str, started: bool) -> str | None:
    """Why the container did not start, worded for the person who launched; None when it did
    (then `code` is the job's). started: the shim's READY file exists. stderr: the runtime's
    last lines, which say what went wrong."""
    runtime = spec["runtime"]
    # A signal ends docker's and podman's containers with 128+N (a stop before the job began);
    # apptainer and enroot are our children (a signal is a negative code), and FATAL is 255.
    if started or code <= 0 or (runtime in DAEMONS and code >= 128):
        return None
    said = " ".join(line.strip() for line in stderr.strip().splitlines()[-3:] if line.strip())
    # exit 1 and "failed to exec": the init (--init) found no python to start the shim with
    missing = "exec" in said and "No such file" in said
    why = NOT_STARTED.get(127 if missing else code, "{runtime} exited {code}").format(
        runtime=runtime, code=code, python=spec.get("python") or "python3"
    )
    text = "the container did not start: {} (image {}, exit {})".format(why, spec["image"], code)
    return "{}: {}".format(text, said) if said else text


def sweep_commands(runtime: str, run_id: str, names: bool = False) -> list[str] | None:
    """List the run's containers; the ids it prints go to remove_command(). names: each
    container's name beside its id."""
    if runtime not in DAEMONS:
        return None  # the job was an ordinary child: the tag sweep got it
    label = "label={}={}".format(LABEL, run_id)
    if names:
        return [runtime, "ps", "--filter", label, "-a", "--format", "{{.ID}} {{.Names}}"]
    return [runtime, "ps", "-aq", "--filter", label]


def remove_command(runtime: str, ids: list[str]) -> list[str]:
    # podman's rm -f waits 10 s for a TERM by default; the tag sweep has given the grace
    return [runtime, "rm", "-f", *(["-t", "0"] if runtime == "podman" else []), *ids]


def sweep(
    runtime: str, run_id: str, node: int | None = None, timeout: float = CMD_TIMEOUT
) -> tuple[list[str], str | None]:
    """Remove the run's containers (a SIGKILLed supervisor's, the dry run's): the ids removed
    and an error text, if any. Only containers are named: never the pause process. With
    `node`, that node's own only (its job's and its dry run's): nodes may share one runtime
    (several on one machine), and one node's end must never remove another's running job."""
    listing = sweep_commands(runtime, run_id, names=node is not None)
    if listing is None:
        return [], None
    code, out, err = _run(listing, timeout)
    if code != 0:
        return [], err or "{} ps failed".format(runtime)
    if node is None:
        ids = out.split()
    else:
        own = (name(run_id, node), name(run_id, node, "-check"))
        rows = [line.split() for line in out.splitlines()]
        ids = [row[0] for row in rows if len(row) == 2 and row[1] in own]
    if not ids:
        return [], None
    code, _, err = _run(remove_command(runtime, ids), timeout)
    return ids, (err or "{} rm failed".format(runtime)) if code != 0 else None


# -- the checks ---------------------------------------------------------------------------------


def check(
    spec: dict[str, Any], run_id: str, node: int, workdir: str | None, shim_source: str,
    env: dict[str, str] | None = None, pull_timeout: float = PULL_TIMEOUT,
) -> dict[str, Any]:  # fmt: skip
    """What the checks judge (remote/checks/container.py): the runtime, the image (pulled under
    `pull: missing|always`), the GPU plumbing, leftover containers, and one short dry run with
    the exact flags that reports the image's python, torch, CUDA, NCCL and /dev/shm.

    Each part is a runtime command or more (a podman client starts in 0.1-1 s): they run at
    once, the dry run too unless an image is to be pulled first (it runs with `--pull never`,
    so a missing image only fails it, and its answer is then not used)."""
    facts = {"runtime": spec["runtime"], "image": spec["image"], "ipc": spec.get("ipc", "host"),
             "node": node}  # fmt: skip
    facts["here"] = here(spec)

    def dry():
        return dry_run(spec, run_id, node, workdir, shim_source, env or {}, facts["here"])

    from concurrent.futures import ThreadPoolExecutor  # the checks' alone: supervisors import us

    gpus = spec.get("gpus") != "none" and facts["here"]["gpus"]
    with ThreadPoolExecutor(4) as pool:
        runtime = pool.submit(runtime_info, spec, gpus)
        image = pool.submit(image_info, spec, pull_timeout)
        left = pool.submit(leftovers, spec["runtime"])
        early = pool.submit(dry) if spec.get("pull", "never") == "never" else None
        facts.update(runtime.result())
        if facts.get("runtime_error"):
            return facts
        facts.update(image.result())
        facts["gpu"] = gpu_info(spec, facts)
        own = name(run_id, node, "-check")  # this check's dry run is no leftover
        facts["leftovers"] = [n for n in left.result() if n != own]
        if not facts.get("image_error"):
            facts.update(early.result() if early else dry())
    return facts


def runtime_info(spec, gpus=True):
    """The runtime's path and version, or why it cannot be used (no binary, no daemon, the
    socket's permissions). gpus: the GPU check needs the OCI runtimes too."""
    runtime = spec["runtime"]
    path = shutil.which(runtime)
    if path is None:
        return {"runtime_error": "{} is not installed (not on PATH)".format(runtime)}
    found = {"runtime_path": path}
    if runtime == "podman" and not gpus:
        # `podman info` gathers all of the host's facts: 0.2 s of CPU on every host, where its
        # version says enough (no daemon; a storage that fails, fails the image's check)
        code, out, err = _run([runtime, "version", "--format", "{{.Client.Version}}"])
        if code != 0:
            return dict(found, runtime_error=_last(err) or "{} does not run".format(runtime))
        found.update(runtime_version=out.strip() or None, rootless=os.getuid() != 0)
        return found
    if runtime in DAEMONS:
        code, out, err = _run([runtime, "info", "--format", "{{json .}}"], CMD_TIMEOUT)
        if code != 0:
            return dict(found, runtime_error=_last(err) or "{} info failed".format(runtime))
        found.update(_daemon_info(runtime, _json(out)))
        return found
    code, out, err = _run([runtime, "version" if runtime == "enroot" else "--version"])
    if code != 0:
        return dict(found, runtime_error=_last(err) or "{} does not run".format(runtime))
    found["runtime_version"] = out.strip().split()[-1] if out.strip() else None
    return found


def _daemon_info(runtime, info):
    if runtime == "docker":
        return {
            "runtime_version": info.get("ServerVersion"),
            "oci_runtimes": sorted(info.get("Runtimes") or {}),
            "default_runtime": info.get("DefaultRuntime"),
            "rootless": "name=rootless" in (info.get("SecurityOptions") or []),
        }
    host = info.get("host") or {}
    return {
        "runtime_version": (info.get("version") or {}).get("Version"),
        "oci_runtimes": [(host.get("ociRuntime") or {}).get("name")],
        "rootless": bool((host.get("security") or {}).get("rootless")),
    }


def image_info(spec, pull_timeout=PULL_TIMEOUT):
    """image_id (to compare hosts), pulled_s when it was pulled, or image_error."""
    runtime, image = spec["runtime"], spec["image"]
    if runtime in DAEMONS:
        inspect = [runtime, "image", "inspect", "--format", "{{.Id}}", image]
        code, out, err = _run(inspect)
        pull = spec.get("pull", "never")
        if pull == "always" or (code != 0 and pull == "missing"):
            start = time.monotonic()
            pcode, _, perr = _run([runtime, "pull", image], pull_timeout)
            if pcode != 0:
                return {"image_error": "cannot pull {}: {}".format(image, _last(perr))}
            code, out, err = _run(inspect)
            if code == 0:
                return {"image_id": out.strip(), "pulled_s": round(time.monotonic() - start, 1)}
        if code != 0 and not _no_image(err):  # the runtime's own trouble, said as it is
            return {
                "image_error": "{} cannot look at image {}: {}".format(runtime, image, _last(err))
            }
        if code != 0:
            why = "not on this host (pull: never)" if pull == "never" else _last(err)
            return {"image_error": "image {} {}".format(image, why)}
        return {"image_id": out.strip()}
    if "://" in image:  # docker://, library://: apptainer fetches it itself; the dry run tells
        return {"image_id": None}
    if runtime == "enroot" and "/" not in image and not image.endswith(".sqsh"):
        code, out, _ = _run(["enroot", "list"])
        if image not in out.split():
            return {"image_error": "no enroot container named {} (enroot list)".format(image)}
        return {"image_id": None}
    path = os.path.expanduser(image)
    if not os.path.exists(path):
        return {"image_error": "image {} is not on this host".format(image)}
    return {"image_id": _file_id(path) if os.path.isfile(path) else None}


def _no_image(err):
    """`image inspect` said the image is not there (docker: "No such image", podman: "image not
    known"), or nothing."""
    said = err.lower()
    return not said.strip() or "no such image" in said or "not known" in said


def _file_id(path):
    """An image file's fingerprint: its size and first and last MiB (a SIF's header holds its
    id). Hashing all of a 20 GB image would take the checks' time."""
    size = os.path.getsize(path)
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        digest.update(f.read(1 << 20))
        f.seek(max(0, size - (1 << 20)))
        digest.update(f.read(1 << 20))
    return "sha256:" + digest.hexdigest()


def gpu_info(spec, facts):
    """Whether the GPUs can reach the container: None on a host without GPUs (or gpus: none)."""
    here_ = facts["here"]
    if spec.get("gpus") == "none" or not here_["gpus"]:
        return None
    via = here_["gpu_via"]
    if via == "cdi":
        return {"via": via, "ok": True, "detail": "CDI spec " + ", ".join(_cdi_specs())}
    if via == "gpus":
        hook = shutil.which("nvidia-container-runtime-hook")
        nvidia = "nvidia" in facts.get("oci_runtimes", ())
        ok = bool(hook or nvidia)
        detail = hook or ("the nvidia runtime" if nvidia else "no NVIDIA Container Toolkit")
        return {"via": via, "ok": ok, "detail": detail}
    if via == "env":
        hooks = [p for d in HOOK_DIRS for p in _listing(d) if b"nvidia" in _head(p)]
        nvidia = "nvidia" in facts.get("oci_runtimes", ())
        detail = ", ".join(hooks) or ("the nvidia runtime" if nvidia else "no CDI spec or hook")
        return {"via": via, "ok": bool(hooks or nvidia), "detail": detail}
    if via == "hook":
        ok = os.path.exists(ENROOT_HOOK) and shutil.which("nvidia-container-cli") is not None
        return {"via": via, "ok": ok, "detail": ENROOT_HOOK if ok else "no enroot nvidia hook"}
    smi = shutil.which("nvidia-smi")
    return {"via": via, "ok": smi is not None, "detail": smi or "no nvidia-smi for --nv"}


def leftovers(runtime: str) -> list[str]:
    """Names of ddptui's containers on this host (any run): left behind, or running now."""
    if runtime not in DAEMONS:
        return []
    code, out, _ = _run(
        [runtime, "ps", "-a", "--filter", "label=" + LABEL, "--format", "{{.Names}}"]
    )
    return out.split() if code == 0 else []


# torch/version.py's assignments, read, not run: running it imports typing, milliseconds of
# CPU on every host. A string or None, annotated or not (`cuda: Optional[str] = '12.4'`):
# group 3 is the value, None for None.
VERSION_LINE = (
    r"""^(__version__|cuda)[ \t]*(?::[^=\n]*)?=[ \t]*(?:(['"])([^'"\n]*)\2|None)"""
    r"[ \t]*$"
)

# The image's python, torch, CUDA and NCCL, and /dev/shm. torch/version.py tells a CPU build
# without the import (seconds of CPU), read as the probe reads it (VERSION_LINE); a CUDA build
# is imported for its GPUs and NCCL.
DRY_RUN = r"""
import importlib.util, json, os, re, sys
f = {"python": "%d.%d.%d" % sys.version_info[:3], "uid": os.getuid()}
try:
    s = os.statvfs("/dev/shm")
    f["shm_bytes"] = s.f_frsize * s.f_blocks
except OSError:
    pass
try:
    found = importlib.util.find_spec("torch")
    if found is None or not found.origin:
        raise ImportError("torch is not installed")
    with open(os.path.join(os.path.dirname(found.origin), "version.py")) as vf:
        v = {m.group(1): m.group(3) for m in re.finditer(VERSION_LINE, vf.read(), re.M)}
    if not v.get("__version__"):
        raise ValueError("no __version__ in torch/version.py")
    f["torch"], f["cuda"] = v.get("__version__"), v.get("cuda")
    if f["cuda"]:
        import torch
        f["gpus"] = torch.cuda.device_count()
        f["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
except Exception as e:
    f["torch_error"] = "%s: %s" % (type(e).__name__, e)
print(MARK + json.dumps(f))
"""


def dry_run(spec, run_id, node, workdir, shim_source, env, host, timeout=DRY_RUN_TIMEOUT):
    """One short container with the run's exact flags, the job's python inside the shim."""
    if not workdir or not os.path.isdir(workdir):
        return {"dry_run_error": "no working directory {} to mount".format(workdir)}
    import tempfile

    private = tempfile.mkdtemp(prefix="ddptui-check-")
    try:
        with open(os.path.join(private, SHIM), "w") as f:
            f.write(shim_source)
        script = "MARK = {!r}\nVERSION_LINE = {!r}\n{}".format(MARK, VERSION_LINE, DRY_RUN)
        argv = [spec.get("python") or "python3", "-c", script]
        cmd, environ = command(
            spec, argv, env, run_id, node, workdir, private, host=host, suffix="-check"
        )
        start = time.monotonic()
        code, out = _attached(cmd, environ, timeout)
        took = round(time.monotonic() - start, 2)
        started = os.path.exists(os.path.join(private, READY))
    finally:
        shutil.rmtree(private, ignore_errors=True)
    for line in out.splitlines():
        if line.startswith(MARK):
            return {"dry_run": dict(_json(line[len(MARK) :]), seconds=took)}
    if code is None:  # it could not run, or gave no answer in time
        return {"dry_run_error": out, "dry_run_s": took}
    why = start_failure(spec, code, out, started) or "exit {}: {}".format(code, _last(out))
    return {"dry_run_error": why, "dry_run_s": took}


def _attached(argv, environ, timeout):
    """Run a container the way the supervisor does, stdin held open until it has answered
    (the shim ends the job at stdin's end). (exit code or None, stdout and stderr). Once it
    has answered, its end and `--rm` go on without us: a thread reaps the client."""
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env=environ,
        )  # fmt: skip
    except OSError as exc:
        return None, "cannot run {}: {}".format(argv[0], exc.strerror)
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    out, answered = b"", False
    try:
        for chunk in iter(lambda: proc.stdout.read1(65536), b""):  # type: ignore[union-attr]
            out = (out + chunk)[-OUTPUT_KEPT:]  # what a broken image says, bounded
            answered = _answered(out)
            if answered:
                break
    finally:
        timer.cancel()
        if not answered:
            _reap(proc)
    if answered:  # not a daemon thread: the process leaves only once the client has ended
        threading.Thread(target=_reap, args=(proc,)).start()
        return 0, _text(out)
    if proc.returncode < 0:
        return None, "no answer in {:g} s".format(timeout)
    return proc.returncode, _text(out)


def _answered(out):
    """A whole line of the dry run's answer is in."""
    return any(line.startswith(MARK.encode()) for line in out.split(b"\n")[:-1])


def _reap(proc):
    """Read the client's output to its end (a full pipe would hold it up), then close its
    stdin, as the supervisor does once the job is over, and wait for it."""
    for _ in iter(lambda: proc.stdout.read1(65536), b""):
        pass
    proc.stdout.close()
    proc.stdin.close()
    proc.wait()


# -- small helpers ------------------------------------------------------------------------------


def _run(argv, timeout=CMD_TIMEOUT):
    """(exit code, stdout, stderr) of a short runtime command; code None if it could not run."""
    try:
        res = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, env=client_env()
        )
    except subprocess.TimeoutExpired:
        return None, "", "{} took over {:g} s".format(" ".join(argv[:3]), timeout)
    except OSError as exc:
        return None, "", "cannot run {}: {}".format(argv[0], exc.strerror)
    return res.returncode, _text(res.stdout), _text(res.stderr)


def _text(data):
    return data.decode("utf-8", "replace")


def _last(text):
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else ""


def _json(text):
    try:
        found = json.loads(text)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _listing(where):
    return (
        [os.path.join(where, e) for e in sorted(os.listdir(where))] if os.path.isdir(where) else []
    )


def _head(path, size=1 << 16):
    try:
        with open(path, "rb") as f:
            return f.read(size)
    except OSError:
        return b""
