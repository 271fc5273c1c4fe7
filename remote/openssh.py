"""OpenSSH's own answer for a host: `ssh -G HOST` prints every setting it would use, after every
rule of ssh_config (Include, Match, canonicalisation, tokens, the system-wide files) is applied.

Asking the installed client, rather than reading ssh_config here, makes "the host ddptui reaches"
the host `ssh HOST` reaches, by construction.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Sequence

Settings = dict[str, list[str]]  # keyword (lower case, as ssh -G prints it) -> its values


class OpenSSHError(Exception):
    """`ssh -G` refused the host or its config; the message is OpenSSH's own."""


def client() -> str | None:
    """The OpenSSH client's path, or None where there is none."""
    return shutil.which("ssh")


def ssh_g_argv(
    host: str,
    *,
    user: str | None = None,
    port: int | None = None,
    identity_files: Sequence[str] = (),
    config_file: str | None = None,
) -> list[str]:
    """The `ssh -G` command for host, with the inventory's values as the command line's."""
    argv = [client() or "ssh", "-G"]
    if config_file:
        argv += ["-F", config_file]
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
    argv = ssh_g_argv(
        host, user=user, port=port, identity_files=identity_files, config_file=config_file
    )
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


def home_config() -> str | None:
    """~/.ssh/config by $HOME, where that is not the file OpenSSH reads by itself (it takes the
    home of the user's passwd entry, never $HOME): what ssh must be told with -F so that it
    reads the config ddptui's own connections read (asyncssh goes by $HOME). None: the same."""
    import os
    import pwd

    mine = os.path.expanduser("~/.ssh/config")
    try:
        own = os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".ssh", "config")
    except KeyError:  # a uid without a passwd entry: ssh has no home of its own
        return mine
    return None if os.path.realpath(mine) == os.path.realpath(own) else mine
