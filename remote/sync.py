"""`job.sync`: push the local code to every host's workdir before launch, over the open connections.

Without a shared filesystem the same script path holds different code on different hosts; the
checks report a fingerprint per host and warn when they differ (remote/checks.py). This makes
them the same: the local directory (`from`, default the inventory's own) is pushed to each host's
`workdir`, in at most two round trips per host, both on the connection the run already holds:

1. plan: the manifest (path, size, sha256, mtime of every local file not excluded) goes to the
   host, which answers which files it lacks or holds with other content (remote/sync_host.py:
   size and mtime as the last push set them, else the hash, decide);
2. put: those files go as one tar on stdin, and are written atomically with their mode and mtime.

Content decides, not mtimes alone: a `git checkout` that changed mtimes moves nothing, a file
edited on a host is put back; a second sync with nothing changed moves and reads nothing but
the manifest on the hosts. Nothing is deleted on the host (outputs and checkpoints live there).
A `transport: local` host running in the source itself is skipped; any other local workdir is
copied into like a remote one (the same code path). The host side runs on the job's python (any
python3 where that is missing), as the probe does.
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
from typing import Any

from . import probe
from .events import CodeSynced, Event
from .inventory import Inventory, Sync
from .probe_host import file_sha256
from .transport import HostError, LocalTransport, Transport

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
MARK = "DDPTUI-SYNC "  # sync_host.MARK
PLAN_TIMEOUT = 120.0  # the host hashes its copies of the files: seconds for a big tree
MAX_BYTES = 2 * 10**9  # every changed file travels in one message per host, held in memory
MIN_RATE = 1e6  # bytes/s the slowest link is expected to manage during `put`

_SOURCE = (Path(__file__).parent / "sync_host.py").read_text()
BOOT = (
    "import sys;a=sys.argv;s={'__name__':'ddptui-sync'};"
    "exec(compile(a[1],'ddptui-sync','exec'),s);sys.exit(s['main'](a[2],a[3]))"
)

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
    inv: Inventory, transports: Sequence[Transport], dests: Sequence[str | None], emit: Emit
) -> list[CodeSynced]:
    """Push `job.sync`'s source to each host's dest (its workdir), all hosts at once; one
    CodeSynced per host, emitted as it finishes. Any with `error` set means: do not launch."""
    sync = inv.job.sync
    assert sync is not None
    root = source_dir(inv, sync)
    try:
        if not root.is_dir():
            raise SourceError(f"the local source {root} is not a directory (job.sync.from)")
        files = await asyncio.to_thread(collect, root, (*DEFAULT_EXCLUDE, *sync.exclude))
    except (OSError, SourceError) as exc:
        why = str(exc) if isinstance(exc, SourceError) else f"cannot read the local source: {exc}"
        results = [_result(t, d or "", error=why) for t, d in zip(transports, dests, strict=True)]
        for r in results:
            emit(r)
        return results
    tars: dict[tuple[str, ...], asyncio.Task[bytes]] = {}  # hosts that lack the same files share

    def tar_for(names: tuple[str, ...]) -> asyncio.Task[bytes]:
        if names not in tars:
            tars[names] = asyncio.ensure_future(asyncio.to_thread(tar_of, files, names))
        return tars[names]

    async def one(t: Transport, dest: str) -> CodeSynced:
        if isinstance(t, LocalTransport) and not t.host.workdir:
            result = _result(
                t, dest, skipped="a local host without workdir runs beside the inventory"
            )
        elif isinstance(t, LocalTransport) and Path(dest).expanduser().resolve() == root:
            result = _result(t, dest, skipped="the host's workdir is the source directory")
        else:
            try:
                result = await _push_one(t, dest, files, tar_for)
            except HostError as exc:
                result = _result(t, dest, error=exc.reason)
            except OSError as exc:  # a local file that changed or went while being read
                result = _result(t, dest, error=f"cannot read the local source: {exc}")
        emit(result)
        return result

    # An SSH host without workdir is refused at load (inventory._check_sync).
    pairs = zip(transports, dests, strict=True)
    return list(await asyncio.gather(*(one(t, d or str(root)) for t, d in pairs)))


def _runs_here(t: LocalTransport, dest: str, root: Path) -> bool:
    """A local host without workdir runs beside the inventory (run.py), one with the source as
    workdir in it: nothing to copy. Any other local workdir is copied into like a remote one."""
    return not t.host.workdir or Path(dest).expanduser().resolve() == root


async def _push_one(
    t: Transport,
    dest: str,
    files: dict[str, LocalFile],
    tar_for: Callable[[tuple[str, ...]], asyncio.Task[bytes]],
) -> CodeSynced:
    t0 = time.monotonic()
    manifest = {rel: [f.size, f.sha256, f.mtime] for rel, f in files.items()}
    answer = await _step(t, "plan", dest, json.dumps(manifest).encode(), PLAN_TIMEOUT)
    need = tuple(answer.get("need", ()))
    if need:
        data = await tar_for(need)
        await _step(t, "put", dest, data, PLAN_TIMEOUT + len(data) / MIN_RATE)
    size = sum(files[rel].size for rel in need)
    took = time.monotonic() - t0
    unchanged = len(files) - len(need)
    return CodeSynced(t.host.name, t.host.node_rank, dest, len(need), size, unchanged, took)


async def _step(t: Transport, step: str, dest: str, data: bytes, timeout: float) -> dict[str, Any]:
    argv = ["sh", "-c", probe.WRAPPER, "ddptui-sync", t.host.python, BOOT, _SOURCE, step, dest]
    res = await t.run(argv, input=data, timeout=timeout)
    for line in reversed(res.stdout.decode("utf-8", "replace").splitlines()):
        if line.startswith(MARK):
            answer: dict[str, Any] = json.loads(line[len(MARK) :])
            if "error" in answer:
                raise HostError(t.host.name, f"{step}: {answer['error']}")
            return answer
    err = [s.strip() for s in res.stderr.decode("utf-8", "replace").splitlines() if s.strip()]
    why = f": {err[-1]}" if err else ""
    raise HostError(t.host.name, f"{step} failed (exit {res.code}){why}")


def _result(t: Transport, dest: str, *, error: str = "", skipped: str = "") -> CodeSynced:
    return CodeSynced(t.host.name, t.host.node_rank, dest, skipped=skipped, error=error)
