"""The host side of `job.sync`: what of the launcher's files this host lacks, then taking them.

Two ops of the agent (python3 >= 3.8, standard library only), their data on the channel (a
manifest can outgrow one frame), each answering one JSON object:

- sync-plan: the data is {relpath: [size, sha256, mtime]}; answers {"need": [relpath, ...]}:
  the files missing here or whose content differs. A file of the same size and mtime is the one
  the last put wrote (it set that mtime); one of the same size but another mtime is hashed (a `git
  checkout` changes mtimes, not content), so what decides is the content, yet a second sync
  with nothing changed reads nothing.
- sync-put: the data is an uncompressed tar of those files, read as it comes; each is written beside
  its target and renamed over it (a reader never sees half a file), with the launcher's mode
  and mtime.
Nothing here deletes: files that exist only on the host (outputs, checkpoints) stay.
"""

from __future__ import annotations  # py3.8: annotations stay unevaluated

import hashlib
import json
import os
import socket
import stat
import tarfile

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MANIFEST_MAX = 256 << 20  # bytes of manifest a plan takes
CHUNK = 1 << 20
MTIME_SLACK = 1e-3  # seconds: a float mtime through tar's text and utime loses a little


def serve(ch: Any, req: dict[str, Any], step: str) -> None:
    """req: {dest}; the data follows on the channel."""
    root = os.path.expanduser(req["dest"])
    try:
        if step == "plan":
            out = plan(root, json.loads(ch.read_all(MANIFEST_MAX)))
        else:
            out = put(root, ch.reader())
    except (OSError, tarfile.TarError, ValueError) as exc:
        out = {"error": _why(exc)}
    ch.answer(out)


def plan(root: str, want: dict[str, list[Any]]) -> dict[str, Any]:
    return {"need": [rel for rel, file in want.items() if not _same(root, rel, *file)]}


def _same(root: str, rel: str, size: int, sha: str, mtime: float) -> bool:
    path = os.path.join(root, *rel.split("/"))
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            return False
        return abs(st.st_mtime - mtime) < MTIME_SLACK or file_sha256(path) == sha
    except OSError:
        return False


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def put(root: str, stream: Any) -> dict[str, Any]:
    """Read as a stream (`r|`): the host never holds the whole tar in memory."""
    files = size = 0
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            target = _target(root, member)
            source = tar.extractfile(member)
            if source is None:
                raise ValueError(f"{member.name}: not a regular file")
            os.makedirs(os.path.dirname(target), exist_ok=True)
            # Hosts sharing a filesystem all write here at once: each its own temporary file.
            tmp = f"{target}.ddptui-sync.{socket.gethostname()}.{os.getpid()}"
            try:
                with open(tmp, "wb") as f:
                    while block := source.read(CHUNK):
                        f.write(block)
                os.chmod(tmp, member.mode & 0o7777)
                os.utime(tmp, (member.mtime, member.mtime))
                os.replace(tmp, target)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            files, size = files + 1, size + member.size
    return {"files": files, "bytes": size}


def _target(root: str, member: tarfile.TarInfo) -> str:
    """Where a member goes: a regular file strictly inside root (the launcher made the tar, but
    a path that climbs out is refused all the same)."""
    name = member.name
    parts = name.split("/")
    if not member.isreg() or name.startswith("/") or ".." in parts or "" in parts:
        raise ValueError(f"refusing {name!r}: not a plain relative file path")
    return os.path.join(root, *parts)


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return str(exc)
