"""Where ddptui connects, compared with OpenSSH's own answer: for each ssh_config below, what
SSHTransport would hand asyncssh (recorded, no connection made) must be what `ssh -G`, run in
the same test, says for the same host: the host, port, user, keys, known_hosts and jump chain.

System-wide files (/etc/ssh/ssh_config, ssh_config.d) are tested in a private mount namespace
(unshare -m, as root), so the machine's own are never touched.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ddptui.remote import inventory
from ddptui.remote.agents import jump, openssh
from ddptui.remote.agents.sshlib import asyncssh
from ddptui.remote.agents.sshtransport import SSHTransport
from ddptui.remote.agents.transport import HostError

pytestmark = pytest.mark.skipif(openssh.client() is None, reason="no OpenSSH client")


def ssh_g(*args: str) -> dict[str, list[str]]:
    """OpenSSH's answer, read here independently of remote/agents/openssh.py."""
    res = subprocess.run(["ssh", "-G", *args], capture_output=True, text=True, check=True)
    out: dict[str, list[str]] = {}
    for line in res.stdout.splitlines():
        key, _, value = line.partition(" ")
        out.setdefault(key, []).append(value)
    return out


@dataclass
class Call:
    host: str
    options: dict[str, Any]


class Conn:
    def get_extra_info(self, name: str) -> Any:
        return None

    def set_tunnel(self, conn: Any) -> None: ...
    def close(self) -> None: ...
    def abort(self) -> None: ...
    def is_closed(self) -> bool:
        return False


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[Call]:
    """asyncssh.connect stood in for: every connection the transport would make, in order
    (the jump chain's hops, then the host); known_hosts recorded as the files read."""
    made: list[Call] = []

    async def connect(host: str, **options: Any) -> Conn:
        made.append(Call(host, options))
        return Conn()

    monkeypatch.setattr(asyncssh, "connect", connect)
    monkeypatch.setattr(jump, "known_hosts", lambda files: list(files))
    return made


def host_for(config: Path, host: str, **keys: object) -> inventory.Host:
    entry = {"host": host, "ssh_config": str(config), **keys}
    text = json.dumps({"hosts": [entry], "job": {"script": "t.py"}})
    return inventory.parse(text, config.parent / "inv.yaml").hosts[0]


def connect(h: inventory.Host) -> SSHTransport:
    async def go() -> SSHTransport:
        t = SSHTransport(h)
        try:
            await t.connect()
        finally:
            t.drop()  # lets go of the jump host too
        return t

    return asyncio.run(go())


def expected(g: dict[str, list[str]]) -> dict[str, Any]:
    """What asyncssh must be handed, from OpenSSH's answer."""
    keys = [os.path.expanduser(k) for k in g["identityfile"]]
    user_files = g["userknownhostsfile"][0].split()
    if any(f in ("none", "/dev/null") for f in user_files):
        user_files = [f for f in user_files if f not in ("none", "/dev/null")] or [
            os.path.expanduser("~/.ssh/known_hosts"),
            os.path.expanduser("~/.ssh/known_hosts2"),
        ]
    return {
        "host": g["hostname"][0],
        "port": int(g["port"][0]),
        "username": g["user"][0],
        "client_keys": [k for k in keys if os.path.isfile(k) and not k.endswith(".pub")],
        "known_hosts": user_files
        + [f for f in g["globalknownhostsfile"][0].split() if f != "none"],
    }


def got(call: Call) -> dict[str, Any]:
    o = call.options
    keys = ("port", "username", "client_keys", "known_hosts")
    return {"host": call.host, **{k: o[k] for k in keys}}


def same_as_ssh(calls: list[Call], config: Path, host: str, *args: str) -> dict[str, Any]:
    """The host's connection is OpenSSH's answer; returns that answer."""
    g = ssh_g("-F", str(config), *args, host)
    assert got(calls[-1]) == expected(g)
    assert ("tunnel" in calls[-1].options) == ("proxyjump" in g)
    assert ("proxy_command" in calls[-1].options) == ("proxycommand" in g)
    assert calls[-1].options["config"] == []  # asyncssh reads no ssh_config of its own
    return g


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def key(path: Path) -> Path:
    write(path, "not really a key, only there\n")
    return path


# -- another host than ssh's ------------------------------------------------------------------


def test_include_is_read_in_sorted_order(tmp_path: Path, calls: list[Call]) -> None:
    inc = tmp_path / "conf.d"
    write(inc / "b.conf", "Host gpu1\n  HostName from-b\n  User bob\n")
    write(inc / "a.conf", "Host gpu1\n  HostName from-a\n  User alice\n")  # written second
    config = write(tmp_path / "config", f"Include {inc}/*.conf\n")
    connect(host_for(config, "gpu1"))
    assert same_as_ssh(calls, config, "gpu1")["hostname"] == ["from-a"]


@pytest.mark.parametrize("host", ["gpu1", "gpu2"])
def test_a_comma_in_host_is_one_literal_pattern(
    tmp_path: Path, calls: list[Call], host: str
) -> None:
    config = write(tmp_path / "config", "Host gpu1,gpu2\n  HostName lit\n  Port 2200\n")
    connect(host_for(config, host))
    assert same_as_ssh(calls, config, host)["hostname"] == [host]


@pytest.mark.parametrize("host", ["gpu7", "login", "gpu7.example", "GPU7", "10.0.0.7"])
def test_first_match_negation_and_wildcards(tmp_path: Path, calls: list[Call], host: str) -> None:
    config = write(
        tmp_path / "config",
        "Host * !login\n  User everyone\n"
        "Host gpu?\n  User ignored\n  Port 2222\n  HostName %h.cluster\n"
        "Host *.example\n  HostName 10.9.9.9\n"
        "Host 10.0.0.*\n  Port 2022\n"
        "Host *\n  User last\n  Port 22\n",
    )
    connect(host_for(config, host))
    same_as_ssh(calls, config, host)


def test_the_inventory_user_and_port_win_and_its_key_adds_to_the_config_keys(
    tmp_path: Path, calls: list[Call]
) -> None:
    mine, theirs = key(tmp_path / "mine"), key(tmp_path / "theirs")
    missing = tmp_path / "missing"
    config = write(
        tmp_path / "config",
        f"Host gpu1\n  User cfg\n  Port 2200\n  IdentityFile {missing}\n  IdentityFile {theirs}\n",
    )
    connect(host_for(config, "gpu1", user="inv", port=2300, identity_file=str(mine)))
    same_as_ssh(calls, config, "gpu1", "-l", "inv", "-p", "2300", "-i", str(mine))
    assert calls[-1].options["client_keys"] == [str(mine), str(theirs)]  # missing: skipped


def test_a_public_key_names_a_key_in_the_agent(tmp_path: Path, calls: list[Call]) -> None:
    pub = key(tmp_path / "agent_key.pub")
    config = write(tmp_path / "config", f"Host gpu1\n  IdentityFile {pub}\n  IdentitiesOnly yes\n")
    connect(host_for(config, "gpu1"))
    same_as_ssh(calls, config, "gpu1")
    assert calls[-1].options["agent_identities"] == [str(pub)]
    assert calls[-1].options["client_keys"] == []  # no file of its own: never asyncssh's defaults


def test_tokens_in_an_included_identity_file_know_the_final_user_and_port(
    tmp_path: Path, calls: list[Call]
) -> None:
    """%r and %p in an Include'd IdentityFile: the User and Port set after it count. ssh -G
    expands ControlPath with the same tokens, so it says what the path must be."""
    template = f"{tmp_path}/id_%r_%p_%h_%n_%k_%d_%u_%i_%l_%L_%C_%%"
    inc = write(tmp_path / "keys.conf", f"IdentityFile {template}\nControlPath {template}\n")
    config = write(tmp_path / "config", f"Host gpu1\n  Include {inc}\n  User late\n  Port 2201\n")
    g = ssh_g("-F", str(config), "gpu1")
    key(Path(g["controlpath"][0]))
    connect(host_for(config, "gpu1"))
    assert got(calls[-1]) == {**expected(g), "client_keys": g["controlpath"]}


def test_a_host_name_in_capitals_is_lowered_as_ssh_does(tmp_path: Path, calls: list[Call]) -> None:
    config = write(tmp_path / "config", "Host gpu1\n  Port 2200\n")
    connect(host_for(config, "GPU1"))
    assert same_as_ssh(calls, config, "GPU1")["hostname"] == ["gpu1"]


def test_an_ipv6_host_name(tmp_path: Path, calls: list[Call]) -> None:
    config = write(tmp_path / "config", "Host v6\n  HostName fd00::7\n  Port 2200\n")
    connect(host_for(config, "v6"))
    same_as_ssh(calls, config, "v6")


# -- another route ---------------------------------------------------------------------------


def test_the_first_of_proxycommand_and_proxyjump_wins(tmp_path: Path, calls: list[Call]) -> None:
    config = write(
        tmp_path / "config", "Host gpu1\n  ProxyCommand nc %h %p\nHost *\n  ProxyJump bastion\n"
    )
    connect(host_for(config, "gpu1"))
    same_as_ssh(calls, config, "gpu1")
    shell = os.environ.get("SHELL") or "/bin/sh"
    assert calls[-1].options["proxy_command"] == [shell, "-c", "exec nc gpu1 22"]
    assert len(calls) == 1  # no jump host


@pytest.mark.parametrize(
    ("proxyjump", "hops"),
    [
        ("ssh://alice@bastion:2222", [("bastion", "alice", 2222)]),
        ("carol@[fd00::1]:2022", [("fd00::1", "carol", 2022)]),
        ("a,me@b:2200", [("inner", "root", 22), ("a-host", "ada", 22), ("b", "me", 2200)]),
    ],
)
def test_jump_chains_hop_by_hop(
    tmp_path: Path, calls: list[Call], proxyjump: str, hops: list[tuple[str, str, int]]
) -> None:
    """Each hop resolved as ssh resolves it (its own ssh -G); the first hop's own ProxyJump
    goes before it, the others' are the chain's to say."""
    config = write(
        tmp_path / "config",
        f"Host gpu1\n  ProxyJump {proxyjump}\n"
        "Host a\n  HostName a-host\n  User ada\n  ProxyJump inner\n"
        "Host b\n  ProxyJump ignored\n"
        "Host *\n  User root\n",
    )
    connect(host_for(config, "gpu1"))
    same_as_ssh(calls, config, "gpu1")
    assert [(c.host, c.options["username"], c.options["port"]) for c in calls[:-1]] == hops
    for call in calls[:-1]:  # every hop: OpenSSH's answer for it too
        assert call.options["config"] == [] and "known_hosts" in call.options


def test_match_final_proxyjump_goes_through_the_shared_jump(
    tmp_path: Path, calls: list[Call]
) -> None:
    config = write(
        tmp_path / "config",
        "Host gpu*\n  UserKnownHostsFile /dev/null\n"
        "Match final host gpu*\n  ProxyJump bastion\n  User fin\n",
    )
    connect(host_for(config, "gpu1"))
    g = same_as_ssh(calls, config, "gpu1")
    assert g["proxyjump"] == ["bastion"] and calls[0].host == "bastion"


def test_a_bare_ipv6_proxyjump_is_refused_as_ssh_refuses_it(
    tmp_path: Path, calls: list[Call]
) -> None:
    config = write(tmp_path / "config", "Host gpu1\n  ProxyJump fd00::1\n")
    with pytest.raises(HostError, match="Invalid ProxyJump"):
        connect(host_for(config, "gpu1"))
    assert subprocess.run(["ssh", "-G", "-F", str(config), "gpu1"], capture_output=True).returncode
    assert not calls


# -- host keys never off by config ------------------------------------------------------------


@pytest.mark.security
@pytest.mark.parametrize("off", ["UserKnownHostsFile none", "UserKnownHostsFile /dev/null"])
def test_known_hosts_checking_is_never_turned_off(
    tmp_path: Path, calls: list[Call], off: str
) -> None:
    config = write(
        tmp_path / "config",
        f"Host bastion\n  {off}\n  StrictHostKeyChecking no\n"
        f"Match final host gpu1\n  {off}\n  ProxyJump bastion\n",
    )
    t = connect(host_for(config, "gpu1"))
    same_as_ssh(calls, config, "gpu1")
    home = os.path.expanduser("~")
    for call in calls:  # the bastion and the host: the default files, never none
        assert call.options["known_hosts"][:2] == [f"{home}/.ssh/{f}" for f in DEFAULTS]
    assert t._unverified_by == off
    assert any(f"`{off}` for bastion" in n for n in t.notices)


DEFAULTS = ("known_hosts", "known_hosts2")


@pytest.mark.security
def test_known_hosts_files_none_are_no_file_not_one_named_none(
    tmp_path: Path, calls: list[Call], monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenSSH reads no file for `none`: a file named `none` in the current directory (a
    shared workdir) is never trusted as known_hosts."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "none", "gpu1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPlanted\n")
    config = write(
        tmp_path / "config",
        "Host gpu1\n  GlobalKnownHostsFile none\n  UserKnownHostsFile none\n",
    )
    connect(host_for(config, "gpu1"))
    g = same_as_ssh(calls, config, "gpu1")
    assert g["globalknownhostsfile"] == ["none"]
    home = os.path.expanduser("~")
    assert calls[-1].options["known_hosts"] == [f"{home}/.ssh/{f}" for f in DEFAULTS]


# -- system-wide files, in a private mount namespace ------------------------------------------

PROBE = """
import asyncio, json, sys
sys.path.insert(0, {repo!r})
from ddptui.remote.agents import jump, openssh
calls = []
async def connect(host, **options):
    calls.append([host, options["username"], options["port"], options["known_hosts"]])
    class C:
        def get_extra_info(self, n): return None
        def set_tunnel(self, c): pass
        def close(self): pass
        def is_closed(self): return False
    return C()
jump.asyncssh.connect = connect
jump.known_hosts = lambda files: list(files)
from ddptui.remote.inventory import parse
from ddptui.remote.agents.sshtransport import SSHTransport
from pathlib import Path
h = parse('hosts: [{{host: gpu1}}]\\njob: {{script: t}}\\n', Path("i.yaml")).hosts[0]
asyncio.run(SSHTransport(h).connect())
print(json.dumps(calls))
"""


def in_namespace(tmp_path: Path, etc: dict[str, str]) -> tuple[dict[str, str], list[Any]]:
    """`ssh -G gpu1`, and what ddptui would connect to for gpu1, with these files bound over
    /etc's (a private mount namespace: the machine's own are never touched)."""
    mounts = []
    for name, text in etc.items():
        if name.endswith(".d"):
            folder = tmp_path / "etc" / name
            folder.mkdir(parents=True)
            for i, block in enumerate(text.split("\n\n")):  # one file each, in reverse order
                write(folder / f"{90 - i}-site.conf", block + "\n")
        else:
            write(tmp_path / "etc" / name, text)
        mounts.append(f"mount --bind {tmp_path / 'etc' / name} /etc/{name}")
    probe = write(tmp_path / "probe.py", PROBE.format(repo=str(Path(__file__).parents[2])))
    script = " && ".join([*mounts, "ssh -G gpu1", "echo ---", f"{sys.executable} {probe}"])
    res = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    g_text, _, calls_text = res.stdout.partition("---\n")
    for name in etc:
        assert Path("/etc", name).exists()  # the real ones, still there
    return dict(line.split(" ", 1) for line in g_text.splitlines()), json.loads(calls_text)


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare"
)


@needs_root
def test_system_wide_files_in_a_private_mount_namespace(tmp_path: Path) -> None:
    """ProxyJump and User from /etc/ssh/ssh_config.d/*.conf, where sites put them."""
    g, calls = in_namespace(
        tmp_path,
        {
            "ssh/ssh_config": "Include /etc/ssh/ssh_config.d/*.conf\nHost *\n  Port 22\n",
            "ssh/ssh_config.d": "Host gpu*\n  ProxyJump site-bastion\n\nHost *\n  User siteuser",
        },
    )
    assert (g["user"], g["proxyjump"]) == ("siteuser", "site-bastion")
    assert [c[:3] for c in calls] == [
        ["site-bastion", "siteuser", 22],
        [g["hostname"], g["user"], int(g["port"])],
    ]


@needs_root
@pytest.mark.security
def test_canonicalisation_its_jump_and_its_known_hosts(tmp_path: Path) -> None:
    """A ProxyJump and `UserKnownHostsFile /dev/null` known only once the name is canonical
    (gpu1 → gpu1.cluster.test, from /etc/hosts): the jump is the shared one, the key checked."""
    g, calls = in_namespace(
        tmp_path,
        {
            "hosts": "127.0.0.1 localhost\n10.9.9.9 gpu1.cluster.test gpu1.cluster.test.\n",
            "ssh/ssh_config": "CanonicalizeHostname always\nCanonicalDomains cluster.test\n"
            "Host *.cluster.test\n  User canon\n  UserKnownHostsFile /dev/null\n"
            "  ProxyJump site-bastion\n",
        },
    )
    assert (g["hostname"], g["user"], g["proxyjump"]) == (
        "gpu1.cluster.test",
        "canon",
        "site-bastion",
    )
    assert [c[:3] for c in calls] == [
        ["site-bastion", "root", 22],
        ["gpu1.cluster.test", "canon", 22],
    ]
    assert "/dev/null" not in calls[1][3] and calls[1][3][0].endswith("/.ssh/known_hosts")


def test_a_home_elsewhere_than_the_passwd_entry_is_the_one_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ssh reads the passwd entry's ~/.ssh/config; ddptui's ~ is $HOME, as every other tool's
    (and the tests' HOMEs): its config, then the system-wide files, and its known_hosts."""
    home = tmp_path / "home"
    write(home / ".ssh" / "config", "Host gpu1\n  User from-home\n  UserKnownHostsFile none\n")
    monkeypatch.setenv("HOME", str(home))
    t = asyncio.run(openssh.resolve("gpu1"))
    assert t.user == "from-home"
    assert t.known_hosts[:2] == tuple(f"{home}/.ssh/{f}" for f in DEFAULTS)
    assert t.unverified_by == "UserKnownHostsFile none"


async def test_a_launch_after_forget_asks_ssh_again(tmp_path: Path) -> None:
    """A dashboard outlives launches: its next launch reads an edited ssh_config."""
    config = tmp_path / "config"
    given = openssh.Given(config_file=str(config))
    config.write_text("Host gpu1\n  HostName 10.0.0.1\n")
    assert (await openssh.resolve("gpu1", given)).host == "10.0.0.1"
    config.write_text("Host gpu1\n  HostName 10.0.0.2\n")
    assert (await openssh.resolve("gpu1", given)).host == "10.0.0.1"  # once per launch
    openssh.forget()
    assert (await openssh.resolve("gpu1", given)).host == "10.0.0.2"


# -- the keys offered: ssh -v's, measured against the same server ------------------------------

needs_agent = pytest.mark.skipif(
    not (shutil.which("ssh-agent") and shutil.which("ssh-keygen")), reason="no ssh-agent"
)
# (the config's key lines, the keys the agent holds): each key's file is made in the test;
# `enc` is behind a passphrase, a file without `.pub` has it moved away (the agent holds it).
OFFERS = {
    "only a missing file, IdentitiesOnly": (["IdentityFile {d}/missing", "IdentitiesOnly yes"],
                                            ["a1", "a2"]),
    "only a missing file": (["IdentityFile {d}/missing"], ["a1", "a2"]),
    "a private key without .pub, IdentitiesOnly": (["IdentityFile {d}/nopub",
                                                    "IdentitiesOnly yes"], ["a1", "nopub"]),
    "a passphrase's key without .pub, IdentitiesOnly": (["IdentityFile {d}/enc",
                                                         "IdentitiesOnly yes"], ["a1", "enc"]),
    "a .pub naming an agent key, IdentitiesOnly": (["IdentityFile {d}/a2.pub",
                                                    "IdentitiesOnly yes"], ["a1", "a2"]),
    "a file and the agent": (["IdentityFile {d}/file"], ["a1"]),
}  # fmt: skip


class Offers(asyncssh.SSHServer):
    """Records each public key a client offers, and refuses it (the client tries the next)."""

    offered: list[str] = []
    names: dict[str, str] = {}

    def begin_auth(self, username: str) -> bool:
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        self.offered.append(self.names.get(key.get_fingerprint(), "a key of no file here"))
        return False


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A private ssh-agent, HOME with a default key of its own (~/.ssh/id_ed25519: what asyncssh
    would fall back to), and a key maker."""
    sock = tmp_path / "agent.sock"
    said = subprocess.run(["ssh-agent", "-s", "-a", str(sock)], capture_output=True, text=True,
                          check=True).stdout  # fmt: skip
    pid = int(said.split("SSH_AGENT_PID=", 1)[1].split(";", 1)[0])  # up, its socket made
    monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    names: dict[str, str] = {}

    def make(name: str, path: Path, passphrase: str = "") -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", name,
                        "-f", str(path)], check=True)  # fmt: skip
        names[asyncssh.read_public_key(f"{path}.pub").get_fingerprint()] = name
        return path

    make("default", tmp_path / "home" / ".ssh" / "id_ed25519")
    try:
        yield make, names
    finally:
        os.kill(pid, signal.SIGTERM)


@needs_agent
@pytest.mark.security
@pytest.mark.parametrize("case", list(OFFERS))
def test_exactly_the_keys_ssh_offers(tmp_path: Path, agent: Any, case: str) -> None:
    """ssh -v and ddptui against one server: the same keys offered, never asyncssh's default
    ~/.ssh/id_* keys in place of missing files, nor every agent key with IdentitiesOnly."""
    make, names = agent
    lines, held = OFFERS[case]
    d = tmp_path / "keys"
    for name in ("a1", "a2", "nopub", "file", "enc"):
        path = make(name, d / name, "passphrase" if name == "enc" else "")
        if name in held:
            add = path
            if name == "enc":  # the agent holds it decrypted; the file keeps its passphrase
                add = Path(shutil.copy(path, d / "enc.plain"))
                subprocess.run(["ssh-keygen", "-p", "-q", "-P", "passphrase", "-N", "",
                                "-f", str(add)], check=True)  # fmt: skip
            subprocess.run(["ssh-add", "-q", str(add)], check=True, capture_output=True)
        if name in ("nopub", "enc"):
            (d / f"{name}.pub").rename(d / f"{name}.moved")
    Offers.names, Offers.offered = names, []

    async def both() -> tuple[set[str], set[str]]:
        host_key = asyncssh.generate_private_key("ssh-ed25519")
        server = await asyncssh.create_server(Offers, "127.0.0.1", 0, server_host_keys=[host_key])
        port = server.sockets[0].getsockname()[1]
        known = write(tmp_path / "known", f"[127.0.0.1]:{port} "
                      + host_key.export_public_key().decode())  # fmt: skip
        keys = [line.format(d=d) for line in lines]
        words = ["Host gpu1", "HostName 127.0.0.1", f"Port {port}", "User u", "BatchMode yes",
                 f"UserKnownHostsFile {known}", *keys]  # fmt: skip
        config = write(tmp_path / "config", "\n  ".join(words) + "\n")
        try:
            ssh = await asyncio.create_subprocess_exec(
                "ssh", "-F", str(config), "gpu1", "true", stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            await ssh.wait()
            by_ssh, Offers.offered = set(Offers.offered), []
            with pytest.raises(HostError, match="refused"):
                await SSHTransport(host_for(config, "gpu1")).connect()
            return by_ssh, set(Offers.offered)
        finally:
            server.close()

    by_ssh, by_ddptui = asyncio.run(both())
    assert by_ddptui == by_ssh
    assert "default" not in by_ddptui
