"""Test hosts: real OpenSSH servers in Linux network namespaces on this one machine.

Each "host" i is a network namespace ``ddpt-h{i}`` with address ``10.213.7.{11+i}/24`` on a
veth pair plugged into the bridge ``ddptbr0`` (``10.213.7.1/24``, in the root namespace), and a
real ``/usr/sbin/sshd -D -e`` started under ``unshare --uts`` so ``hostname`` says ``node{i}``.
Hosts share the filesystem and the pid namespace (one venv serves all, ``/proc`` sees all).

Choices worth knowing:

- ``SetEnv PATH=...`` in sshd_config reaches commands run over ssh (OpenSSH 9.2; SetEnv exists
  since 7.8 and overrides sshd's default PATH). With ``UsePAM no`` nothing else rewrites it. The
  PATH is ``<host bin>:<venv bin>:`` + root's usual Debian PATH (sbin included, so hosts find
  ``ip``), letting each host carry its own tools, e.g. a fake ``nvidia-smi``.
- Every host gets its own ed25519 host key, generated in parallel (a few ms each), so host-key
  checking is real: ``known_hosts`` lists each key under the host's IP and alias.
- ``MaxStartups 100:30:200`` (``max_startups=``; ``restart_sshd(i, max_startups=...)`` for one
  host): with the default 10:30:100, 60 simultaneous connections to one sshd lost 20
  ("kex_exchange_identification: Connection closed by remote host"), which looks like flaky
  networking when a launcher opens several connections per host at once.
- Bridge netfilter is switched off on our bridge only (``nf_call_iptables 0``), so firewall
  rules of the machine (e.g. Docker's FORWARD DROP) cannot eat host-to-host traffic.
- ``unused_addr`` (10.213.7.250) is in the subnet but nobody answers ARP: connecting to it fails
  with "No route to host" after about 3 s, the way an unplugged machine does.
- Each host's HOME is its own ``hosts/node{i}/home`` (also via SetEnv; the working directory
  stays /root). Otherwise bash, which sources ~/.bashrc for ssh commands, runs this machine's
  /root/.bashrc (pyenv init: ~125 ms CPU per command, and pyenv shims ahead of our PATH). A test
  may write a host's ``home/.bashrc`` to model a real one.
- Each namespace gets its own ``/etc/netns/<ns>/resolv.conf`` pointing at a nameserver that
  refuses at once: the machine's own is out of reach there, and reverse lookups (c10d's TCPStore
  does one per connection) would each wait 10 s.
- Only one cluster per prefix at a time: ``up()`` holds an flock on
  ``/run/lock/<prefix>-testhosts.lock`` (a concurrent pytest session waits instead of tearing
  down the running one), then removes leftovers of a crashed earlier run with the same prefix.
  A cluster started by ``scripts/testhosts.py up`` counts as a leftover for the next ``up``.
  A second cluster alongside needs another prefix *and* another subnet.
- ``containers=True`` (or ``enable_containers()`` on a running cluster) gives every host podman
  (tests/support/containerhosts.py): its own configuration and storage, cgroups mounted for
  it, and a test image (``cluster.image``) holding this venv's interpreter;
  ``container_defaults()`` is an inventory's ``container:`` for them.
- ``bastion=True`` puts the hosts on a private network this machine cannot route to: the
  subnet's upper half (``.128/25``, hosts from ``.139``) on a bridge with no address here, and a
  bastion namespace (``<prefix>-b0``, sshd at ``.5`` on the lower half, the bridge ``.1``) with
  a leg on each network. ``ssh_config`` reaches the hosts by alias through ``ProxyJump
  bastion``; their ``HostName`` is the alias itself, which only the bastion resolves (its own
  ``/etc/hosts``), so no address of theirs is known here. ``bastion_logins()`` counts the
  logins its sshd accepted.

pdsh against the cluster (its ssh module runs ``ssh -oConnectTimeout=10 <APPEND> -2 -a -x
node0 CMD``; ``TestCluster.pdsh_env()`` returns this environment)::

    PDSH_RCMD_TYPE=ssh PDSH_SSH_ARGS_APPEND="-F <root>/ssh_config" pdsh -w node[0-3] hostname

Standard library only; needs root, ``ip`` (iproute2), ``unshare``, ``sshd``, ``ssh`` and
``ssh-keygen``.
"""

from __future__ import annotations

import fcntl
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import TracebackType

import containerhosts

REPO = Path(__file__).resolve().parents[2]
SUBNET = "10.213.7"  # first three octets of the /24; the bridge is .1
FIRST_HOST_OCTET = 11
UNUSED_OCTET = 250
MAX_HOSTS = 200  # .11 .. .210, well below the unused address
BASTION_OCTET = 5  # bastion=True: its address on each half of the subnet (.5, .133)
PRIVATE_OFFSET = 128  # bastion=True: the hosts' half of the subnet, .128/25
MAX_PRIVATE_HOSTS = 100
DEFAULT_PREFIX = "ddpt"
SSHD = "/usr/sbin/sshd"
NETNS_DIR = Path("/run/netns")
ETC_NETNS = Path("/etc/netns")
# The machine's nameserver is out of reach from the namespaces: each reverse lookup (c10d's
# TCPStore does one per connection) would wait 10 s. Answer "no" at once instead: torchrun
# runs measured 96 s before, 18 s after.
RESOLV_CONF = "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"
LOCK_DIR = Path("/run/lock")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
REQUIRED_TOOLS = ("ip", "unshare", "ssh", "ssh-keygen")


@dataclass
class TestHost:
    """One test host: a network namespace running its own sshd."""

    __test__ = False  # not a pytest test class

    index: int
    name: str
    addr: str
    netns: str
    dir: Path
    bin_dir: Path
    pid: int | None = None

    @property
    def sshd_config(self) -> Path:
        return self.dir / "sshd_config"

    @property
    def host_key(self) -> Path:
        return self.dir / "ssh_host_ed25519_key"

    @property
    def home(self) -> Path:
        return self.dir / "home"

    @property
    def pid_file(self) -> Path:
        return self.dir / "sshd.pid"

    @property
    def log_file(self) -> Path:
        return self.dir / "sshd.log"


class TestCluster:
    """``n`` ssh-reachable hosts under ``root``; a context manager that tears itself down."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        n: int = 4,
        *,
        root: Path | str,
        tools: dict[int, dict[str, str]] | None = None,
        prefix: str = DEFAULT_PREFIX,
        subnet: str = SUBNET,
        lock_timeout: float = 900.0,
        bastion: bool = False,
        max_startups: str = "100:30:200",
        containers: bool = False,
        lease_dirs: bool = False,
    ) -> None:
        if not 1 <= n <= (MAX_PRIVATE_HOSTS if bastion else MAX_HOSTS):
            raise ValueError(f"n must be in 1..{MAX_HOSTS}, got {n}")
        self.n = n
        self.root = Path(root).resolve()
        self.tools = tools or {}
        self.prefix = prefix
        self.subnet = subnet
        self.bridge_addr = f"{subnet}.1"
        self.lock_timeout = lock_timeout
        self.max_startups = max_startups  # sshd's MaxStartups on every host (default: lenient)
        self.containers = containers  # podman on every host
        # each host's GPU leases in a directory of its own (DDPTUI_LEASE_DIR), as on real hosts
        # (else they share this machine's /dev/shm/ddptui: one lock and one queue for all)
        self.lease_dirs = lease_dirs
        self.image: str | None = None  # containers=True: the test image's name
        self.bridge = bridge_name(prefix)
        self.identity_file = self.root / "id_ed25519"
        self.known_hosts = self.root / "known_hosts"
        self.ssh_config = self.root / "ssh_config"
        self.authorized_keys = self.root / "authorized_keys"
        self.unused_addr = f"{subnet}.{UNUSED_OCTET}"
        self.python = sys.executable
        self.mask = 25 if bastion else 24
        self.host_offset = PRIVATE_OFFSET if bastion else 0
        self.hosts = [self._make_host(i) for i in range(n)]
        self.bastion: TestHost | None = None
        if bastion:
            host_dir = self.root / "hosts" / "bastion"
            addr = f"{subnet}.{BASTION_OCTET}"
            self.bastion = TestHost(-1, "bastion", addr, f"{prefix}-b0", host_dir, host_dir / "bin")
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._lock_fd: int | None = None
        self.colleague_key: Path | None = None  # add_colleague(): a second user's own key
        # ... and its homes and tools, out of pytest's private temporary directories
        self.colleague_root: Path | None = None

    def _make_host(self, i: int) -> TestHost:
        host_dir = self.root / "hosts" / f"node{i}"
        return TestHost(
            index=i,
            name=f"node{i}",
            addr=f"{self.subnet}.{FIRST_HOST_OCTET + i + self.host_offset}",
            netns=f"{self.prefix}-h{i}",
            dir=host_dir,
            bin_dir=host_dir / "bin",
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> TestCluster:
        return self.up()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.down()

    @property
    def machines(self) -> list[TestHost]:
        """Every namespace with an sshd: the hosts, and the bastion if there is one."""
        return self.hosts + ([self.bastion] if self.bastion else [])

    def bastion_logins(self) -> int:
        """How many logins the bastion's sshd has accepted so far."""
        assert self.bastion is not None
        return self.bastion.log_file.read_text(errors="replace").count("Accepted publickey")

    def up(self) -> TestCluster:
        """Build the network, keys and configs, start every sshd; wait until all listen."""
        check_prerequisites(containers=self.containers)
        self._lock_fd = acquire_lock(self.prefix, self.lock_timeout)
        try:
            teardown_all(self.prefix)
            self._write_files()
            if self.containers:
                self._prepare_containers()
            self._create_network()
            for host in self.machines:
                self._spawn_sshd(host)
            for host in self.machines:
                self._wait_sshd(host)
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        """Kill everything in our namespaces, delete them, the veths and the bridge."""
        if self._lock_fd is None:  # not up (or already down): the prefix may be someone else's
            return
        try:
            teardown_all(self.prefix)
            for proc in self._procs.values():
                _reap(proc)
        finally:
            self._procs.clear()
            for host in self.machines:
                host.pid = None
            if self.colleague_root is not None:
                shutil.rmtree(self.colleague_root, ignore_errors=True)
                self.colleague_root = self.colleague_key = None
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    # -- files -------------------------------------------------------------------------------

    def _write_files(self) -> None:
        shutil.rmtree(self.root / "hosts", ignore_errors=True)  # a previous run's
        for host in self.machines:
            host.bin_dir.mkdir(parents=True, exist_ok=True)
            host.home.mkdir()
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privsep chroot
        for host in self.machines:  # `ip netns exec` bind-mounts these over /etc/resolv.conf
            etc = ETC_NETNS / host.netns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "resolv.conf").write_text(RESOLV_CONF)
        if self.bastion:  # the private hosts' names resolve on the bastion alone
            names = "".join(f"{h.addr} {h.name}\n" for h in self.hosts)
            (ETC_NETNS / self.bastion.netns / "hosts").write_text(f"127.0.0.1 localhost\n{names}")
        self.identity_file.unlink(missing_ok=True)
        keygens = [_keygen(self.identity_file, "ddptui-testhosts-client")]
        keygens += [_keygen(h.host_key, h.name) for h in self.machines]
        for proc in keygens:
            if proc.wait() != 0:
                raise RuntimeError(f"ssh-keygen failed: {proc.args!r}")
        self.authorized_keys.write_text(self.identity_file.with_suffix(".pub").read_text())
        self.known_hosts.write_text("".join(self._known_hosts_line(h) for h in self.machines))
        self.ssh_config.write_text(self._client_config())
        for host in self.machines:
            host.sshd_config.write_text(self._sshd_config(host))
        for i, files in self.tools.items():
            for name, text in files.items():
                self.put_tool(i, name, text)

    def _known_hosts_line(self, host: TestHost) -> str:
        keytype, key = host.host_key.with_suffix(".pub").read_text().split()[:2]
        return f"{host.addr},{host.name} {keytype} {key}\n"

    def _client_config(self) -> str:
        common = [
            "User root",
            "Port 22",
            f"IdentityFile {self.identity_file}",
            "IdentitiesOnly yes",
            f"UserKnownHostsFile {self.known_hosts}",
            "StrictHostKeyChecking yes",
            "BatchMode yes",
            "ConnectTimeout 10",
        ]
        if self.bastion:  # by alias through the bastion; the alias resolves there only
            jump = [f"ProxyJump {self.bastion.name}"]
            blocks = [[f"Host {h.name}", f"HostName {h.name}", *jump, *common] for h in self.hosts]
            blocks.append([f"Host {self.bastion.name}", f"HostName {self.bastion.addr}", *common])
            return "\n".join("\n    ".join(block) + "\n" for block in blocks)
        blocks = [[f"Host {h.name}", f"HostName {h.addr}", *common] for h in self.hosts]
        blocks.append([f"Host {self.subnet}.*", *common])  # raw addresses work too
        return "\n".join("\n    ".join(block) + "\n" for block in blocks)

    def _sshd_config(self, host: TestHost) -> str:
        lines = [
            f"ListenAddress {host.addr}",
            "Port 22",
            f"HostKey {host.host_key}",
            f"PidFile {host.pid_file}",
            "PermitRootLogin yes",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            f"AuthorizedKeysFile {self.authorized_keys}",
            f"MaxStartups {self.max_startups}",
            "MaxSessions 20",
            f"SetEnv PATH={host.bin_dir}:{Path(self.python).parent}:{SYSTEM_PATH} HOME={host.home}"
            + "".join(f" {k}={v}" for k, v in self._host_env(host).items()),
            "AcceptEnv LANG LC_*",
            "UseDNS no",
            "PrintMotd no",
            "PrintLastLog no",
            "Subsystem sftp internal-sftp",
        ]
        if sshd_version() >= (9, 8):
            # Newer sshd blocks a source address after failed auths; every test comes from .1.
            lines.append("PerSourcePenalties no")
        if self.colleague_key is not None:  # a second user, with a key and a home of its own
            path = f"{self._colleague_dir(host) / 'bin'}:{Path(self.python).parent}:{SYSTEM_PATH}"
            lines += [
                f"Match User {COLLEAGUE}",
                f"    AuthorizedKeysFile {self._colleague_root() / 'authorized_keys'}",
                f"    SetEnv PATH={path} HOME={self._colleague_dir(host)}",
            ]
        return "\n".join(lines) + "\n"

    def add_colleague(self) -> None:
        """A second real user on every host (COLLEAGUE: a teammate sharing the GPUs): logged
        into with a key of its own; a home and the host's tools (put_tool) of its own on each
        host, outside pytest's private directories (a new session chmods them 0700, taking an
        ACL's mask away); this venv and repository reachable (an ACL where a parent directory
        is private). Idempotent."""
        if self.colleague_key is not None:
            return
        user = colleague()
        key = self.root / "colleague_ed25519"
        if _keygen(key, COLLEAGUE).wait() != 0:
            raise RuntimeError("ssh-keygen failed for the colleague's key")
        self.colleague_root = Path(tempfile.mkdtemp(prefix=f"ddptui-{self.prefix}-colleague-"))
        self.colleague_root.chmod(0o755)
        # sshd reads it as the user: where the user can (not pytest's 0700 directories)
        shutil.copyfile(key.with_suffix(".pub"), self.colleague_root / "authorized_keys")
        self.colleague_key = key
        for host in self.hosts:
            home = self._colleague_dir(host)
            (home / "bin").mkdir(parents=True)
            for path in [home, home / "bin"]:
                os.chown(path, user.pw_uid, user.pw_gid)
            for tool in host.bin_dir.iterdir():
                self._colleague_tool(host, tool.name, tool.read_text())
        reach(user, [os.path.realpath(self.python), str(REPO)])
        for host in self.hosts:
            self.restart_sshd(host.index)

    def _colleague_root(self) -> Path:
        assert self.colleague_root is not None, "add_colleague() first"
        return self.colleague_root

    def _colleague_dir(self, host: TestHost) -> Path:
        return self._colleague_root() / host.name

    def _colleague_tool(self, host: TestHost, name: str, text: str) -> None:
        """The host's tool for the colleague too: a shell script knows its host's own copy's
        path as `self` (the nvidia-smi stand-in's GPUs are the host's, for either user)."""
        if text.startswith("#!/bin/sh\n"):
            text = text.replace("\n", f"\nself={shlex.quote(str(host.bin_dir / name))}\n", 1)
        path = self._colleague_dir(host) / "bin" / name
        path.write_text(text)
        path.chmod(0o755)

    def shared_dir(self, name: str) -> Path:
        """A directory every user of the hosts may write to (mode 1777), beside the
        colleague's homes (add_colleague())."""
        path = self._colleague_root() / name
        path.mkdir()
        path.chmod(0o1777)
        return path

    def colleague_defaults(self) -> dict[str, str | int]:
        """An inventory's `defaults:` that logs in as the colleague (add_colleague())."""
        assert self.colleague_key is not None, "add_colleague() first"
        return {**self.inventory_defaults(), "user": COLLEAGUE,
                "identity_file": str(self.colleague_key)}  # fmt: skip

    # -- podman on the hosts (containerhosts.py) ---------------------------------------------

    def enable_containers(self) -> None:
        """Podman on every host from now on (each sshd restarts; sessions live on), as if the
        cluster had been made with containers=True."""
        self.containers = True
        self._prepare_containers()
        for host in self.hosts:
            self.restart_sshd(host.index)

    def _prepare_containers(self) -> None:
        self.image = containerhosts.ensure_image(self.python)
        for host in self.machines:
            containerhosts.write_host_files(host.dir, self.prefix)

    def _host_env(self, host: TestHost) -> dict[str, str]:
        env = containerhosts.host_env(host.dir) if self.containers else {}
        if self.lease_dirs:
            env["DDPTUI_LEASE_DIR"] = str(host.dir / "leases")
        return env

    def container_defaults(self) -> dict[str, object]:
        """An inventory's `container:` for these hosts (containers=True): podman, the test
        image, this venv's python inside (mounted: the image holds its base interpreter), and
        no memlock limit (`--ulimit memlock=-1` fails here)."""
        assert self.image, "TestCluster(containers=True) holds the image"
        venv = str(Path(self.python).parent.parent)
        return {"runtime": "podman", "image": self.image, "python": self.python,
                "mounts": [venv], "ulimits": {}}  # fmt: skip

    @contextmanager
    def login_shell(self, text: str, *hosts: int) -> Iterator[None]:
        """Each of these hosts' login shells runs `text` first (its ~/.bashrc), as a real
        one's conda init, exports or greetings do; gone again afterwards."""
        rcs = [self.hosts[i].home / ".bashrc" for i in hosts]
        for rc in rcs:
            rc.write_text(text)
        try:
            yield
        finally:
            for rc in rcs:
                rc.unlink(missing_ok=True)

    def remove_tool(self, i: int, name: str) -> None:
        """Host ``i``'s tool gone again (the colleague's copy too)."""
        (self.hosts[i].bin_dir / name).unlink(missing_ok=True)
        if self.colleague_root is not None:
            (self._colleague_dir(self.hosts[i]) / "bin" / name).unlink(missing_ok=True)

    def put_tool(self, i: int, name: str, text: str) -> Path:
        """Write an executable ``name`` into host ``i``'s bin dir (first on its ssh PATH)."""
        if "/" in name:
            raise ValueError(f"tool name must be a plain file name: {name!r}")
        path = self.hosts[i].bin_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755)
        if self.colleague_root is not None:
            self._colleague_tool(self.hosts[i], name, text)
        return path

    # -- network -----------------------------------------------------------------------------

    def _create_network(self) -> None:
        cmds = [f"netns add {h.netns}" for h in self.machines]
        cmds += [
            f"link add {self.bridge} type bridge",
            f"addr add {self.bridge_addr}/{self.mask} dev {self.bridge}",
            f"link set {self.bridge} up",
        ]
        hosts_bridge = self.bridge
        if self.bastion:  # the hosts' bridge has no address here: no route from this machine
            hosts_bridge = private_bridge_name(self.prefix)
            cmds += [f"link add {hosts_bridge} type bridge", f"link set {hosts_bridge} up"]
            for leg, bridge in enumerate((self.bridge, hosts_bridge)):
                veth = f"{self.prefix}-w{leg}"
                cmds.append(
                    f"link add {veth} type veth peer name eth{leg} netns {self.bastion.netns}"
                )
                cmds.append(f"link set {veth} master {bridge} up")
        for h in self.hosts:
            veth = veth_name(self.prefix, h.index)
            cmds.append(f"link add {veth} type veth peer name eth0 netns {h.netns}")
            cmds.append(f"link set {veth} master {hosts_bridge} up")
        _ip_batch(cmds)
        # Without br_netfilter loaded the kernel may refuse this; then there is nothing to bypass.
        _ip_batch(
            [
                f"link set {b} type bridge nf_call_iptables 0 nf_call_arptables 0"
                for b in {self.bridge, hosts_bridge}
            ],
            check=False,
        )
        procs = [_ip_batch_start(self._netns_cmds(h), netns=h.netns) for h in self.machines]
        for proc in procs:
            _ip_batch_finish(proc)

    def _netns_cmds(self, host: TestHost) -> list[str]:
        private_leg = f"{self.subnet}.{PRIVATE_OFFSET + BASTION_OCTET}"  # bastion=True
        gateway = self.bridge_addr
        if self.bastion and host is not self.bastion:
            gateway = private_leg  # the bastion, which forwards nothing
        cmds = [
            "link set lo up",
            f"addr add {host.addr}/{self.mask} dev eth0",
            "link set eth0 up",
            f"route add default via {gateway}",
        ]
        if host is self.bastion:
            cmds += [f"addr add {private_leg}/{self.mask} dev eth1", "link set eth1 up"]
        return cmds

    # -- sshd --------------------------------------------------------------------------------

    def _spawn_sshd(self, host: TestHost) -> None:
        host.pid_file.unlink(missing_ok=True)
        script = f"hostname {host.name} && exec {SSHD} -D -e -f {host.sshd_config}"
        if self.containers:  # its own /dev/shm, and the cgroups ip netns exec took away
            script = f"{containerhosts.host_mounts()} && {script}"
        # ip netns exec and unshare (no --fork) both exec, so the Popen pid is sshd's pid.
        with open(host.log_file, "ab") as log:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", host.netns, "unshare", "--uts", "sh", "-c", script],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # a Ctrl-C in the terminal must not reach the hosts
            )
        self._procs[host.index] = proc
        host.pid = proc.pid

    def _wait_sshd(self, host: TestHost, timeout: float = 15.0) -> None:
        # sshd writes its pid file only after it has bound its listening socket.
        proc = self._procs[host.index]
        deadline = time.monotonic() + timeout
        while not _pid_file_ready(host.pid_file, proc.pid):
            if proc.poll() is not None or time.monotonic() > deadline:
                log = host.log_file.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"sshd on {host.name} ({host.netns}) did not start:\n{log}")
            time.sleep(0.02)

    def stop_sshd(self, i: int) -> None:
        """Stop host ``i``'s listening sshd (new connections are refused; sessions live on)."""
        host = self.hosts[i]
        proc = self._procs.pop(i, None)
        if proc is not None:
            proc.terminate()
            _reap(proc)
        elif host.pid is not None:
            _kill_and_wait([host.pid], signal.SIGTERM)
        host.pid_file.unlink(missing_ok=True)
        host.pid = None

    def restart_sshd(self, i: int, *, max_startups: str | None = None) -> None:
        """Restart host ``i``'s sshd, with its own MaxStartups if given (e.g. sshd's default
        ``10:30:100``, which drops logins beyond 10 unauthenticated at once)."""
        self.stop_sshd(i)
        config = self._sshd_config(self.hosts[i])
        if max_startups is not None:
            config = config.replace(
                f"MaxStartups {self.max_startups}", f"MaxStartups {max_startups}"
            )
        self.hosts[i].sshd_config.write_text(config)
        self.start_sshd(i)

    def start_sshd(self, i: int) -> None:
        """(Re)start host ``i``'s sshd and wait until it listens."""
        if self.hosts[i].pid is not None:
            return
        self._spawn_sshd(self.hosts[i])
        self._wait_sshd(self.hosts[i])

    # -- helpers for tests -------------------------------------------------------------------

    def ssh(
        self, i: int, command: str, timeout: float = 30.0, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``command`` on host ``i`` with the system ssh client and this cluster's config."""
        argv = ["ssh", "-F", str(self.ssh_config), self.hosts[i].name, command]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input)

    def netns_exec(
        self, i: int, argv: list[str], timeout: float = 30.0
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` directly in host ``i``'s network namespace (no ssh, no hostname)."""
        full = ["ip", "netns", "exec", self.hosts[i].netns, *argv]
        return subprocess.run(full, capture_output=True, text=True, timeout=timeout)

    def pids_with_env(self, key: str, value: str) -> list[int]:
        """Pids of live processes (any namespace) whose environment holds ``key=value``."""
        return pids_with_env(key, value)

    def inventory_defaults(self) -> dict[str, str | int]:
        """What an inventory's ``defaults:`` needs to reach these hosts."""
        return {
            "user": "root",
            "port": 22,
            "identity_file": str(self.identity_file),
            "known_hosts": str(self.known_hosts),
            "python": self.python,
        }

    def write_inventory(
        self,
        path: Path,
        job: dict[str, object],
        hosts: Sequence[int | dict[str, object]] = (0, 1, 2),
        **defaults: object,
    ) -> Path:
        """An inventory.yaml reaching these hosts: ints are host indexes, dicts raw entries.

        The job runs in the repository (so examples/ resolve) unless defaults say otherwise.
        """
        # Behind a bastion the hosts are known here by their aliases alone (ssh_config).
        where = "name" if self.bastion else "addr"
        entries = [
            {"host": getattr(self.hosts[h], where), "name": self.hosts[h].name}
            if isinstance(h, int)
            else h
            for h in hosts
        ]
        merged = {**self.inventory_defaults(), "workdir": str(REPO), **defaults}
        doc = {"defaults": merged, "hosts": entries, "job": job}
        path.write_text(json.dumps(doc, indent=2))  # JSON is YAML
        return path

    def pdsh_env(self) -> dict[str, str]:
        """Environment that makes pdsh use ssh with this cluster's config."""
        return {
            **os.environ,
            "PDSH_RCMD_TYPE": "ssh",
            "PDSH_SSH_ARGS_APPEND": f"-F {self.ssh_config}",
        }


# -- module-level helpers --------------------------------------------------------------------


def bridge_name(prefix: str) -> str:
    return f"{prefix}br0"


def private_bridge_name(prefix: str) -> str:
    return f"{prefix}br1"


def veth_name(prefix: str, i: int) -> str:
    return f"{prefix}-v{i}"  # root side; the namespace side is always eth0


def check_prerequisites(containers: bool = False) -> None:
    """Raise RuntimeError naming whatever this machine lacks to run test hosts."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root privileges (network namespaces need CAP_NET_ADMIN)")
    search = f"{os.environ.get('PATH', '')}:{SYSTEM_PATH}"
    missing += [f"`{t}`" for t in REQUIRED_TOOLS if shutil.which(t, path=search) is None]
    if not os.access(SSHD, os.X_OK):
        missing.append(f"`{SSHD}`")
    if containers:
        missing += containerhosts.missing()
    if missing:
        hint = "apt-get install -y openssh-server openssh-client iproute2"
        hint += f" {containerhosts.APT}" if containers else ""
        raise RuntimeError(f"ssh test hosts need {', '.join(missing)}; run as root after `{hint}`")


@cache
def sshd_version() -> tuple[int, int]:
    # sshd has no version flag before 9.8 but prints its version with the usage text.
    out = subprocess.run([SSHD, "-V"], capture_output=True, text=True).stderr
    match = re.search(r"OpenSSH_(\d+)\.(\d+)", out)
    return (int(match[1]), int(match[2])) if match else (0, 0)


@contextmanager
def cluster_lock(prefix: str = DEFAULT_PREFIX, timeout: float = 900.0) -> Iterator[None]:
    """Hold the cluster lock of ``prefix`` (for tools that tear down outside a TestCluster)."""
    fd = acquire_lock(prefix, timeout)
    try:
        yield
    finally:
        os.close(fd)


def acquire_lock(prefix: str, timeout: float) -> int:
    """flock the prefix's lock file, waiting up to ``timeout`` s; returns the fd to close."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    path = LOCK_DIR / f"{prefix}-testhosts.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # close-on-exec: sshd can't inherit it
    deadline = time.monotonic() + timeout
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            holder = path.read_text().strip() or "?"
            if time.monotonic() > deadline:
                os.close(fd)
                raise RuntimeError(f"test hosts {prefix!r} still in use by pid {holder}") from None
            if not told:
                print(f"testhosts: waiting for pid {holder} to release {path}", file=sys.stderr)
                told = True
            time.sleep(0.2)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def teardown_all(prefix: str = DEFAULT_PREFIX) -> None:
    """Remove every namespace, veth and bridge named with ``prefix`` and all their processes.

    Works from names alone, so it also cleans what a crashed run left; cheap when nothing is left.
    """
    namespaces = _our_netns(prefix)
    ns_ids = _netns_ids(namespaces)
    if ns_ids:
        _kill_and_wait_netns(ns_ids)
    links = _our_links(prefix)
    cmds = [f"link del {name}" for name in links]  # deleting one end removes the veth pair
    cmds += [f"netns del {name}" for name in namespaces]
    if cmds:
        _ip_batch(cmds, check=False)
    for etc in [*ETC_NETNS.glob(f"{prefix}-h*"), *ETC_NETNS.glob(f"{prefix}-b*")]:
        shutil.rmtree(etc, ignore_errors=True)
    left = _our_netns(prefix) + _our_links(prefix)
    if left:
        raise RuntimeError(f"teardown left {left} behind")


def pids_with_env(key: str, value: str) -> list[int]:
    """Scan /proc/*/environ for processes whose environment contains ``key=value``."""
    needle = f"{key}={value}".encode()
    found = []
    for pid in _all_pids():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:  # gone, or a kernel thread
            continue
        if needle in environ.split(b"\0"):
            found.append(pid)
    return found


def _our_netns(prefix: str) -> list[str]:
    pattern = re.compile(rf"{re.escape(prefix)}-[hb]\d+")
    names = os.listdir(NETNS_DIR) if NETNS_DIR.is_dir() else []
    return sorted(n for n in names if pattern.fullmatch(n))


def _our_links(prefix: str) -> list[str]:
    pattern = re.compile(rf"{re.escape(prefix)}-[vw]\d+|{re.escape(prefix)}br[01]")
    return sorted(n for n in os.listdir("/sys/class/net") if pattern.fullmatch(n))


def _netns_ids(names: list[str]) -> set[tuple[int, int]]:
    """(st_dev, st_ino) of each named namespace, what /proc/PID/ns/net resolves to."""
    ids = set()
    for name in names:
        try:
            st = os.stat(NETNS_DIR / name)
        except OSError:
            continue
        ids.add((st.st_dev, st.st_ino))
    return ids


def _all_pids() -> list[int]:
    return [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]


def _pids_in_netns(ns_ids: set[tuple[int, int]]) -> list[int]:
    pids = []
    for pid in _all_pids():
        try:
            st = os.stat(f"/proc/{pid}/ns/net")
        except OSError:  # gone, or a zombie (which has left its namespaces already)
            continue
        if (st.st_dev, st.st_ino) in ns_ids:
            pids.append(pid)
    return pids


def _kill_and_wait_netns(ns_ids: set[tuple[int, int]], timeout: float = 10.0) -> None:
    # Repeat: a dying sshd session may still fork; SIGKILL leaves nothing a chance to linger.
    deadline = time.monotonic() + timeout
    while pids := _pids_in_netns(ns_ids):
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {pids} survive SIGKILL in the test namespaces")
        for pid in pids:
            _signal(pid, signal.SIGKILL)
        time.sleep(0.02)


def _kill_and_wait(pids: list[int], sig: signal.Signals, timeout: float = 5.0) -> None:
    for pid in pids:
        _signal(pid, sig)
    deadline = time.monotonic() + timeout
    while any(_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        os.stat(f"/proc/{pid}/ns/net")  # fails for a zombie too
    except OSError:
        return False
    return True


def _signal(pid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, sig)


def _reap(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _pid_file_ready(path: Path, pid: int) -> bool:
    try:
        return path.read_text().strip() == str(pid)
    except OSError:
        return False


def _keygen(path: Path, comment: str) -> subprocess.Popen[bytes]:
    path.unlink(missing_ok=True)
    path.with_suffix(".pub").unlink(missing_ok=True)
    argv = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL)


def _ip_batch_start(cmds: list[str], netns: str | None = None) -> subprocess.Popen[str]:
    # -force: keep going past a failed line (teardown of half-built leftovers).
    argv = ["ip", *(["-n", netns] if netns else []), "-force", "-batch", "-"]
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None
    proc.stdin.write("\n".join(cmds) + "\n")
    proc.stdin.close()
    return proc


def _ip_batch_finish(proc: subprocess.Popen[str], check: bool = True) -> None:
    assert proc.stderr is not None
    err = proc.stderr.read()
    proc.stderr.close()
    proc.wait()
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip -batch failed: {err.strip()}")


def _ip_batch(cmds: list[str], netns: str | None = None, check: bool = True) -> None:
    _ip_batch_finish(_ip_batch_start(cmds, netns), check)


# -- a second real user: a teammate sharing the hosts (the GPU leases' tests) --------------------

COLLEAGUE = "ddptui-colleague"


def colleague() -> pwd.struct_passwd:
    """A second user with a shell (its key and homes are a cluster's: add_colleague), made once
    and kept; its password field `*`, not `!`: sshd without PAM takes `!` for a locked account."""
    with suppress(KeyError):
        return pwd.getpwnam(COLLEAGUE)
    argv = ["useradd", "--system", "--no-create-home", "--shell", "/bin/sh", "-p", "*", COLLEAGUE]
    subprocess.run(argv, capture_output=True)  # "exists": another session made it meanwhile
    return pwd.getpwnam(COLLEAGUE)


def reach(user: pwd.struct_passwd, paths: Sequence[str]) -> None:
    """Each path's private parents (no `x` for others: /root holding a pyenv python, pytest's
    0700 temporary directories) made traversable for this user alone, by an ACL (setfacl)."""
    dirs: dict[str, None] = {}
    for path in paths:
        p = Path(path)
        for parent in [*reversed(p.parents), p] if p.is_dir() else reversed(p.parents):
            dirs[str(parent)] = None
    private = [d for d in dirs if not os.stat(d).st_mode & 0o001]
    if private:
        argv = ["setfacl", "-m", f"u:{user.pw_name}:x", *private]
        subprocess.run(argv, check=True, capture_output=True)


# -- attackers: a second local user, another host's traffic (the `security` tests) ------------

NEIGHBOUR = "ddptui-neighbour"


def neighbour() -> pwd.struct_passwd:
    """An unprivileged local user, made once and kept (the hosts share this machine's users)."""
    with suppress(KeyError):
        return pwd.getpwnam(NEIGHBOUR)
    argv = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", NEIGHBOUR]
    subprocess.run(argv, capture_output=True)  # "exists": another session made it meanwhile
    return pwd.getpwnam(NEIGHBOUR)


def as_neighbour(
    cluster: TestCluster, i: int, argv: list[str], timeout: float = 30.0
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as the neighbour, in host ``i``'s network namespace."""
    user = neighbour()
    drop = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"]
    return cluster.netns_exec(i, [*drop, "--", *argv], timeout)


def netns_popen(cluster: TestCluster, i: int, argv: list[str]) -> subprocess.Popen[str]:
    """Start ``argv`` in host ``i``'s network namespace (traffic from that host), stdout piped."""
    full = ["ip", "netns", "exec", cluster.hosts[i].netns, *argv]
    return subprocess.Popen(full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


# -- a slow link (tc tbf) --------------------------------------------------------------------

THROTTLE = ("burst", "32kbit", "latency", "400ms")  # a token bucket's depth and queue


def throttle(cluster: TestCluster, i: int, rate: str = "20mbit") -> None:
    """Slow host ``i``'s link both ways, as a NIC that negotiated a lower speed is: a token
    bucket (tc tbf) on both ends of its veth (measured: 2.7 MB/s against 1.5 GB/s)."""
    for netns, dev in _link_ends(cluster, i):
        _tc(netns, ["qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, *THROTTLE])


def unthrottle(cluster: TestCluster, i: int) -> None:
    """Host ``i``'s link at veth speed again (nothing to undo is fine)."""
    for netns, dev in _link_ends(cluster, i):
        _tc(netns, ["qdisc", "del", "dev", dev, "root"], check=False)


@contextmanager
def throttled(cluster: TestCluster, i: int, rate: str = "20mbit") -> Iterator[None]:
    throttle(cluster, i, rate)
    try:
        yield
    finally:
        unthrottle(cluster, i)


def _link_ends(cluster: TestCluster, i: int) -> list[tuple[str | None, str]]:
    """(namespace, device) of both ends of host i's veth: ours in the root namespace."""
    return [(None, veth_name(cluster.prefix, i)), (cluster.hosts[i].netns, "eth0")]


def _tc(netns: str | None, args: list[str], check: bool = True) -> None:
    argv = ["tc", *(["-n", netns] if netns else []), *args]
    res = subprocess.run(argv, capture_output=True, text=True)
    if check and res.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} failed: {res.stderr.strip()}")
