"""What the benchmarks share: a workspace, test hosts, inventories, the planned command, timing.

The test hosts use their own prefix and subnet, so a benchmark never waits for (or tears down)
the clusters of concurrent test runs. Timings on a shared 2-core machine drift with other load:
the benchmarks alternate their variants and report medians and ratios, not single runs.
"""

from __future__ import annotations

import compileall
import dataclasses
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "support"))

from testhosts import TestCluster  # noqa: E402

from ddptui.remote import inventory  # noqa: E402
from ddptui.remote.run import plan as planner  # noqa: E402

PREFIX, SUBNET = "ddptb", "10.213.9"  # apart from the tests' ddpt / 10.213.7
HOST_IFNAME = "eth0"  # every test host reaches its peers (and itself) over eth0
READ_CHUNK = 1 << 20


def cluster(
    n: int, root: Path, containers: bool = False, testhosts: str = f"{PREFIX}:{SUBNET}",
    lease_dirs: bool = False,
) -> TestCluster:  # fmt: skip
    """n test hosts of the benchmarks' own (their names fail to resolve at once, see testhosts);
    `containers`: podman and the test image on each; `lease_dirs`: each host's GPU leases in a
    directory of its own. testhosts: PREFIX:SUBNET."""
    prefix, _, subnet = testhosts.partition(":")
    return TestCluster(n, root=root, prefix=prefix, subnet=subnet, containers=containers,
                       lease_dirs=lease_dirs)  # fmt: skip


def ddptui_command() -> list[str]:
    """`ddptui` from this checkout (what the console script runs; timed() runs it in REPO),
    its modules compiled as an installed package has them: where PYTHONDONTWRITEBYTECODE is
    set (this machine sets it), each launch would compile every module again (~0.1 s)."""
    compileall.compile_dir(str(REPO / "remote"), quiet=1)
    compileall.compile_dir(str(REPO / "tui"), quiet=1)
    return [sys.executable, "-m", "ddptui.tui.cli"]


@contextmanager
def workspace(name: str, keep: bool) -> Iterator[Path]:
    """A scratch directory for one benchmark's outputs, removed afterwards unless kept."""
    work = Path(tempfile.mkdtemp(prefix=f"ddptui-bench-{name}-"))
    try:
        yield work
    finally:
        if keep:
            print(f"outputs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def require_pdsh() -> None:
    if shutil.which("pdsh") is None:
        sys.exit("bench: pdsh is not installed (apt-get install -y pdsh)")


def write_inventory(
    path: Path, hosts: Sequence[Mapping[str, Any]], defaults: Mapping[str, Any], job: dict[str, Any]
) -> inventory.Inventory:
    doc = {"defaults": dict(defaults), "hosts": [dict(h) for h in hosts], "job": job}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return inventory.load(path)


def planned(inv: inventory.Inventory, run_id: str, addrs: Sequence[str]) -> planner.Plan:
    """The commands ddptui itself would run: the baselines run exactly these."""
    n = inv.job.nproc_per_node
    nprocs = [n if isinstance(n, int) else 1 for _ in inv.hosts]
    return planner.build(inv, run_id=run_id, addrs=addrs, nprocs=nprocs)


def replace_arg(node: planner.NodePlan, flag: str, value: str) -> planner.NodePlan:
    """The node's command with `flag`'s value replaced (a baseline's own log dir, say)."""
    argv = list(node.argv)
    argv[argv.index(flag) + 1] = value
    return dataclasses.replace(node, argv=tuple(argv))


def on_console(node: planner.NodePlan) -> planner.NodePlan:
    """A torchrun as a user runs it by hand: its ranks on the console (`--tee 3`), each line
    tagged `[rank]:`. Under ddptui each rank's files are read by its host instead
    (`--redirects 3`)."""
    if "--redirects" not in node.argv:
        return node
    argv = list(node.argv)
    argv[argv.index("--redirects")] = "--tee"
    env = {**node.env, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[${rank}]:"}
    return dataclasses.replace(node, argv=tuple(argv), env=env)


def shell_line(node: planner.NodePlan, ifname: str, workdir: str) -> str:
    """One node's command as a remote shell line, with the env ddptui's supervisor sets; a
    torchrun's ranks on the console (on_console)."""
    node = on_console(node)
    env = dict(node.env)
    for name in planner.IFNAME_VARS:  # the supervisor resolves these per host; ours are known
        env.setdefault(name, ifname)
    assigns = [f"{k}={v}" for k, v in env.items()]
    return f"cd {shlex.quote(workdir)} && " + shlex.join(["env", *assigns, *node.argv])


def login_delay(c: TestCluster, seconds: float, hosts: Sequence[int] | None = None,
                lock: Path | None = None) -> None:  # fmt: skip
    """Every login shell on these hosts takes `seconds` more, as conda or pyenv init in .bashrc
    does on a network home. With `lock`, they all queue on one lock for it:
    a busy shared home. 0 takes the delay away."""
    for i in hosts if hosts is not None else range(len(c.hosts)):
        rc = c.hosts[i].home / ".bashrc"
        if not seconds:
            rc.unlink(missing_ok=True)
        elif lock is not None:
            rc.write_text(f"flock {shlex.quote(str(lock))} sleep {seconds}\n")
        else:
            rc.write_text(f"sleep {seconds}\n")


def probe_line(inv: inventory.Inventory, master: str, workdir: str) -> str:
    """The checks' probe as pdsh can run it: the very host code ddptui's agent runs for its
    `probe` op (remote/host/probe.py), kept on each host (install_code), one answer line."""
    from ddptui.remote.agents import shipper
    from ddptui.remote.checks import probe

    spec = probe.spec(inv.job, master, workdir, is_master=True)
    code = (
        "import json,sys;sys.path.insert(0,sys.argv[1]);from ddph import probe;"
        "print('DDPTUI-PROBE '+json.dumps(probe.facts(json.loads(sys.argv[2]))))"
    )
    kept = f"$HOME/.local/state/ddptui/code/{shipper.digest()}"
    return f'python3 -c {shlex.quote(code)} "{kept}" {shlex.quote(json.dumps(spec))}'


PROBE_MARK = b"DDPTUI-PROBE "


def install_code(c: TestCluster) -> None:
    """The host code kept in every test host's home, as an agent's first start leaves it."""
    from ddptui.remote.agents import shipper

    for host in c.hosts:
        pkg = host.home / ".local" / "state" / "ddptui" / "code" / shipper.digest() / "ddph"
        pkg.mkdir(parents=True, exist_ok=True)
        for name, text in shipper.sources().items():
            (pkg / f"{name}.py").write_text(text)
        for level in (pkg, *pkg.parents[:4]):
            level.chmod(0o700)


@dataclass
class Timed:
    wall: float
    cpu: float  # CPU seconds of the command and the descendants it waited for
    code: int
    out: Path
    err: Path
    first_at: float | None  # seconds from start to the first chunk holding `marker`
    last_at: float | None  # ... and to the last one
    busy: float = 0.0  # CPU seconds the whole machine spent meanwhile (test hosts' sshd too)


def timed(
    argv: Sequence[str],
    out: Path,
    err: Path,
    *,
    env: Mapping[str, str] | None = None,
    marker: bytes | None = None,
    timeout: float = 600,
    cwd: Path = REPO,
) -> Timed:
    """Run argv with stdout read through a pipe (kept in `out`); time it and its CPU."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy0 = machine_busy()
    t0 = time.monotonic()
    first_at = last_at = None
    with open(out, "wb") as keep, open(err, "wb") as errf:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errf, env=env, cwd=cwd)
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while chunk := os.read(fd, READ_CHUNK):
            keep.write(chunk)
            if marker is not None and marker in chunk:
                last_at = time.monotonic() - t0
                first_at = last_at if first_at is None else first_at
        proc.stdout.close()
        code = proc.wait(timeout=timeout)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timed(wall, cpu, code, out, err, first_at, last_at, machine_busy() - busy0)


def machine_busy() -> float:
    """CPU seconds this machine has spent busy since boot, every process counted (/proc/stat:
    all but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def load() -> str:
    """The machine's load average: other work on it moves every wall time."""
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def tail(path: Path, n: int = 15) -> str:
    lines = path.read_text(errors="replace").splitlines()[-n:]
    return "\n".join(f"    {line}" for line in lines)


def round_name(rep: int) -> str:
    """A benchmark round's name: warm-up rounds (--warmup) are numbered below 0, not counted."""
    return f"rep {rep + 1}" if rep >= 0 else "warm-up"


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [header, ["-" * w for w in widths], *rows]
    return "\n".join(
        "  ".join(
            str(c).ljust(w) if i == 0 else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in lines
    )
