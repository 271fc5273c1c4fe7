"""Podman on the test hosts: ``TestCluster(..., containers=True)``.

What it takes on this machine (Debian bookworm: podman 4.3.1, runc 1.1.5, catatonit):

- runc, not crun (crun fails here: no CAP_SYS_RESOURCE, hybrid cgroups), and the machine's hard
  rlimits as the containers' defaults (podman's own exceed them): a ``containers.conf`` per
  host, named by ``CONTAINERS_CONF`` in the host's sshd ``SetEnv``.
- Each host its own container storage (``CONTAINERS_STORAGE_CONF``, under STATE), so that
  ``podman ps`` on a host lists that host's containers alone, as on real machines; the test
  image lives in one shared read-only store (``additionalimagestores``), imported once per
  machine.
- The image holds no registry's layers: the interpreter the venv was made from, its standard
  library's compiled files (as an image built by apt or pip has them: without them every
  container's python compiles what it imports again, 1-3 s of CPU at each start, and `--rm`
  throws the result away), and every library it and the venv's packages link to, at their
  real paths (the merged-/usr links included), imported from a tarball (about 95 MB, 10 s
  once). The venv itself, with torch, comes in with the workdir mount: inside,
  ``<repo>/.venv/bin/python`` is the job's python.
- ``ip netns exec`` remounts /sys, so podman would find no cgroups in a test host: the shell
  that starts its sshd mounts the hierarchies of /proc/1/mountinfo again first, and a
  /dev/shm of the host's own (podman's lock table lives there).

Standard library only, like testhosts.py.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import resource
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

STORE = Path("/var/tmp/ddptui-testimages")  # the shared image store, kept between sessions
# Each host's podman state. A short path: with its storage at an 82-character path (a pytest
# tmp dir), `podman run` waited 20 s after its container's end (conmon's cleanup failed).
STATE = Path("/run/ddptui-podman")
IMAGE = "localhost/ddptui-test/python"
TOOLS = ("podman", "runc", "catatonit")
APT = "podman runc catatonit"
# Not in the image: the tests, tkinter and the static library (config-*) are big, and
# site-packages come with the mount.
SKIP_DIRS = {"site-packages", "dist-packages", "test", "idlelib", "tkinter"}
BUILD = 2  # in the image's tag: an image of an older build is built again (2: compiled files)


def missing() -> list[str]:
    return [f"`{t}`" for t in TOOLS if shutil.which(t) is None]


def host_env(host_dir: Path) -> dict[str, str]:
    """What a host's sshd sets for every login: its own podman configuration."""
    return {
        "CONTAINERS_CONF": str(host_dir / "containers.conf"),
        "CONTAINERS_STORAGE_CONF": str(host_dir / "storage.conf"),
    }


def write_host_files(host_dir: Path, prefix: str) -> None:
    """The host's containers.conf and storage.conf; its podman state starts empty."""
    state = STATE / prefix / host_dir.name
    shutil.rmtree(state, ignore_errors=True)  # a previous cluster's (its mounts died with it)
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    (host_dir / "containers.conf").write_text(
        "[containers]\n"
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc=4096:4096"]\n'
        "[engine]\n"
        'runtime = "runc"\n'
        f'tmp_dir = "{state / "libpod"}"\n'
    )
    (host_dir / "storage.conf").write_text(_storage_conf(state, [STORE]))


def _storage_conf(root: Path, shared: list[Path]) -> str:
    stores = ", ".join(f'"{s / "storage"}"' for s in shared)
    return (
        '[storage]\ndriver = "overlay"\n'
        f'graphroot = "{root / "storage"}"\nrunroot = "{root / "run"}"\n'
        f"[storage.options]\nadditionalimagestores = [{stores}]\n"
    )


def host_mounts() -> str:
    """Shell commands for a host's own mount namespace (`ip netns exec` makes one): this
    machine's cgroup hierarchies (as /proc/1/mountinfo has them) on /sys/fs/cgroup again, where
    `ip netns exec` left none; and a /dev/shm of its own, as a real host has: podman's lock
    table is /dev/shm/libpod_lock, and hosts sharing one hung a `podman run` on another host's
    lock."""
    cmds = ["mount -t tmpfs -o mode=1777 tmpfs /dev/shm"]
    for line in Path("/proc/1/mountinfo").read_text().splitlines():
        fields, _, rest = line.partition(" - ")
        where, (fstype, _, options) = fields.split()[4], rest.split()[:3]
        if not where.startswith("/sys/fs/cgroup"):
            continue
        if fstype == "tmpfs":
            cmds.append(f"mount -t tmpfs -o mode=755 tmpfs {where}")
        elif fstype in ("cgroup", "cgroup2"):
            opts = ",".join(o for o in options.split(",") if o not in ("rw", "relatime"))
            cmds.append(f"mkdir -p {where} && mount -t {fstype} -o {opts or 'rw'} {fstype} {where}")
    return " && ".join(cmds)


def ensure_image(python: str) -> str:
    """The test image for the venv of `python` (imported into STORE once): its name."""
    base = json.loads(_python_json(python, "[sys.base_prefix, sys._base_executable]"))
    key = hashlib.sha256(json.dumps([base, os.stat(base[1]).st_mtime, BUILD]).encode()).hexdigest()
    name = f"{IMAGE}:{key[:12]}"
    STORE.mkdir(parents=True, exist_ok=True)
    with open(STORE / "lock", "w") as lock:  # two sessions at once: one builds
        fcntl.flock(lock, fcntl.LOCK_EX)
        podman = ["podman", "--root", str(STORE / "storage"), "--runroot", str(STORE / "run")]
        if subprocess.run([*podman, "image", "exists", name]).returncode != 0:
            with tempfile.TemporaryDirectory() as tmp:
                tar = Path(tmp) / "image.tar"
                build_tarball(python, tar)
                subprocess.run([*podman, "import", str(tar), name], check=True, capture_output=True)
    return name


def build_tarball(python: str, out: Path) -> None:
    """A root filesystem holding the venv's base interpreter and the libraries it needs."""
    venv = Path(python).parent.parent
    stdlib, libdir, tag = json.loads(
        _python_json(
            python,
            "[sysconfig.get_path('stdlib'), sysconfig.get_config_var('LIBDIR') or '', "
            "sys.implementation.cache_tag]",
        )
    )
    compiled = f".{tag}.pyc"  # the plain ones (not -O's), which the host's python wrote
    files = {str(p) for p in _links_to(Path(python)) if not p.is_relative_to(venv)}
    for root, dirs, names in os.walk(os.path.realpath(stdlib)):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith("config-")]
        in_cache = os.path.basename(root) == "__pycache__"
        files.update(os.path.join(root, n) for n in names if not in_cache or n.endswith(compiled))
    files.update(glob.glob(os.path.join(libdir, "libpython3*.so*")))
    linked = [f for f in files if ".so" in os.path.basename(f) or f == os.path.realpath(python)]
    linked += glob.glob(
        str(venv / "lib" / "python3*" / "site-packages" / "**" / "*.so*"), recursive=True
    )
    files.update(f for f in _libraries(linked) if not Path(f).is_relative_to(venv))
    with tarfile.open(out, "w") as tar:
        tmp = tarfile.TarInfo("tmp")
        tmp.type, tmp.mode = tarfile.DIRTYPE, 0o1777
        tar.addfile(tmp)
        done: set[str] = set()
        for path in sorted(files):
            for part in _links_to(Path(path)):
                if str(part) not in done:
                    done.add(str(part))
                    tar.add(part, arcname=str(part).lstrip("/"), recursive=False)


def _links_to(path: Path) -> list[Path]:
    """`path` and every symlink on the way to the file it names (directories included: the
    merged-/usr `/lib -> usr/lib`), each by the name the image must have."""
    found: list[Path] = []
    parts = Path(path).parts
    current = Path("/")
    for i, part in enumerate(parts[1:], 1):
        current = current / part
        if current.is_symlink():
            found.append(current)
            target = Path(os.readlink(current))
            rest = Path(*parts[i + 1 :]) if i + 1 < len(parts) else None
            resolved = target if target.is_absolute() else current.parent / target
            return found + _links_to(Path(os.path.normpath(resolved / rest if rest else resolved)))
    return [*found, current]


def _libraries(binaries: list[str]) -> set[str]:
    """The shared libraries (and the loader) that ldd says these load."""
    found: set[str] = set()
    out = subprocess.run(["ldd", *binaries], capture_output=True, text=True).stdout
    for line in out.splitlines():
        words = line.split()
        if "=>" in words and len(words) > 2 and words[2].startswith("/"):
            found.add(os.path.normpath(words[2]))
        elif words and words[0].startswith("/") and "ld-linux" in words[0]:
            found.add(os.path.normpath(words[0]))
    return found


def _python_json(python: str, expr: str) -> str:
    code = f"import json, sys, sysconfig; print(json.dumps({expr}))"
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout


# -- docker, here (its host network is dockerd's own namespace: `transport: local`) --

DOCKER_DATA = Path("/var/tmp/ddptui-docker")  # its images, kept between sessions
DOCKER_RUN = Path("/run/ddptui-docker")
DOCKER_HOST = f"unix://{DOCKER_RUN}/docker.sock"
DOCKERD = (
    "dockerd", "--iptables=false", "--ip6tables=false", "--bridge=none", "--ip-forward=false",
    "--ip-masq=false", "--data-root", str(DOCKER_DATA), "--exec-root", str(DOCKER_RUN / "exec"),
    "--pidfile", str(DOCKER_RUN / "dockerd.pid"), "--host", DOCKER_HOST,
)  # fmt: skip


def docker_missing() -> list[str]:
    return [f"`{t}`" for t in ("dockerd", "docker") if shutil.which(t) is None]


def start_dockerd(log: Path) -> subprocess.Popen[bytes]:
    """A dockerd of the tests' own (its own socket and state), touching no iptables rule: its
    default FORWARD DROP would cut the test hosts' bridge. Ready once it answers."""
    DOCKER_RUN.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        proc = subprocess.Popen(DOCKERD, stdout=out, stderr=subprocess.STDOUT)
    env = {**os.environ, "DOCKER_HOST": DOCKER_HOST}
    for _ in range(300):
        if subprocess.run(["docker", "info"], capture_output=True, env=env).returncode == 0:
            return proc
        if proc.poll() is not None:
            break
        subprocess.run(["sleep", "0.1"])
    proc.kill()
    raise RuntimeError(f"dockerd did not start: see {log}")


def ensure_docker_image(python: str) -> str:
    """The test image in the tests' dockerd (imported once): its name."""
    name = ensure_image(python).replace("localhost/", "")
    env = {**os.environ, "DOCKER_HOST": DOCKER_HOST}
    if subprocess.run(
        ["docker", "image", "inspect", name], capture_output=True, env=env
    ).returncode:
        with tempfile.TemporaryDirectory() as tmp:
            tar = Path(tmp) / "image.tar"
            build_tarball(python, tar)
            subprocess.run(["docker", "import", str(tar), name], check=True, capture_output=True,
                           env=env)  # fmt: skip
    return name
