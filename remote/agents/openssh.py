"""OpenSSH's own answer for a host: `ssh -G HOST` prints every setting it would use, after every
rule of ssh_config (Include, Match, canonicalisation, tokens, the system-wide files) is applied.

Asking the installed client, rather than reading ssh_config here, makes "the host ddptui reaches"
the host `ssh HOST` reaches, by construction.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import hashlib
import os
import pwd
import re
import shutil
import socket
import tempfile
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ddptui.remote.agents import sshkeys

Settings = dict[str, list[str]]  # keyword (lower case, as ssh -G prints it) -> its values


class OpenSSHError(Exception):
    """`ssh -G` refused the host or its config; the message is OpenSSH's own."""


def client() -> str | None:
    """The OpenSSH client's path, or None where there is none."""
    return shutil.which("ssh")


def command(
    host: str,
    options: Sequence[str],
    *,
    user: str | None = None,
    port: int | None = None,
    identity_files: Sequence[str] = (),
    config_file: str | None = None,
    known_hosts: str | None = None,
) -> list[str]:
    """An ssh command line for host (options first: `-G` asks ssh for its settings), the
    inventory's values as its own."""
    argv = [client() or "ssh", *options]
    if config_file:
        argv += ["-F", config_file]
    if known_hosts:
        argv += ["-o", f'UserKnownHostsFile="{known_hosts}"']
    if user:
        argv += ["-l", user]
    if port:
        argv += ["-p", str(port)]
    for key in identity_files:
        argv += ["-i", key]
    return [*argv, "--", host]


def parse(text: str) -> Settings:
    """`ssh -G`'s output: one `keyword value` a line; keywords that repeat (identityfile,
    userknownhostsfile's several files, sendenv...) keep every value in order."""
    out: Settings = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key:
            out.setdefault(key.lower(), []).append(value.strip())
    return out


async def ssh_g(
    host: str,
    *,
    user: str | None = None,
    port: int | None = None,
    identity_files: Sequence[str] = (),
    config_file: str | None = None,
    timeout: float = 10.0,
) -> Settings:
    """OpenSSH's settings for host, the inventory's values given as on ssh's command line;
    raises OpenSSHError."""
    argv = command(
        host, ["-G"], user=user, port=port, identity_files=identity_files, config_file=config_file
    )
    return await _run(host, argv, timeout)


async def _run(host: str, argv: list[str], timeout: float = 10.0) -> Settings:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        raise OpenSSHError(f"ssh -G {host} did not answer in {timeout:g} s") from None
    if proc.returncode != 0:
        raise OpenSSHError(err.decode("utf-8", "replace").strip() or f"ssh -G {host} failed")
    return parse(out.decode("utf-8", "replace"))


# -- the resolver: what asyncssh is handed ----------------------------------------------------

NONE = "none"  # a known_hosts keyword's "no file" (alone; `ssh -G` prints it in lower case)
OFF = (NONE, "/dev/null")  # UserKnownHostsFile values that would turn host-key checking off
DEFAULT_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")


@dataclass(frozen=True)
class Target:
    """Where and how `ssh HOST` would connect: OpenSSH's answer, paths and tokens expanded."""

    alias: str  # as asked
    host: str  # the HostName, lower case as ssh makes it
    port: int
    user: str
    identity_files: tuple[str, ...]  # in ssh's order, whether or not they exist
    identities_only: bool
    agent: str | None  # IdentityAgent: None for the default ($SSH_AUTH_SOCK), "" for none
    known_hosts: tuple[str, ...]  # the files the host key is checked against
    unverified_by: str | None  # the config's setting that would have turned checking off
    host_key_alias: str | None
    proxy_jump: str | None  # the chain, as ssh_config writes it
    proxy_command: str | None  # tokens expanded

    def keys(self) -> list[str]:
        """The private keys to offer: as ssh, a file that is missing is skipped."""
        return [p for p in self.identity_files if not p.endswith(".pub") and os.path.isfile(p)]

    def named(self) -> list[str | bytes]:
        """The agent's keys these files name: `key.pub`, or the key file's own public half
        (sshkeys.public_half)."""
        halves = (sshkeys.public_half(path) for path in self.identity_files)
        return [half for half in halves if half is not None]

    def client_options(self) -> dict[str, Any]:
        """asyncssh.connect's arguments for this host (its first one is `host`), every value
        explicit: asyncssh reads no ssh_config of its own (config=[]), so it cannot disagree.
        The keys offered are ssh's: the files ssh_config names (never asyncssh's defaults in
        their place) and the agent's, with IdentitiesOnly only those the files name."""
        options: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "username": self.user,
            "config": [],
            "client_keys": self.keys() or sshkeys.NoFileKeys(),
            "ignore_encrypted": True,  # BatchMode: a key behind a passphrase is skipped
            "known_hosts": self.known_hosts,
            "host_key_alias": self.host_key_alias,
        }
        if self.agent is not None:
            options["agent_path"] = self.agent or None
        if self.identities_only:  # the agent's keys that these files name, and no others
            options["agent_identities"] = self.named()
            if not options["agent_identities"]:  # none: asyncssh would offer them all
                options["agent_path"] = None
        if self.proxy_command:  # run as ssh runs it: the user's shell, exec'd
            options["proxy_command"] = [_shell(), "-c", "exec " + self.proxy_command]
        return options


def _shell() -> str:
    return os.environ.get("SHELL") or "/bin/sh"


def target(alias: str, settings: Settings) -> Target:
    """The Target of `ssh -G alias`'s settings; raises OpenSSHError on a token ssh would
    refuse."""

    def one(key: str) -> str | None:
        values = settings.get(key)
        return values[0] if values and values[0] else None

    tokens = _tokens(alias, settings)
    user_files = (one("userknownhostsfile") or "").split()
    off = next((f for f in user_files if f.lower() in OFF), None)
    if off is not None:  # OpenSSH still refuses an unknown key here; asyncssh would not
        user_files = [f for f in user_files if f.lower() not in OFF] or list(DEFAULT_KNOWN_HOSTS)
    # OpenSSH reads no file for `none`: not one of that name in the current directory
    global_files = [f for f in (one("globalknownhostsfile") or "").split() if f != NONE]
    agent = one("identityagent")
    if agent == "SSH_AUTH_SOCK":
        agent = os.environ.get("SSH_AUTH_SOCK", "")
    elif agent is not None:
        agent = "" if agent == "none" else home_path(expand(agent, tokens))
    proxy_command = one("proxycommand")
    return Target(
        alias=alias,
        host=tokens["h"],
        port=int(tokens["p"]),
        user=tokens["r"],
        identity_files=tuple(
            home_path(expand(f, tokens)) for f in settings.get("identityfile", [])
        ),
        identities_only=one("identitiesonly") == "yes",
        agent=agent,
        known_hosts=tuple(home_path(f) for f in [*user_files, *global_files]),
        unverified_by=f"UserKnownHostsFile {off}" if off else None,
        host_key_alias=one("hostkeyalias"),
        proxy_jump=None if one("proxyjump") in (None, "none") else one("proxyjump"),
        proxy_command=None
        if proxy_command in (None, "none")
        else expand(str(proxy_command), {k: tokens[k] for k in "hknpr"}),
    )


def _tokens(alias: str, settings: Settings) -> dict[str, str]:
    """ssh_config's %-tokens for this host (ssh_config(5) TOKENS), `%d` as ddptui's `~`."""
    host = (settings.get("hostname") or [alias])[0]
    port = (settings.get("port") or ["22"])[0]
    user = (settings.get("user") or [_local_user()])[0]
    local = socket.gethostname()
    jump = (settings.get("proxyjump") or [""])[0]
    return {
        "%": "%",
        "C": hashlib.sha1((local + host + port + user).encode()).hexdigest(),
        "d": os.path.expanduser("~"),
        "h": host,
        "i": str(os.getuid()),
        "j": "" if jump == "none" else jump,
        "k": (settings.get("hostkeyalias") or [alias])[0],
        "L": local.split(".", 1)[0],
        "l": local,
        "n": alias,
        "p": port,
        "r": user,
        "u": _local_user(),
    }


def _local_user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


_TOKEN = re.compile(r"%(.)|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand(text: str, tokens: dict[str, str]) -> str:
    """`%h`-style tokens and `${VAR}` as ssh expands them in a path or a command; raises
    OpenSSHError for a token it does not know (ssh refuses those)."""

    def one(m: re.Match[str]) -> str:
        if m[2] is not None:
            if m[2] not in os.environ:
                raise OpenSSHError(f"{text!r}: environment variable ${{{m[2]}}} is not set")
            return os.environ[m[2]]
        if m[1] not in tokens:
            raise OpenSSHError(f"{text!r}: unknown token %{m[1]}")
        return tokens[m[1]]

    return _TOKEN.sub(one, text)


def home_path(path: str) -> str:
    """A path of ssh's, with ddptui's `~`: ssh takes `~` from the passwd entry; ddptui, as
    every other tool, from $HOME (where they differ, as in a test's HOME, $HOME wins)."""
    path = os.path.expanduser(path)
    passwd, home = _passwd_home(), os.path.expanduser("~")
    if passwd != home and (path == passwd or path.startswith(passwd.rstrip("/") + "/")):
        path = home + path[len(passwd.rstrip("/")) :]
    return path


def _passwd_home() -> str:
    return pwd.getpwuid(os.getuid()).pw_dir


def home_config() -> str | None:
    """Where $HOME is not the passwd entry's home, ssh would read the other one's
    ~/.ssh/config: `-F` a file that includes $HOME's then the system-wide one, in ssh's
    order. None where they agree (ssh reads the right files itself)."""
    home = os.path.expanduser("~")
    if os.path.realpath(home) == os.path.realpath(_passwd_home()):
        return None
    return _wrapper(home)


@functools.cache
def _wrapper(home: str) -> str:
    text = f'Include "{home}/.ssh/config"\nInclude {SYSTEM_CONFIG}\n'
    fd, path = tempfile.mkstemp(prefix="ddptui-ssh_config-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    atexit.register(_remove, path)
    return path


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


SYSTEM_CONFIG = "/etc/ssh/ssh_config"

# One answer per host per launch: every host (and hop) asks at once; the first asks ssh.
_Answers = dict[tuple[str, ...], "asyncio.Future[Target]"]
_cache: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Answers] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Given:
    """The inventory's values for a host, as ssh's command line gives them (`-l`, `-p`, `-i`,
    `-F`; known_hosts as `-o UserKnownHostsFile`)."""

    user: str | None = None
    port: int | None = None
    identity_files: tuple[str, ...] = ()
    config_file: str | None = None
    known_hosts: str | None = None


async def resolve(host: str, given: Given = Given()) -> Target:
    """Where `ssh HOST` connects, given the inventory's values; asked once per event loop;
    raises OpenSSHError."""
    config_file = given.config_file or home_config()
    argv = command(
        host,
        ["-G"],
        user=given.user,
        port=given.port,
        identity_files=given.identity_files,
        config_file=config_file,
        known_hosts=given.known_hosts,
    )
    per_loop = _cache.setdefault(asyncio.get_running_loop(), {})
    key = tuple(argv)
    known = per_loop.get(key)
    if known is None or (known.done() and (known.cancelled() or known.exception())):
        per_loop[key] = asyncio.ensure_future(_ask(host, argv))
    return await asyncio.shield(per_loop[key])


def forget() -> None:
    """Drop this event loop's answers: a dashboard outlives launches, and ssh_config may have
    changed since the last one (each launch re-reads the inventory, and asks ssh again)."""
    with contextlib.suppress(RuntimeError):  # no loop running: nothing kept for it
        _cache.pop(asyncio.get_running_loop(), None)


RUNNING = 16  # `ssh -G`s at once: each is ~6 ms of CPU; 512 at once would be 2,048 fds

_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


async def _ask(host: str, argv: list[str]) -> Target:
    slots = _slots.setdefault(asyncio.get_running_loop(), asyncio.Semaphore(RUNNING))
    async with slots:
        settings = await _run(host, argv)
    return target(host, settings)
