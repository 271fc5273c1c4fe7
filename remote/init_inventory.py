"""`ddptui init`: a first inventory.yaml from the hosts ~/.ssh/config already names.

Which hosts: the config's `Host` lines (and the files they `Include`) give the names; a name
with a wildcard or a `!` is a pattern, not a host, and `Match` blocks name none. Everything
about a host (its address, user, port, key, bastion) is OpenSSH's to say: each is resolved with
`ssh -G` (remote/agents/openssh.py), which applies every rule of the config, Match and ProxyJump
included. The inventory keeps each host's alias as `host:`, so that the config goes on applying
to it; what ssh resolved is written beside it, as a comment. A host that other hosts jump
through (a bastion) is no training node: it is left out, and said so.
"""

from __future__ import annotations

import asyncio
import fnmatch
import glob
import os
import re
import shlex
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import yaml

from ddptui.remote import fold, schema
from ddptui.remote.agents import openssh
from ddptui.remote.store import record

CONFIG = "~/.ssh/config"
MAX_DEPTH = 16  # Include within Include: OpenSSH's own limit
IN_FLIGHT = 16  # ssh -G at once
MODE = 0o644  # an inventory is shared (teammates, editors, CI): readable by all, whatever the umask
_KEYWORD = re.compile(r"\s*(\w+)(?:\s*=\s*|\s+)(.*)")

Resolve = Callable[[str], Awaitable[openssh.Settings]]


class InitError(Exception):
    """Nothing to write: no host matched, or OpenSSH refused the config. For a person."""


@dataclass(frozen=True)
class Resolved:
    """One host as `ssh -G` resolved it."""

    alias: str
    hostname: str
    user: str
    port: str
    proxyjump: str  # "" when direct

    @property
    def route(self) -> tuple[str, str, str]:
        return self.user, self.port, self.proxyjump


# -- the config's host names -----------------------------------------------------------------


def config_hosts(path: str | Path = CONFIG) -> list[str]:
    """The concrete host names of the config's `Host` lines, in order, once each, following
    `Include` (relative paths from ~/.ssh, globs, as ssh reads them)."""
    return list(dict.fromkeys(_names(Path(os.path.expanduser(path)), 0)))


def _names(path: Path, depth: int) -> Iterator[str]:
    if depth > MAX_DEPTH:
        raise InitError(f"{path}: Include nested more than {MAX_DEPTH} deep")
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InitError(f"cannot read {path}: {exc.strerror}") from None
    for line in lines:
        m = _KEYWORD.match(line)
        if m is None or line.lstrip().startswith("#"):
            continue
        keyword, words = m[1].lower(), _words(m[2])
        if keyword == "host":  # a pattern, a negation or a space names no host
            yield from (w for w in words if not any(c in w for c in "*?! \t"))
        elif keyword == "include":
            for word in words:
                pattern = os.path.expanduser(word)
                if not os.path.isabs(pattern):
                    pattern = os.path.expanduser(f"~/.ssh/{pattern}")
                for included in sorted(glob.glob(pattern)):
                    yield from _names(Path(included), depth + 1)


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError:  # an unbalanced quote: ssh would refuse it; ssh -G will say so
        return text.split()


# -- which hosts -----------------------------------------------------------------------------


def chosen(asked: Sequence[str], known: Sequence[str]) -> tuple[list[str], set[str]]:
    """The hosts to resolve, in order, and which of them were named outright (kept even when
    others jump through them). A pattern matches the config's names; a plain name is a host
    whether the config knows it or not (ssh reaches it all the same)."""
    if not asked:
        if not known:
            raise InitError(f"{CONFIG} names no host: name them (ddptui init gpu-a gpu-b 10.0.0.7)")
        return list(known), set()
    out: list[str] = []
    named: set[str] = set()
    for word in asked:
        if any(c in word for c in "*?["):
            matched = fnmatch.filter(known, word)
            if not matched:
                some = ", ".join(known[:8]) or "none"
                raise InitError(f"no host in {CONFIG} matches {word!r} (its hosts: {some})")
            out += matched
        else:
            out.append(word)
            named.add(word)
    return list(dict.fromkeys(out)), named


async def resolve_all(hosts: Sequence[str], resolve: Resolve) -> list[Resolved]:
    """Each host as `ssh -G` says, a few at a time."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(alias: str) -> Resolved:
        async with gate:
            try:
                got = await resolve(alias)
            except openssh.OpenSSHError as exc:
                raise InitError(f"ssh -G {alias}: {exc}") from None

        def first(key: str, default: str = "") -> str:
            values = got.get(key) or [default]
            return values[0]

        jump = first("proxyjump")
        return Resolved(alias, first("hostname", alias), first("user"), first("port", "22"),
                        "" if jump == "none" else jump)  # fmt: skip

    got = await asyncio.gather(*(one(h) for h in hosts), return_exceptions=True)  # each ends
    for r in got:
        if isinstance(r, BaseException):
            raise r
    return [r for r in got if isinstance(r, Resolved)]


def jump_hosts(resolved: Sequence[Resolved]) -> set[str]:
    """Every host some other host jumps through (`ProxyJump user@bastion:22,next`)."""
    hops = (hop for r in resolved for hop in r.proxyjump.split(",") if hop)
    return {_hop_host(hop) for hop in hops}


def _hop_host(hop: str) -> str:
    host = hop.rpartition("@")[2].removeprefix("ssh://")
    if host.startswith("["):  # [fe80::1]:22
        return host[1:].partition("]")[0]
    return host.partition(":")[0]


# -- the file --------------------------------------------------------------------------------


def entries(hosts: Sequence[Resolved]) -> list[tuple[str, str]]:
    """(host: value, what ssh resolved) per inventory entry: consecutive hosts that fold into
    one range (`gpu[01-04]`), in the same order, and reach the same way, are one entry."""
    out: list[tuple[str, str]] = []
    group: list[Resolved] = []
    for r in [*hosts, None]:
        if r is not None and group and _folds([*group, r]):
            group.append(r)
            continue
        if group:
            out.append((fold.hosts(g.alias for g in group), _said(group)))
        group = [r] if r is not None else []
    return out


def _folds(group: Sequence[Resolved]) -> bool:
    names = [g.alias for g in group]
    pattern = fold.hosts(names)
    same_way = len({g.route for g in group}) == 1
    return same_way and len(fold.split(pattern)) == 1 and fold.unfold(pattern) == names


def _said(group: Sequence[Resolved]) -> str:
    """`root@10.0.0.[11-14]:22 via bastion`."""
    user, port, jump = group[0].route
    where = fold.hosts(g.hostname for g in group)
    if len(fold.split(where)) > 2:  # names that do not fold (gpu01.example.com, ...)
        where = f"{group[0].hostname} ... {group[-1].hostname}"
    return f"{user}@{where}:{port}" + (f" via {jump}" if jump else "")


async def inventory(
    asked: Sequence[str],
    *,
    script: str,
    workdir: str,
    config: str | Path = CONFIG,
    resolve: Resolve | None = None,
) -> tuple[str, str]:
    """The inventory's text, and a line saying what it holds."""
    if resolve is None:
        resolve = partial(openssh.ssh_g, config_file=openssh.home_config())
    names, named = chosen(asked, config_hosts(config))
    resolved = await resolve_all(names, resolve)
    jumps = jump_hosts(resolved)
    left_out = [r.alias for r in resolved if r.alias in jumps and r.alias not in named]
    nodes = [r for r in resolved if r.alias not in left_out]
    if not nodes:
        raise InitError(f"only jump hosts matched ({', '.join(left_out)}): name the nodes")
    listed = entries(nodes)
    text = render(listed, left_out, asked, script=script, workdir=workdir)
    said = f"{len(nodes)} hosts ({', '.join(h for h, _ in listed)})"
    return text, said + (f"; left out the jump host {', '.join(left_out)}" if left_out else "")


def write(path: Path, text: str, *, force: bool) -> None:
    """The inventory written where -i names it: a new file (never over one, nor through a link
    planted there: FileExistsError), or with force the old one replaced whole (a link there is
    replaced, never followed); mode 0644 by intent. Raises OSError."""
    if force:
        record.replace_whole(path, text, MODE)
    else:
        record.write_new(path, text, MODE)


def render(
    listed: Sequence[tuple[str, str]],
    left_out: Sequence[str],
    asked: Sequence[str],
    *,
    script: str,
    workdir: str,
) -> str:
    command = shlex.join(["ddptui", "init", *asked])
    lines = [
        schema.modeline(),
        f"# Written by `{command}`.",
        f"# Each host is its {CONFIG} alias, so that OpenSSH's settings for it (HostName,",
        "# User, Port, IdentityFile, ProxyJump) go on applying; beside each, what `ssh -G`",
        "# resolved. Every key: `ddptui schema`, or docs/inventory.md.",
        "defaults:",
        _line("  workdir", workdir, "the job's directory on every host"),
        "  # python: python3        # the hosts' interpreter, with torch (~ allowed)",
        "  # env: {NCCL_DEBUG: WARN} # exported to the job",
        "hosts:                     # in order: node rank 0 (the master), 1, ...",
        *(_line("  - host", host, said) for host, said in listed),
        *(f"  # left out: {h} (the others jump through it)" for h in left_out),
        "job:",
        _line("  script", script, "relative to workdir"),
        "  # args: [--epochs, 3]",
        "  nproc_per_node: auto     # one process per GPU the job sees (a CPU host: 1)",
        "  master_port: auto        # node 0 picks a free port when checked",
        "  # sync: true             # push this directory to every host's workdir first",
    ]
    return "\n".join(lines) + "\n"


def _line(key: str, value: str, comment: str) -> str:
    """`key: value   # comment`, the value as YAML reads it back (quoted where it must be)."""
    text = yaml.safe_dump({"v": value}, default_flow_style=False, width=1 << 16)
    written = f"{key}: {text.strip().removeprefix('v: ')}"
    return f"{written:<26} # {comment}"
