"""A rank's lines on a node's stream, host side: `[3]:hello` is rank 3's line "hello"; a line
with no tag is the node's own.

The tag is torchrun's own (`--tee`), written here once for both sides: tail.py and the
supervisor (daemon.py) write it where torchrun does not, linebuf.py has the job's own python
write it (FORMAT, put into its source: this package is not importable there), and the launcher
reads it by TAG (remote/run/ranktag.py).
"""

from __future__ import annotations

import re

FORMAT = "[%d]:"  # a rank's tag, its global rank in it
TAG = r"\[(\d{1,9})\]:"  # FORMAT read back: the rank as int() reads it
TAGGED = re.compile(r"^(?:" + TAG + r")?(.*)$", re.MULTILINE)  # the last line may be partial


def tag(rank: int) -> bytes:
    """The bytes that start each of rank's lines."""
    return (FORMAT % rank).encode()


def untag(text: str) -> list[tuple[int | None, str]]:
    """[(rank or None, line)] for each line of text, the last one even without its newline."""
    return [(int(rank) if rank else None, line) for rank, line in TAGGED.findall(text)]


def prefix(data: bytes) -> bytes:
    """The tag data starts with (b"" if none): a piece of a long line repeats it."""
    if data.startswith(b"[") and b"]:" in data[:12]:
        return data[: data.index(b"]:") + 2]
    return b""
