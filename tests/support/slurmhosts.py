"""A real Slurm on this one machine: a controller, a login node and compute nodes, each in a
network namespace of its own, as the ssh test hosts are (testhosts.py).

Debian's packages (``slurmctld``, ``slurmd``, ``slurm-client``, ``munge``: Slurm 22.05):

- namespace ``<prefix>-c0`` (``<subnet>.10``) runs ``slurmctld`` under the hostname that
  ``SlurmctldHost`` names (``<prefix>-ctl``), and the login node: an sshd under the hostname
  ``<prefix>-login``, the only machine of the cluster a test reaches by ssh;
- namespace ``<prefix>-n<i>`` (``<subnet>.<11+i>``) runs ``slurmd -N <prefix>-n<i>`` under that
  hostname;
- one ``munged`` in the root namespace serves them all through its socket file
  (``AuthInfo=socket=...``).

Every daemon starts as ``nsenter --net=/run/netns/NS unshare --uts --mount``, never under ``ip
netns exec``: that remounts /sys, and slurmd 22.05 always loads a cgroup plugin ("No filesystem
mounted on /sys/fs/cgroup"). Its private mount namespace binds three files and a directory over
the machine's: the cluster's ``hosts`` (every node's name, so c10d and gloo find their own
address; a test may write a line that sends a name to loopback: ``hosts_line``), a
``resolv.conf`` that refuses at once (the machine's nameserver is out of reach: each of
TCPStore's reverse lookups would wait 10 s), and ``<root>/bin`` as that node's own bin dir (the
nodes share the PATH the job brings from its submission, each with its own tools: an
``nvidia-smi`` stand-in, a missing ``scontrol``). Nothing of the machine's /etc is changed.

Config: ``ProctrackType=proctrack/linuxproc``, ``TaskPlugin=task/none``, no accounting
database (``JobCompType=jobcomp/filetxt``: ``sacct -c`` reads completions), ``SlurmdParameters=
config_overrides`` (a node has the CPUs and memory declared), ``KillWait=5``, ``MinJobAge=600``
(``squeue --states=all`` knows a job ten minutes after its end). The home is shared, as on a
real cluster's network home: the login node and every node have ``<root>/home``.

``down()`` kills everything in the namespaces, munged, and deletes namespaces and links; a
crashed earlier run of the same prefix is cleaned at ``up()`` (an flock per prefix, as
testhosts.py). Standard library only; needs root.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from testhosts import (
    REPO,
    RESOLV_CONF,
    SSHD,
    SYSTEM_PATH,
    _ip_batch,
    _ip_batch_finish,
    _ip_batch_start,
    _keygen,
    _kill_and_wait_netns,
    _netns_ids,
    _pid_file_ready,
    _reap,
    acquire_lock,
    pids_with_env,
)

NETNS_DIR = Path("/run/netns")
PREFIX, SUBNET = "ddps", "10.213.9"  # the default cluster's; DDPTUI_SLURMHOSTS names another
CONTROLLER_OCTET, FIRST_NODE_OCTET = 10, 11
TOOLS = ("slurmctld", "slurmd", "sbatch", "squeue", "scancel", "srun", "munged", "nsenter")
APT = "slurmctld slurmd slurm-client munge"
SBIN = ("/usr/sbin", "/usr/bin")


@dataclass
class SlurmNode:
    index: int
    name: str
    addr: str
    netns: str
    dir: Path

    @property
    def bin_dir(self) -> Path:
        return self.dir / "bin"


class SlurmCluster:
    """``n`` Slurm compute nodes, a controller and a login node under ``root``."""

    __test__ = False

    def __init__(
        self, n: int = 3, *, root: Path | str, prefix: str = PREFIX, subnet: str = SUBNET
    ) -> None:
        self.n, self.root, self.prefix, self.subnet = n, Path(root).resolve(), prefix, subnet
        self.controller = f"{prefix}-ctl"
        self.login_name = f"{prefix}-login"
        self.login_addr = f"{subnet}.{CONTROLLER_OCTET}"
        self.ctl_netns = f"{prefix}-c0"
        self.nodes = [
            SlurmNode(
                i,
                f"{prefix}-n{i}",
                f"{subnet}.{FIRST_NODE_OCTET + i}",
                f"{prefix}-n{i}",
                self.root / "nodes" / f"{prefix}-n{i}",
            )
            for i in range(n)
        ]
        self.login_dir = self.root / "login"
        self.conf = self.root / "slurm.conf"
        self.home = self.root / "home"
        self.bin = self.root / "bin"  # each namespace binds its own bin dir here
        self.hosts_file = self.root / "etc" / "hosts"
        self.munge_socket = self.root / "munge" / "munge.sock"
        self.identity_file = self.root / "id_ed25519"
        self.known_hosts = self.root / "known_hosts"
        self.ssh_config = self.root / "ssh_config"
        self.python = sys.executable
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._lock_fd: int | None = None

    @property
    def node_names(self) -> list[str]:
        return [node.name for node in self.nodes]

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> SlurmCluster:
        return self.up()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.down()

    def up(self) -> SlurmCluster:
        check_prerequisites()
        self._lock_fd = acquire_lock(self.prefix + "-slurm", 900.0)
        try:
            teardown_all(self.prefix)
            self._write_files()
            self._create_network()
            self._start_munged()
            self.start_controller()
            for name, _, d, netns in self.sshd_machines():
                self._start_sshd(name, d, netns)
            for node in self.nodes:
                self._start_slurmd(node)
            self.wait_idle()
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        if self._lock_fd is None:
            return
        try:
            teardown_all(self.prefix)
            for proc in self._procs.values():
                _reap(proc)
        finally:
            self._procs.clear()
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- files -------------------------------------------------------------------------------

    def _write_files(self) -> None:
        for sub in ("nodes", "login", "etc", "munge", "state", "log", "run", "home", "bin"):
            shutil.rmtree(self.root / sub, ignore_errors=True)
            (self.root / sub).mkdir(parents=True)
        (self.root / "munge").chmod(0o700)
        for node in self.nodes:
            node.bin_dir.mkdir(parents=True)
            (node.dir / "spool").mkdir()
        (self.login_dir / "bin").mkdir()
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.write_hosts()
        (self.root / "etc" / "resolv.conf").write_text(RESOLV_CONF)
        self.conf.write_text(self._slurm_conf())
        self.identity_file.unlink(missing_ok=True)
        machines = self.sshd_machines()
        keygens = [_keygen(self.identity_file, "slurmhosts")]
        keygens += [_keygen(d / "ssh_host_ed25519_key", name) for name, _, d, _ in machines]
        for proc in keygens:
            if proc.wait() != 0:
                raise RuntimeError("ssh-keygen failed")
        (self.root / "authorized_keys").write_text(
            self.identity_file.with_suffix(".pub").read_text()
        )
        known, config = [], []
        for name, addr, d, _ in machines:
            keytype, pub = (d / "ssh_host_ed25519_key.pub").read_text().split()[:2]
            known.append(f"{addr},{name} {keytype} {pub}\n")
            config.append(
                f"Host {name}\n    HostName {addr}\n    User root\n"
                f"    IdentityFile {self.identity_file}\n    IdentitiesOnly yes\n"
                f"    UserKnownHostsFile {self.known_hosts}\n    StrictHostKeyChecking yes\n"
                "    BatchMode yes\n"
            )
            (d / "sshd_config").write_text(self._sshd_config(d, addr))
        self.known_hosts.write_text("".join(known))
        self.ssh_config.write_text("".join(config))

    def sshd_machines(self) -> list[tuple[str, str, Path, str]]:
        """(name, address, directory, namespace) of each sshd: the login node's, and each
        node's (`hosts: slurm` inside an allocation reaches its nodes by ssh; a job handed to
        Slurm through the login node never does)."""
        login = [(self.login_name, self.login_addr, self.login_dir, self.ctl_netns)]
        return login + [(n.name, n.addr, n.dir, n.netns) for n in self.nodes]

    def write_hosts(self, extra: Sequence[str] = ()) -> None:
        """The cluster's /etc/hosts: `extra` lines first (they win, as a real file's first
        match does). Written in place: every namespace has it bound."""
        lines = [
            "127.0.0.1 localhost",
            *extra,
            f"{self.login_addr} {self.controller} {self.login_name}",
            *(f"{n.addr} {n.name}" for n in self.nodes),
        ]
        with open(self.hosts_file, "w") as f:
            f.write("\n".join(lines) + "\n")

    def _slurm_conf(self) -> str:
        r = self.root
        nodes = "\n".join(
            f"NodeName={n.name} NodeAddr={n.addr} CPUs=2 RealMemory=1000 State=UNKNOWN"
            for n in self.nodes
        )
        return f"""\
ClusterName={self.prefix}
SlurmctldHost={self.controller}({self.login_addr})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/nodes/%n/spool
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={r}/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
KillWait=5
MinJobAge=600
SlurmdTimeout=15
InactiveLimit=0
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""

    def _sshd_config(self, d: Path, addr: str) -> str:
        path = f"{self.bin}:{Path(self.python).parent}:{SYSTEM_PATH}"
        return (
            "\n".join(
                [
                    f"ListenAddress {addr}",
                    "Port 22",
                    f"HostKey {d}/ssh_host_ed25519_key",
                    f"PidFile {d}/sshd.pid",
                    "PermitRootLogin yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",
                    f"AuthorizedKeysFile {self.root}/authorized_keys",
                    "MaxStartups 100:30:200",
                    f"SetEnv PATH={path} HOME={self.home} SLURM_CONF={self.conf}",
                    "UseDNS no",
                    "PrintMotd no",
                    "PrintLastLog no",
                ]
            )
            + "\n"
        )

    # -- network and daemons -----------------------------------------------------------------

    def _create_network(self) -> None:
        bridge = f"{self.prefix}br0"
        spaces = [(self.ctl_netns, self.login_addr)] + [(n.netns, n.addr) for n in self.nodes]
        cmds = [f"netns add {ns}" for ns, _ in spaces]
        cmds += [
            f"link add {bridge} type bridge",
            f"addr add {self.subnet}.1/24 dev {bridge}",
            f"link set {bridge} up",
        ]
        for i, (ns, _) in enumerate(spaces):
            cmds += [
                f"link add {self.prefix}-v{i} type veth peer name eth0 netns {ns}",
                f"link set {self.prefix}-v{i} master {bridge} up",
            ]
        _ip_batch(cmds)
        _ip_batch([f"link set {bridge} type bridge nf_call_iptables 0"], check=False)
        procs = [
            _ip_batch_start(
                [
                    "link set lo up",
                    f"addr add {addr}/24 dev eth0",
                    "link set eth0 up",
                    f"route add default via {self.subnet}.1",
                ],
                netns=ns,
            )
            for ns, addr in spaces
        ]
        for proc in procs:
            _ip_batch_finish(proc)

    def _in_netns(self, netns: str, hostname: str, bin_dir: Path, command: str) -> list[str]:
        etc = self.root / "etc"
        binds = [
            (etc / "hosts", "/etc/hosts"),
            (etc / "resolv.conf", "/etc/resolv.conf"),
            (bin_dir, self.bin),
        ]
        script = " && ".join(
            [
                *(f"mount --bind {a} {b}" for a, b in binds),
                f"hostname {hostname}",
                f"exec {command}",
            ]
        )
        return [
            "nsenter",
            f"--net={NETNS_DIR / netns}",
            "unshare",
            "--uts",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
        ]

    def _spawn(self, key: str, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        env = {
            "PATH": f"{self.bin}:{SYSTEM_PATH}",
            "HOME": str(self.home),
            "SLURM_CONF": str(self.conf),
        }
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env=env,
                start_new_session=True,
            )
        self._procs[key] = proc
        return proc

    def _start_munged(self) -> None:
        m = self.root / "munge"
        argv = [
            "munged",
            "-F",
            "--force",
            f"--socket={self.munge_socket}",
            f"--key-file={m}/munge.key",
            f"--pid-file={munged_pid(self.prefix)}",
            f"--log-file={m}/munged.log",
            f"--seed-file={m}/munged.seed",
        ]
        proc = self._spawn("munged", argv, m / "out.log")
        _wait(lambda: self.munge_socket.exists(), proc, "munged", m / "munged.log")

    def start_controller(self, fresh: bool = False) -> None:
        """slurmctld (again); fresh: its state forgotten, as after a lost state directory (job
        ids start again at 1)."""
        if fresh:
            shutil.rmtree(self.root / "state", ignore_errors=True)
            (self.root / "state").mkdir()
        pid = self.root / "run" / "slurmctld.pid"
        pid.unlink(missing_ok=True)
        argv = self._in_netns(
            self.ctl_netns,
            self.controller,
            self.login_dir / "bin",
            f"slurmctld -D -i -f {self.conf}",
        )
        proc = self._spawn("slurmctld", argv, self.root / "log" / "slurmctld.out")
        _wait(
            lambda: self.slurm(["sinfo", "-h"]).returncode == 0,
            proc,
            "slurmctld",
            self.root / "log" / "slurmctld.log",
        )

    def stop_controller(self) -> None:
        proc = self._procs.pop("slurmctld", None)
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            _reap(proc, 15.0)

    def _start_sshd(self, name: str, d: Path, netns: str) -> None:
        argv = self._in_netns(netns, name, d / "bin", f"{SSHD} -D -e -f {d}/sshd_config")
        proc = self._spawn(f"sshd-{name}", argv, d / "sshd.log")
        _wait(lambda: _pid_file_ready(d / "sshd.pid", proc.pid), proc, "sshd", d / "sshd.log")

    def _start_slurmd(self, node: SlurmNode) -> None:
        argv = self._in_netns(
            node.netns, node.name, node.bin_dir, f"slurmd -D -f {self.conf} -N {node.name}"
        )
        self._spawn(node.name, argv, self.root / "log" / f"{node.name}.out")

    def stop_slurmd(self, i: int) -> None:
        """Node i's slurmd killed (SIGKILL): the node falls silent to the controller."""
        proc = self._procs.pop(self.nodes[i].name, None)
        if proc is not None:
            proc.kill()
            _reap(proc)

    def start_slurmd(self, i: int) -> None:
        """Node i's slurmd again (ReturnToService=2: the node is back once it registers)."""
        self._start_slurmd(self.nodes[i])

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Until every node is idle (a job's end is still completing: not idle)."""

        def idle() -> bool:
            out = self.slurm(["sinfo", "-h", "-N", "-o", "%N %t"]).stdout.split()
            states = dict(zip(out[::2], out[1::2], strict=False))
            return all(states.get(n.name) == "idle" for n in self.nodes)

        deadline = time.monotonic() + timeout
        while not idle():
            if time.monotonic() > deadline:
                log = (self.root / "log" / "slurmctld.log").read_text(errors="replace")[-3000:]
                sinfo = self.slurm(["sinfo", "-N"]).stdout
                raise RuntimeError(f"the Slurm nodes are not idle:\n{sinfo}\n{log}")
            time.sleep(0.1)

    # -- helpers for tests -------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf), "HOME": str(self.home)}

    def slurm(self, argv: list[str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """A Slurm client command from this machine (it reaches the controller's address), run
        in the cluster's home (a job's slurm-N.out goes there, never into the checkout)."""
        return subprocess.run(
            argv, capture_output=True, text=True, env=self.env(), timeout=timeout, cwd=self.home
        )

    def squeue(self) -> list[str]:
        """The jobs Slurm holds pending or running: `ID STATE NAME` lines."""
        out = self.slurm(["squeue", "-h", "-o", "%i %T %j"]).stdout
        return [line for line in out.splitlines() if line.strip()]

    def ssh(self, command: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """`command` on the login node, as a user logs in there."""
        argv = ["ssh", "-F", str(self.ssh_config), self.login_name, command]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)

    def logins(self, where: SlurmNode | None = None) -> int:
        """How many logins the login node's sshd (or node `where`'s) has accepted so far."""
        log = ((where.dir if where else self.login_dir) / "sshd.log").read_text(errors="replace")
        return log.count("Accepted publickey")

    def put_tool(self, where: SlurmNode | None, name: str, text: str) -> Path:
        """An executable `name` first on the PATH of node `where` (None: the login node)."""
        path = (where.bin_dir if where else self.login_dir / "bin") / name
        path.write_text(text)
        path.chmod(0o755)
        return path

    def put_everywhere(self, name: str, text: str) -> None:
        for where in [None, *self.nodes]:
            self.put_tool(where, name, text)

    def remove_everywhere(self, name: str) -> None:
        for where in [self.login_dir, *(n.dir for n in self.nodes)]:
            (where / "bin" / name).unlink(missing_ok=True)

    def pids_with_env(self, key: str, value: str) -> list[int]:
        return pids_with_env(key, value)

    def write_inventory(
        self, path: Path, job: dict[str, object], *, env: dict[str, str] | None = None,
        allocation: bool = False, **slurm: object,
    ) -> Path:  # fmt: skip
        """inventory()'s, written; env: the defaults'; allocation: `hosts: slurm` (the
        nodes of the allocation ddptui runs in) instead of `slurm:`."""
        doc = self.inventory(job, **slurm)
        doc["defaults"] = {**doc["defaults"], **({"env": env} if env else {})}  # type: ignore[dict-item]
        if allocation:
            del doc["slurm"]
            doc["hosts"] = "slurm"
        path.write_text(json.dumps(doc, indent=2))  # JSON is YAML
        return path

    def inventory(self, job: dict[str, object], **slurm: object) -> dict[str, object]:
        """An inventory that hands `job` to this Slurm through its login node (2 nodes
        unless said), run in the repository (the home is shared, so is the repository)."""
        defaults = {"python": self.python, "ssh_config": str(self.ssh_config), "workdir": str(REPO)}
        return {
            "defaults": defaults,
            "slurm": {"login": self.login_name, "nodes": min(2, self.n), **slurm},
            "job": job,
        }


def tick_job(count: int | str, every: float, *args: str, **job: object) -> dict[str, object]:
    """tests/data/tick.py under torchrun, two ranks a node: `tick RANK I` lines."""
    return {"script": "tests/data/tick.py", "args": [str(count), str(every), *args],
            "nproc_per_node": 2, **job}  # fmt: skip


def check_prerequisites() -> None:
    missing = [t for t in TOOLS if shutil.which(t, path=":".join((*SBIN, SYSTEM_PATH))) is None]
    if os.geteuid() != 0:
        missing.append("root privileges")
    if missing:
        raise RuntimeError(
            f"the Slurm test cluster needs {', '.join(missing)}: apt-get "
            f"install -y {APT} (then disable their systemd units)"
        )


def teardown_all(prefix: str) -> None:
    """Every namespace and link of this prefix, and whatever runs in them; munged by its pid
    file (it runs in the root namespace)."""
    names = sorted(
        n
        for n in (os.listdir(NETNS_DIR) if NETNS_DIR.is_dir() else ())
        if _ours(n, prefix, "-n", f"{prefix}-c0")
    )
    ids = _netns_ids(names)
    if ids:
        _kill_and_wait_netns(ids)
    links = [n for n in os.listdir("/sys/class/net") if _ours(n, prefix, "-v", f"{prefix}br0")]
    cmds = [f"link del {n}" for n in links] + [f"netns del {n}" for n in names]
    if cmds:
        _ip_batch(cmds, check=False)
    with suppress(OSError, ValueError):  # munged, in the root namespace: by its pid file
        pid = int(munged_pid(prefix).read_text())
        if b"munged" in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, signal.SIGKILL)
    munged_pid(prefix).unlink(missing_ok=True)


def _ours(name: str, prefix: str, numbered: str, single: str) -> bool:
    """`<prefix><numbered><digits>` or `single`: another prefix's are never ours."""
    rest = name.removeprefix(prefix + numbered)
    return name == single or (rest != name and rest.isdigit())


def munged_pid(prefix: str) -> Path:
    return Path("/run/lock") / f"{prefix}-munged.pid"


def _wait(
    ready: object, proc: subprocess.Popen[bytes], what: str, log: Path, timeout: float = 30.0
) -> None:
    deadline = time.monotonic() + timeout
    assert callable(ready)
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            said = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise RuntimeError(f"{what} did not start ({shlex.join(map(str, proc.args))}):\n{said}")
        time.sleep(0.05)
