"""A shell on a host, by OpenSSH's own client: `ddptui ssh HOST|NODE|rN` and the dashboard's
`!` both run the command built here.

`ssh` itself, not asyncssh: the user's agent, ~/.ssh/config (ProxyJump to the bastion, Match,
ControlMaster) and terminal apply as they do to any ssh they type; the inventory's user, port,
key and known_hosts go on its command line, as they go to ddptui's own connections. A host key
ssh does not know is refused (StrictHostKeyChecking yes), as ddptui's own connections refuse it.
The shell starts in the job's workdir, a login shell; `~` there is the login user's home.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from ddptui.remote.agents.openssh import client, home_config
from ddptui.remote.inventory import Host, Inventory

# `~/` or `~user/` at the start of a path, left unquoted (its slash too: a quoted character
# before the first unquoted slash turns tilde expansion off) so that the host's shell expands it.
_HOME = re.compile(r"~([A-Za-z0-9._][A-Za-z0-9._-]*)?(/|$)")


class ShellError(Exception):
    """No such host in the inventory, or no ssh client here: for a person."""


@dataclass(frozen=True)
class Shell:
    """The command to run in the terminal, and where (a local host's workdir)."""

    argv: list[str]
    cwd: str | None = None


def shell(host: Host) -> Shell:
    """An interactive login shell on host, in its workdir."""
    if host.transport == "local":
        workdir = os.path.expanduser(host.workdir) if host.workdir else None
        return Shell([os.environ.get("SHELL") or "/bin/sh", "-l"], cwd=workdir)
    ssh = client()
    if ssh is None:
        raise ShellError("no OpenSSH client (ssh) on this machine's PATH")
    return Shell([ssh, *ssh_options(host), "-t", "--", host.host, remote_command(host.workdir)])


def ssh_options(host: Host) -> list[str]:
    """The inventory's settings for host as ssh's own options (what it leaves unset, OpenSSH's
    config decides: ~/.ssh/config, or the inventory's ssh_config where it names one)."""
    out: list[str] = []
    # The inventory's own ssh_config where it names one, else the one ddptui's connections read
    config = host.ssh_config or home_config()
    if config:
        out += ["-F", str(Path(config).expanduser())]
    if host.user:
        out += ["-l", host.user]
    if host.port:
        out += ["-p", str(host.port)]
    if host.identity_file:
        out += ["-i", str(Path(host.identity_file).expanduser())]
    if host.known_hosts:
        known = str(Path(host.known_hosts).expanduser()).replace("%", "%%")  # ssh's tokens
        out += ["-o", f'UserKnownHostsFile="{known}"']
    return [*out, "-o", "StrictHostKeyChecking=yes"]


def remote_command(workdir: str | None) -> str:
    """`cd WORKDIR && exec "$SHELL" -l`, the path quoted for the host's shell but its leading
    `~` or `~user`; without a workdir, the login directory."""
    if not workdir:
        return 'exec "$SHELL" -l'
    home = _HOME.match(workdir)
    head = home.group(0) if home else ""
    rest = workdir[len(head) :]
    path = head + (shlex.quote(rest) if rest else "")
    return f'cd {path} && exec "$SHELL" -l'


def placed(events: Path) -> dict[int, str]:
    """Each global rank's host (its name) as a run placed it: its events.jsonl's word, the
    last one (a restart, a spare in a lost host's place)."""
    out: dict[int, str] = {}
    try:
        with events.open(encoding="utf-8") as lines:
            for line in lines:
                if '"NodeStarted"' not in line and '"NodeRanks"' not in line:
                    continue  # most lines, not parsed
                event = json.loads(line)
                if event.get("event") in ("NodeStarted", "NodeRanks"):
                    out.update(dict.fromkeys(event["ranks"], str(event["host"])))
    except (OSError, ValueError, KeyError) as exc:
        raise ShellError(f"cannot read where the run placed its ranks: {exc}") from None
    return out


def find(inv: Inventory, spec: str, ranks: dict[int, str] | None = None) -> Host:
    """HOST (a name or address, spares too), NODE (a node rank), or rN: the host of global rank
    N, from `ranks` (a run's placement), else as static rendezvous places it."""
    hosts = inv.everyone
    for h in hosts:
        if spec == h.name:
            return h
    by_address = [h for h in hosts if spec == h.host]
    if len(by_address) == 1:
        return by_address[0]
    if by_address:
        names = ", ".join(h.name for h in by_address)
        raise ShellError(f"{spec!r} is the address of {names}: name one")
    if spec.isdigit():
        if int(spec) < len(inv.hosts):
            return inv.hosts[int(spec)]
        raise ShellError(f"no node {spec}: the inventory has nodes 0-{len(inv.hosts) - 1}")
    if re.fullmatch(r"r\d+", spec):
        if ranks is None:
            return inv.hosts[_node_of_rank(inv, int(spec[1:]))]
        if int(spec[1:]) not in ranks:
            raise ShellError(f"the run placed no rank {spec[1:]}")
        return find(inv, ranks[int(spec[1:])])
    raise ShellError(f"no host, node or rank {spec!r} in {inv.path}")


def _node_of_rank(inv: Inventory, rank: int) -> int:
    job = inv.job
    per_node = job.nproc_per_node
    if (
        not isinstance(per_node, int)
        or job.launcher not in ("torchrun", "launch")
        or job.rdzv_backend != "static"
    ):
        raise ShellError(
            f"where rank {rank} runs is learned during a run (nproc_per_node {per_node}, "
            f"{job.launcher}, {job.rdzv_backend} rendezvous): give --run RUN, name its host, "
            "or press ! on its log in the dashboard"
        )
    node = rank // per_node
    if node >= len(inv.hosts):
        raise ShellError(f"no rank {rank}: ranks are 0-{len(inv.hosts) * per_node - 1}")
    return node
