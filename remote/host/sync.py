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
  (less setuid and setgid) and mtime.
Nothing here deletes: files that exist only on the host (outputs, checkpoints) stay.

A workdir may be shared with other users, who may plant symlinks in it. So every file is made
relative to its directory's descriptor: the temporary one under a random name, exclusively
(never through a link planted ahead of it), its mode set on the open file; a directory below
the workdir that is a symlink, or a target that is one, is refused, not followed.
"""

from __future__ import annotations  # py3.8: annotations stay unevaluated

import contextlib
import errno
import json
import os
import stat

from .protocol import file_sha256

TYPE_CHECKING = False
if TYPE_CHECKING:
    import tarfile
    from typing import Any

MANIFEST_MAX = 256 << 20  # bytes of manifest a plan takes
CHUNK = 1 << 20
MTIME_SLACK = 1e-3  # seconds: a float mtime through tar's text and utime loses a little
DIR_NOFOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def serve(ch: Any, req: dict[str, Any], step: str) -> None:
    """req: {dest}; the data follows on the channel."""
    import tarfile  # here: tar's import costs every host start; only a sync needs it

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
        st = os.lstat(path)  # a symlink is never "the same": put refuses it
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            return False
        return abs(st.st_mtime - mtime) < MTIME_SLACK or file_sha256(path) == sha
    except OSError:
        return False


def put(root: str, stream: Any) -> dict[str, Any]:
    """Read as a stream (`r|`): the host never holds the whole tar in memory."""
    import tarfile

    files = size = 0
    os.makedirs(root, exist_ok=True)  # the workdir as named (a link of the user's own is fine)
    top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                parts = _parts(member)
                source = tar.extractfile(member)
                if source is None:
                    raise ValueError(f"{member.name}: not a regular file")
                where = _open_dirs(top, parts[:-1], member.name)
                try:
                    _write(where, parts[-1], source, member)
                finally:
                    os.close(where)
                files, size = files + 1, size + member.size
    finally:
        os.close(top)
    return {"files": files, "bytes": size}


def _parts(member: tarfile.TarInfo) -> list[str]:
    """Where a member goes: a regular file strictly inside root (the launcher made the tar, but
    a path that climbs out is refused all the same)."""
    name = member.name
    parts = name.split("/")
    if not member.isreg() or name.startswith("/") or ".." in parts or "" in parts:
        raise ValueError(f"refusing {name!r}: not a plain relative file path")
    return parts


def _open_dirs(top: int, dirs: list[str], name: str) -> int:
    """The directory a file goes in, made if missing, never reached through a symlink."""
    fd = os.dup(top)
    for k, part in enumerate(dirs):
        with contextlib.suppress(FileExistsError):
            os.mkdir(part, 0o777, dir_fd=fd)
        try:
            inner = os.open(part, DIR_NOFOLLOW, dir_fd=fd)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                where = "/".join(dirs[: k + 1])
                why = f"refusing {name!r}: {where} is a symlink or not a directory"
                raise ValueError(why) from None
            raise
        os.close(fd)
        fd = inner
    return fd


def _write(where: int, name: str, source: Any, member: tarfile.TarInfo) -> None:
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISLNK(os.stat(name, dir_fd=where, follow_symlinks=False).st_mode):
            raise ValueError(f"refusing {member.name!r}: a symlink is there")
    # Hosts sharing a filesystem all write here at once: each its own temporary file.
    tmp = f"{name}.ddptui-sync.{os.urandom(8).hex()}"
    fd = os.open(tmp, NEW, 0o600, dir_fd=where)
    try:
        with open(fd, "wb") as f:
            while True:
                block = source.read(CHUNK)
                if not block:
                    break
                f.write(block)
            f.flush()
            os.fchmod(f.fileno(), member.mode & 0o1777)  # never setuid or setgid
            os.utime(f.fileno(), (member.mtime, member.mtime))
        os.replace(tmp, name, src_dir_fd=where, dst_dir_fd=where)
    except BaseException:
        os.unlink(tmp, dir_fd=where)
        raise


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return str(exc)
