"""The Slurm login begun while the inventory is still being checked: its keys take ~0.2 s to
check (pydantic), the login as long again, and a submission waits for both. So the login node is
read from the file as written, `slurm.login` with the defaults' keys it takes (remote/inventory/
load.py's `_login`), and ssh begun on it at once (remote/agents/sshclient.py's `begin`); the
checked inventory's login takes it on when it asks for the same command line. A guess the check
does not bear out (a mistake the check names, a value it reads otherwise) is dropped unused, as is
a login begun for a launch that ends before it logs in.

Only the file is read here: no key is trusted for anything but the ssh command line, which is
argv (no shell), and the login runs nothing but ddptui's agent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ddptui.remote.agents import shipper, sshclient


def guess(path: Path) -> tuple[sshclient.Reach, str] | None:
    """The login node and its python as the file says them, or None (no `slurm.login`, or a
    file the check will refuse)."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    slurm = raw.get("slurm") if isinstance(raw, dict) else None
    login = slurm.get("login") if isinstance(slurm, dict) else None
    defaults = raw.get("defaults") or {}
    if not isinstance(login, str) or not isinstance(defaults, dict):
        return None
    d: dict[str, Any] = {k: v for k, v in defaults.items() if isinstance(v, str | int)}
    config = d.get("ssh_config")
    reach = sshclient.Reach(
        login, d.get("user"), d.get("port"), d.get("identity_file"), d.get("known_hosts"),
        str(path.parent / Path(config).expanduser()) if config else None,  # load._beside
    )  # fmt: skip
    return reach, str(d.get("python") or "python3")


async def begin(path: Path) -> sshclient.Begun | None:
    """The login begun, running the agent the login node's fleet starts (no prefork: no launch
    follows there); None where the file names no login node."""
    found = guess(path)
    if found is None:
        return None
    reach, python = found
    return await sshclient.begin(reach, shipper.command(python, prefork=False))
