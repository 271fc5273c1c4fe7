"""`job.sync`, launcher side: the local code pushed to every host's workdir before launch.

Without a shared filesystem the same script path holds different code on different hosts; the
checks report a fingerprint per host and warn when they differ (remote/checks/judge.py). This makes
them the same: the local directory (`from`, default the inventory's own) is pushed to each host's
`workdir`, in at most two round trips per host, both on the connection the run already holds:

1. plan: the manifest (path, size, sha256, mtime of every local file not excluded) goes to the
   host's agent, which answers which files it lacks or holds with other content
   (remote/host/sync.py: size and mtime as the last push set them, else the hash, decide);
2. put: those files go as one tar, and are written atomically with their mode and mtime.

Content decides, not mtimes alone: a `git checkout` that changed mtimes moves nothing, a file
edited on a host is put back; a second sync with nothing changed moves and reads nothing but
the manifest on the hosts. Nothing is deleted on the host (outputs and checkpoints live there).
A `transport: local` host running in the source itself is skipped; any other local workdir is
copied into like a remote one (the same code path). The host side runs in the agent, on the job's
python (any python3 where that is missing), as the probe does.
"""

from __future__ import annotations

import asyncio
import fnmatch
import io
import json
import os
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ddptui.remote.agents import ops
from ddptui.remote.agents.agent import Agent
from ddptui.remote.agents.transport import HostError
from ddptui.remote.events import CodeSynced, Event
from ddptui.remote.host.protocol import file_sha256
from ddptui.remote.inventory import Host, Inventory, Sync

# Never code: version control, caches, virtualenvs (interpreter-specific, often huge) and the
# output directories of common trainers (pushing them would overwrite the host's own results).
DEFAULT_EXCLUDE = (
    ".git",
    ".hg",
    ".svn",
    "__pycache__",
    "*.pyc",
    ".venv",
    "venv",
    ".tox",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".ipynb_checkpoints",
    ".DS_Store",
    "runs",
    "wandb",
    "lightning_logs",
    # Secrets: a code push must not spread keys and tokens to every host.
    ".ssh",
    ".aws",
    ".env",
    "*.pem",
    ".netrc",
)
PLAN_TIMEOUT = 120.0  # the host hashes its copies of the files: seconds for a big tree
MAX_BYTES = 2 * 10**9  # every changed file travels in one message per host, held in memory
MIN_RATE = 1e6  # bytes/s the slowest link is expected to manage during `put`

Emit = Callable[[Event], None]


@dataclass(frozen=True)
class LocalFile:
    path: Path
    size: int
    sha256: str
    mode: int
    mtime: float


def excluded(rel: str, patterns: Sequence[str]) -> bool:
    """A pattern without `/` matches any name on the path (`__pycache__`, `*.ckpt`); one with
    `/` inside matches the path from the source (`data/raw/*`). A trailing `/` is ignored."""
    names = rel.split("/")
    for pattern in patterns:
        p = pattern.strip("/")
        if "/" in p:
            if fnmatch.fnmatchcase(rel, p) or fnmatch.fnmatchcase(rel, p + "/*"):
                return True
        elif any(fnmatch.fnmatchcase(n, p) for n in names):
            return True
    return False


class SourceError(Exception):
    """The local source cannot be pushed as it is; the message says what to change."""


def collect(
    root: Path, patterns: Sequence[str], max_bytes: int = MAX_BYTES
) -> dict[str, LocalFile]:
    """Every file under root not excluded, by its path relative to root (`/`-separated).
    Symlinked directories are not followed (a loop, or a dataset mounted into the tree).
    More than max_bytes in all is refused before anything is read: a dataset left in."""
    stats: dict[str, tuple[Path, os.stat_result]] = {}
    for top, dirs, files in os.walk(root):
        rel_top = os.path.relpath(top, root)
        prefix = "" if rel_top == "." else rel_top.replace(os.sep, "/") + "/"
        dirs[:] = sorted(d for d in dirs if not excluded(prefix + d, patterns))
        for name in sorted(files):
            rel, path = prefix + name, Path(top, name)
            if not excluded(rel, patterns) and path.is_file():  # not a dangling link, a socket
                stats[rel] = (path, path.stat())
    total = sum(st.st_size for _, st in stats.values())
    if total > max_bytes:
        big = sorted(stats, key=lambda rel: -stats[rel][1].st_size)[:3]
        raise SourceError(
            f"{root} holds {total / 1e9:.1f} GB to push (largest: {', '.join(big)}): more than "
            f"{max_bytes / 1e9:g} GB is data, not code; add it to job.sync.exclude"
        )
    return {
        rel: LocalFile(path, st.st_size, file_sha256(str(path)), st.st_mode, st.st_mtime)
        for rel, (path, st) in stats.items()
    }


def tar_of(files: dict[str, LocalFile], names: Sequence[str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:", format=tarfile.PAX_FORMAT) as tar:
        for rel in names:
            f = files[rel]
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = f.size, f.mode & 0o7777, f.mtime
            with f.path.open("rb") as data:
                tar.addfile(info, data)
    return buf.getvalue()


def source_dir(inv: Inventory, sync: Sync) -> Path:
    return (inv.path.resolve().parent / Path(sync.source).expanduser()).resolve()


async def push(
    inv: Inventory, agents: Sequence[Agent | None], dests: Sequence[str | None], emit: Emit
) -> list[CodeSynced]:
    """Push `job.sync`'s source to each host's dest (its workdir), all hosts at once; one
    CodeSynced per host, emitted as it finishes. Any with `error` set means: do not launch."""
    sync = inv.job.sync
    assert sync is not None
    root = source_dir(inv, sync)
    hosts = inv.hosts
    try:
        if not root.is_dir():
            raise SourceError(f"the local source {root} is not a directory (job.sync.from)")
        files = await asyncio.to_thread(collect, root, (*DEFAULT_EXCLUDE, *sync.exclude))
    except (OSError, SourceError) as exc:
        why = str(exc) if isinstance(exc, SourceError) else f"cannot read the local source: {exc}"
        results = [_result(h, d or "", error=why) for h, d in zip(hosts, dests, strict=True)]
        for r in results:
            emit(r)
        return results
    tars: dict[tuple[str, ...], asyncio.Task[bytes]] = {}  # hosts that lack the same files share

    def tar_for(names: tuple[str, ...]) -> asyncio.Task[bytes]:
        if names not in tars:
            tars[names] = asyncio.ensure_future(asyncio.to_thread(tar_of, files, names))
        return tars[names]

    async def one(host: Host, agent: Agent | None, dest: str) -> CodeSynced:
        if host.transport == "local" and not host.workdir:
            result = _result(
                host, dest, skipped="a local host without workdir runs beside the inventory"
            )
        elif host.transport == "local" and Path(dest).expanduser().resolve() == root:
            result = _result(host, dest, skipped="the host's workdir is the source directory")
        elif agent is None:
            result = _result(host, dest, error="not connected")
        else:
            try:
                result = await _push_one(agent, dest, files, tar_for)
            except HostError as exc:
                result = _result(host, dest, error=exc.reason)
            except OSError as exc:  # a local file that changed or went while being read
                result = _result(host, dest, error=f"cannot read the local source: {exc}")
        emit(result)
        return result

    # An SSH host without workdir is refused at load (remote/inventory/load.py).
    triples = zip(hosts, agents, dests, strict=True)
    return list(await asyncio.gather(*(one(h, a, d or str(root)) for h, a, d in triples)))


async def _push_one(
    agent: Agent,
    dest: str,
    files: dict[str, LocalFile],
    tar_for: Callable[[tuple[str, ...]], asyncio.Task[bytes]],
) -> CodeSynced:
    t0 = time.monotonic()
    manifest = {rel: [f.size, f.sha256, f.mtime] for rel, f in files.items()}
    data = json.dumps(manifest).encode()
    lacked = await ops.sync_plan(agent, dest, data, PLAN_TIMEOUT)
    need = tuple(rel for rel in lacked if rel in files)
    if need:
        tar = await tar_for(need)
        await ops.sync_put(agent, dest, tar, PLAN_TIMEOUT + len(tar) / MIN_RATE)
    size = sum(files[rel].size for rel in need)
    took = time.monotonic() - t0
    unchanged = len(files) - len(need)
    host = agent.transport.host
    return CodeSynced(host.name, host.node_rank, dest, len(need), size, unchanged, took)


def _result(host: Host, dest: str, *, error: str = "", skipped: str = "") -> CodeSynced:
    return CodeSynced(host.name, host.node_rank, dest, skipped=skipped, error=error)
